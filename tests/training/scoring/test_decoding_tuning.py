"""Tuning the decoding on validation pairs traces one search per structure."""

import string

import numpy as np
import pytest
import tensorflow as tf

from kseq.data import CharacterTokenizer
from kseq.decoding import BeamSearch
from kseq.export.translator import SOURCE_SPEC, translate_function
from kseq.training.scoring.selection import DecodingSettings, PenaltySharingTranslators
from support import random_batch, small_model

SOURCES = tf.constant(["abc", "hello", "zz", ""])


def test_candidates_differing_in_their_penalty_share_one_trace_and_score_as_their_own_search():
    model = small_model("rnn", dict(attention="dot"))  # a recurrent search traces fastest
    model(random_batch())
    tokenizer = CharacterTokenizer(string.ascii_lowercase)

    def translator(search):
        return tf.function(translate_function(model, tokenizer, tokenizer, max_length=10, search=search),
                           input_signature=[SOURCE_SPEC], autograph=False)

    made = []
    translators = PenaltySharingTranslators(lambda settings, search: made.append(settings) or translator(search), 10)
    candidates = [DecodingSettings(3, penalty, size, 1, None, 1.0) for size in (0, 3) for penalty in (0.0, 2.0)]
    for settings in candidates:
        shared = translators(settings)(SOURCES)
        own = translator(settings.search(10))(SOURCES)
        # Scores are log P / penalty: a penalty left at another candidate's value would change them.
        np.testing.assert_allclose(shared["score"].numpy(), own["score"].numpy(), rtol=1e-6)
        assert shared["translation"].numpy().tolist() == own["translation"].numpy().tolist()
    assert [settings.no_repeat_ngram for settings in made] == [0, 3], "one translator a structure"
    assert all(translators(settings).experimental_get_tracing_count() == 1 for settings in candidates)


def test_a_penalty_variable_must_be_a_float32_scalar():
    with pytest.raises(ValueError, match="`length_penalty` as a variable must be a scalar float32"):
        BeamSearch(10, length_penalty=tf.Variable([0.6, 1.0]))
    with pytest.raises(ValueError, match="`length_penalty` must be a number"):
        BeamSearch(10, length_penalty="0.6")
