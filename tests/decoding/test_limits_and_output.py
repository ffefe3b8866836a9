"""The searches' one limits object (kseq.decoding.Limits), `generate` with a
search object, and the one path from a search's ids to text."""

import numpy as np
import pytest
import tensorflow as tf

from kseq.data.character_tokenizer import CharacterTokenizer
from kseq.decoding import BeamSearch, GreedySearch, Limits, Sampler
from kseq.decoding.output import best_hypotheses, decoded_text
from support import small_model


def test_every_search_holds_its_limits_made_from_keywords_or_given():
    limits = Limits(12, max_length_ratio=1.5, no_repeat_ngram_size=3, max_ngram_count=2)
    assert GreedySearch(12, max_length_ratio=1.5, no_repeat_ngram_size=3, max_ngram_count=2).limits == limits
    for search in (GreedySearch(limits=limits), BeamSearch(limits=limits, beam_size=2),
                   Sampler(limits=limits, top_k=3)):
        assert search.limits is limits and search.max_length == 12
    assert Limits(64, max_length_ratio=1.5).source_limit(10) == 20, "ceil(1.5 x 10) + 5"
    assert Limits(64, max_length_ratio=1.5, length_slack=0).source_limit(10) == 15
    assert Limits(16, max_length_ratio=3.0).source_limit(10) == 16, "never over max_length"
    assert Limits(16).source_limit(3) == 16, "no ratio: max_length alone"


@pytest.mark.parametrize("make, message", [
    (lambda: GreedySearch(), "`max_length` or `limits`"),
    (lambda: GreedySearch(8, limits=Limits(8)), "not both; got `limits` and `max_length`"),
    (lambda: BeamSearch(limits=Limits(8), no_repeat_ngram_size=2), "not both; got `limits` and `no_repeat_ngram_size`"),
    (lambda: Sampler(limits=(8,)), "`limits` must be a kseq.decoding.Limits"),
    (lambda: Limits(0), "`max_length` must be >= 1"),
    (lambda: Limits(8, max_length_ratio=0), "`max_length_ratio` must be"),
    (lambda: Limits(8, length_slack=-1), "`length_slack` must be >= 0"),
    (lambda: Limits(8, max_ngram_count=0), "`max_ngram_count` must be >= 1"),
])
def test_bad_limits_are_named(make, message):
    with pytest.raises((ValueError, TypeError), match=message):
        make()


def test_generate_takes_a_search_object_and_matches_the_keyword_form():
    model = small_model("transformer", {}, dropout=0.0)
    source = np.array([[5, 6, 7, 0], [8, 9, 0, 0]], "int32")
    limits = Limits(8, max_length_ratio=1.0, no_repeat_ngram_size=2)
    by_keywords = model.generate(source, max_length=8, method="beam", beam_size=3, max_length_ratio=1.0,
                                 no_repeat_ngram_size=2, return_scores=True)
    by_object = model.generate(source, search=BeamSearch(limits=limits, beam_size=3), return_scores=True)
    np.testing.assert_array_equal(by_keywords[0], by_object[0])
    np.testing.assert_allclose(by_keywords[1], by_object[1], rtol=1e-6)
    greedy = model.generate(source, search=GreedySearch(limits=limits))
    np.testing.assert_array_equal(greedy, model.generate(source, max_length=8, max_length_ratio=1.0,
                                                         no_repeat_ngram_size=2))
    with pytest.raises(ValueError, match="over the model's max_length"):
        model.generate(source, search=GreedySearch(model.length_limit + 1))


def test_decoded_text_takes_the_best_beam_and_cuts_padding():
    tokenizer = CharacterTokenizer("abc")
    a, b, c = (int(tokenizer.tokenize([letter]).to_tensor()[0, 0]) for letter in "abc")
    beams = tf.constant([[[a, b, 2, 0, 0], [c, 2, 0, 0, 0]], [[c, c, c, 2, 0], [a, 2, 0, 0, 0]]], tf.int32)
    text, ids = decoded_text(tokenizer, beams)
    assert [t.decode() for t in text.numpy()] == ["ab", "ccc"]
    assert ids.shape == (2, 4), "the all-PAD last column is cut"
    np.testing.assert_array_equal(best_hypotheses(beams), beams[:, 0])
    np.testing.assert_array_equal(best_hypotheses(beams[:, 0]), beams[:, 0])
