"""Per-row length limits (`max_length_ratio`): every search, and the errors."""

import numpy as np
import pytest
import tensorflow as tf

from kseq.decoding import BeamSearch, GreedySearch, Sampler
from kseq.decoding import Limits
from kseq.decoding.constraints import source_length_limits
from kseq.models import RNNLanguageModel
from test_repeated_ngrams import best_ids
from test_searches import EOS, PAD, VOCAB

SEARCHES = {
    "greedy": lambda **options: GreedySearch(8, **options),
    "beam": lambda **options: BeamSearch(8, beam_size=3, **options),
    "sample": lambda **options: Sampler(8, seed=3, **options),
}


def never_ending_step(tokens, state, index):
    """Token 3 by far, EOS equally unlikely at every step (so a beam with a
    length penalty prefers the longest hypothesis it may make)."""
    logits = np.full((VOCAB, VOCAB), -10.0, "float32")
    logits[:, 3], logits[:, EOS] = 10.0, 0.0
    return tf.gather(logits, tokens), state


def lengths(ids):
    return [int(np.flatnonzero(row == EOS)[0]) + 1 if EOS in row else len(row) for row in ids]


@pytest.mark.parametrize("method", SEARCHES)
def test_each_row_ends_with_eos_at_its_limit(method):
    search = SEARCHES[method]()
    free = best_ids(search(never_ending_step, (), 3)[0]).numpy()
    assert lengths(free) == [8, 8, 8]  # the control: EOS is never chosen
    ids, scores = search(never_ending_step, (), 3, length_limits=tf.constant([2, 5, 8]))
    ids = best_ids(ids).numpy()
    assert lengths(ids) == [2, 5, 8]
    assert [row[n - 1] for row, n in zip(ids, [2, 5, 8])] == [EOS, EOS, EOS]
    assert np.all(ids[0, 2:] == PAD) and np.all(np.isfinite(scores))


def test_limits_follow_the_source_tokens():
    source = tf.constant([[5, 6, 7, 0], [5, 0, 0, 0], [0, 0, 0, 0], [5, 6, 7, 8]])
    assert source_length_limits(source, Limits(10, max_length_ratio=1.5)).numpy().tolist() == [10, 7, 5, 10]
    assert source_length_limits(source, Limits(100, max_length_ratio=0.5)).numpy().tolist() == [7, 6, 5, 7]


@pytest.mark.parametrize("method", SEARCHES)
@pytest.mark.parametrize("ratio", [0, -1.0, "2", float("nan")])
def test_a_bad_ratio_is_named(method, ratio):
    with pytest.raises(ValueError, match="max_length_ratio"):
        SEARCHES[method](max_length_ratio=ratio)


def test_a_language_model_has_no_source_to_limit_by():
    model = RNNLanguageModel(20, embed_dim=8, units=8)
    with pytest.raises(ValueError, match="max_length_ratio.*source"):
        model.generate(np.array([[4, 5]], "int32"), max_length=4, max_length_ratio=1.0)
