"""model.generate through greedy, beam and sampling searches."""

import functools

import numpy as np
import pytest
import tensorflow as tf

from kseq.decoding import BeamSearch, length_penalty
from kseq.layers.cached_multi_head_attention import CachedMultiHeadAttention
from support import assert_close, config_id, small_model, uncached_greedy

CONFIGS = [
    ("transformer", dict(norm_first=False)),
    ("transformer", dict(norm_first=True, share_embeddings=True)),
    ("rnn", dict(cell="lstm", attention="dot")),
    ("rnn", dict(cell="gru", attention="bahdanau", peeky=True, bidirectional=True, reverse_source=True)),
]
ENTRIES = pytest.mark.parametrize("entry", CONFIGS, ids=config_id)
# Input feeding joins the tests where searches must agree with each other and
# with the teacher-forced pass; the others check searches, not models.
INPUT_FEEDING = ("rnn", dict(cell="lstm", attention="general", input_feeding=True))
AGREEMENT_ENTRIES = pytest.mark.parametrize("entry", CONFIGS + [INPUT_FEEDING], ids=config_id)
EOS, MAX_LENGTH = 2, 10
SOURCE_LENGTHS = [2, 9, 4, 7, 3, 8, 5, 6, 1, 9, 3, 6]


def sources():
    rng = np.random.default_rng(7)
    ids = rng.integers(4, 30, (len(SOURCE_LENGTHS), max(SOURCE_LENGTHS))).astype("int32")
    for row, length in enumerate(SOURCE_LENGTHS):
        ids[row, length:] = 0
    return ids


def output_lengths(ids):
    return [int(np.flatnonzero(row == EOS)[0]) + 1 if EOS in row else len(row) for row in ids]


@functools.lru_cache(maxsize=None)
def _eos_prone_model(kind, config_items):
    model = small_model(kind, dict(config_items), dropout=0.0)
    source = sources()
    model({"source_ids": source, "target_ids": source})  # builds it
    weights = [w.numpy() for w in model.weights]
    bias = model.output_bias if model.output_projection is None else model.output_projection.bias
    eos = np.eye(bias.shape[0], dtype="float32")[EOS]
    for scale in (2.0, 3.0):
        for weight, value in zip(model.weights, weights):
            weight.assign(value * scale if value.ndim >= 2 else value)
        for amount in np.linspace(-4.0, 8.0, 49):
            bias.assign(weights[_index_of(model, bias)] + eos * amount)
            lengths = output_lengths(np.asarray(model.generate(source, max_length=MAX_LENGTH)))
            if len(set(lengths)) >= 3 and any(1 < n < MAX_LENGTH for n in lengths):
                return model
    raise AssertionError("test setup: no weight scale and EOS bias give mixed lengths")


def _index_of(model, variable):
    return [id(w) for w in model.weights].index(id(variable))


def eos_prone_model(entry):
    """A small random model whose greedy outputs end at >= 3 different
    steps, some mid-sequence: weights scaled up so that logits vary from
    step to step, and an EOS bias searched for. Shared within a process
    (tests only decode with it)."""
    kind, config = entry
    return _eos_prone_model(kind, tuple(sorted(config.items()))), sources()



@AGREEMENT_ENTRIES
def test_cached_decoding_equals_uncached_decoding(entry):
    model, source = eos_prone_model(entry)
    cached = np.asarray(model.generate(source, max_length=MAX_LENGTH))
    assert np.array_equal(cached, uncached_greedy(model, {"source_ids": source}, MAX_LENGTH))


@ENTRIES
@pytest.mark.parametrize(
    "options",
    [dict(method="greedy"), dict(method="beam", beam_size=3), dict(method="sample", seed=3)],
    ids=["greedy", "beam", "sample"],
)
def test_generation_stops_at_eos_and_pads_after_it(entry, options):
    model, source = eos_prone_model(entry)
    ids = np.asarray(model.generate(source, max_length=MAX_LENGTH, **options))
    assert ids.dtype == np.int32 and ids.shape[0] == len(source)
    lengths = output_lengths(ids)
    assert ids.shape[1] == max(lengths), "PAD-only columns are trimmed"
    for row, length in zip(ids, lengths):
        assert np.all(row[: length - 1] >= 3), "no PAD, BOS or EOS before the end"
        assert np.all(row[length:] == 0), "PAD after EOS"


@AGREEMENT_ENTRIES
@pytest.mark.parametrize("options", [dict(method="greedy"), dict(method="beam", beam_size=3, num_return=2),
                                     dict(method="beam", beam_size=3, num_return=2, patience=1.0)],
                         ids=["greedy", "beam", "beam-patience"])
def test_each_row_of_a_mixed_batch_decodes_as_if_alone(entry, options):
    model, source = eos_prone_model(entry)
    together, scores = model.generate(source, max_length=MAX_LENGTH, return_scores=True, **options)
    for row, length in enumerate(SOURCE_LENGTHS):
        alone, alone_scores = model.generate(
            source[row : row + 1, :length], max_length=MAX_LENGTH, return_scores=True, **options
        )
        alone = np.asarray(alone)[0]
        width = alone.shape[-1]
        assert np.array_equal(np.asarray(together)[row][..., :width], alone)
        assert np.all(np.asarray(together)[row][..., width:] == 0)
        assert_close(np.asarray(scores)[row], np.asarray(alone_scores)[0], atol=1e-4)


@AGREEMENT_ENTRIES
def test_beam_of_one_is_greedy(entry):
    model, source = eos_prone_model(entry)
    greedy, greedy_scores = model.generate(source, max_length=MAX_LENGTH, return_scores=True)
    beam = model.generate(source, max_length=MAX_LENGTH, method="beam", beam_size=1, length_penalty=0.0)
    assert np.array_equal(beam, greedy)
    # With a length penalty one beam may search on; it never scores worse.
    _, scores = model.generate(
        source, max_length=MAX_LENGTH, method="beam", beam_size=1, return_scores=True
    )
    greedy_penalised = greedy_scores / length_penalty(output_lengths(np.asarray(greedy)), 0.6)
    assert np.all(np.asarray(scores) >= np.asarray(greedy_penalised) - 1e-5)


@ENTRIES
def test_n_best_lists_are_ranked(entry):
    model, source = eos_prone_model(entry)
    ids, scores = model.generate(
        source, max_length=MAX_LENGTH, method="beam", beam_size=4, num_return=3, return_scores=True
    )
    ids, scores = np.asarray(ids), np.asarray(scores)
    assert ids.shape[:2] == (len(source), 3) and scores.shape == (len(source), 3)
    assert np.all(np.diff(scores, axis=1) <= 1e-6), "best first"
    assert np.all(np.isfinite(scores))
    best = np.asarray(model.generate(source, max_length=MAX_LENGTH, method="beam", beam_size=4))
    assert np.array_equal(ids[:, 0, : best.shape[1]], best)
    for row in range(len(source)):  # n distinct hypotheses per row
        assert len({tuple(h) for h in ids[row]}) == 3


@pytest.mark.parametrize("entry", [CONFIGS[0], CONFIGS[3]], ids=config_id)
@pytest.mark.parametrize(
    "options",
    [dict(method="greedy"), dict(method="beam", beam_size=3, num_return=2)],
    ids=["greedy", "beam"],
)
def test_xla_compiled_generation_equals_graph_generation(entry, options):
    model, source = eos_prone_model(entry)
    plain, plain_scores = model.generate(source, max_length=MAX_LENGTH, return_scores=True, **options)
    compiled, scores = model.generate(
        source, max_length=MAX_LENGTH, return_scores=True, jit_compile=True, **options
    )
    assert np.array_equal(compiled, plain)
    assert_close(scores, plain_scores, atol=1e-4)


@pytest.mark.parametrize("entry", [CONFIGS[1], CONFIGS[2], INPUT_FEEDING], ids=config_id)
def test_sampling_reproduces_by_seed_and_top_k_1_is_greedy(entry):
    model = small_model(*entry, dropout=0.0)
    source = sources()
    sample = lambda **options: np.asarray(
        model.generate(source, max_length=MAX_LENGTH, method="sample", temperature=2.0, **options)
    )
    assert np.array_equal(sample(seed=5), sample(seed=5))
    assert not np.array_equal(sample(seed=5), sample(seed=6))
    assert not np.array_equal(sample(), sample()), "seed=None draws afresh"
    greedy = np.asarray(model.generate(source, max_length=MAX_LENGTH))
    assert np.array_equal(sample(top_k=1, seed=9), greedy)


def test_generate_traces_once_per_set_of_options():
    model = small_model("transformer", {}, dropout=0.0)
    source = sources()
    for rows, seed in ((6, 1), (2, 2), (4, 3)):
        model.generate(source[:rows, : 3 + rows], max_length=MAX_LENGTH, method="sample", seed=seed)
    (function,) = model._generate_cache.functions.values()
    assert function.experimental_get_tracing_count() == 1


def bigrams(row):
    tokens = [int(t) for t in row if t != 0]
    return list(zip(tokens, tokens[1:]))


def repeated_bigrams(row):
    grams = bigrams(row)
    return len(grams) - len(set(grams))


def most_bigram_occurrences(row):
    grams = bigrams(row)
    return max(grams.count(gram) for gram in grams)


@functools.lru_cache(maxsize=None)
def looping_model():
    """A recurrent model whose output bias makes 7 and 8 win every step and
    EOS never. Shared within a process (tests only decode with it), so the
    unconstrained control searches are traced once for both tests."""
    model = small_model(*CONFIGS[3], dropout=0.0)
    model({"source_ids": sources(), "target_ids": sources()})  # builds it
    bias = model.output_bias if model.output_projection is None else model.output_projection.bias
    loop = np.zeros(bias.shape[0], "float32")
    loop[[7, 8]], loop[EOS] = 30.0, -30.0
    bias.assign(loop)
    return model


@pytest.mark.parametrize("method", ["greedy", "beam", "sample"])
def test_no_repeat_ngram_size_stops_a_looping_model(method):
    """A recurrent model here; the Transformer's is tests/export/test_export.py's."""
    model, source = looping_model(), sources()
    generate = lambda **options: np.asarray(
        model.generate(source, max_length=MAX_LENGTH, method=method, seed=1, **options)
    )
    assert all(repeated_bigrams(row) > 0 for row in generate())  # the control loops
    constrained = generate(no_repeat_ngram_size=2)
    assert constrained.shape == (len(source), MAX_LENGTH)
    assert all(repeated_bigrams(row) == 0 for row in constrained)
    guarded = generate(no_repeat_ngram_size=2, max_ngram_count=2)  # a bigram at most twice
    assert all(most_bigram_occurrences(row) <= 2 for row in guarded)
    if method != "beam":  # the loop comes back once: the guard allows it
        assert all(most_bigram_occurrences(row) == 2 for row in guarded)


@pytest.mark.parametrize("method", ["greedy", "beam", "sample"])
def test_max_length_ratio_ends_each_row_by_its_source_length(method):
    model, source = looping_model(), sources()
    generate = lambda **options: np.asarray(
        model.generate(source, max_length=MAX_LENGTH, method=method, seed=1, **options)
    )
    assert output_lengths(generate()) == [MAX_LENGTH] * len(source)  # the control never ends
    limited = generate(max_length_ratio=0.5)
    # ceil(0.5 x source tokens) + 5, at most MAX_LENGTH; the last token is EOS.
    assert output_lengths(limited) == [min(-(-n // 2) + 5, MAX_LENGTH) for n in SOURCE_LENGTHS]
    assert all(row[length - 1] == EOS for row, length in zip(limited, output_lengths(limited)))


@pytest.mark.parametrize("entry", CONFIGS[:2], ids=config_id)
def test_a_transformer_cache_that_grows_decodes_as_a_preallocated_one(entry):
    model, source = eos_prone_model(entry)
    search = BeamSearch(MAX_LENGTH, beam_size=3, num_return=2)
    grown, grown_scores = tf.function(lambda ids: model.search(ids, search))(source)
    fixed, fixed_scores = tf.function(lambda ids: model.search(ids, search, fixed_shapes=True))(source)
    assert np.array_equal(grown, fixed)
    assert_close(grown_scores, fixed_scores, atol=1e-5)


def test_a_cache_grows_only_where_shapes_may_change():
    attention = CachedMultiHeadAttention(num_heads=2, key_dim=4)
    grown = tf.function(lambda: attention.init_cache(3))()
    assert grown["key"].shape == (3, 2, 0, 4)
    traced = tf.function(lambda: attention.init_cache(3)).get_concrete_function().structured_outputs
    assert traced["key"].shape.as_list() == [None, 2, None, 4]  # unknown length: the step appends
    with pytest.raises(ValueError, match="grows inside a tf.function only"):
        attention.init_cache(3)
