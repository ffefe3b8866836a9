"""How recurrent layers run: cuDNN for teacher-forced passes where keras
picks it, keras' portable loop in every search and export.

A CPU has no cuDNN, so these tests make keras believe a GPU is present
(`keras_sees_a_gpu`): keras then writes its cuDNN op into traced graphs,
which is all the graph checks need. tests/test_gpu.py repeats them on a
real GPU.
"""

import importlib

import numpy as np
import pytest
import tensorflow as tf
from keras.src.trainers.trainer import model_supports_jit

from kseq.decoding import BeamSearch, GreedySearch
from kseq.export import classify_function
from kseq.layers import RNNEncoder
from kseq.layers.recurrent import cudnn_accepts
from kseq.models import ConditionedGenerator, RNNLanguageModel, RNNSeq2Seq, SequenceClassifier
from support import assert_close, cudnn_ops, graph_op_types

IDS = tf.TensorSpec([None, None], tf.int32)


@pytest.fixture
def keras_sees_a_gpu(monkeypatch):
    keras_rnn = importlib.import_module("keras.src.backend.tensorflow.rnn")
    monkeypatch.setattr(keras_rnn, "_is_gpu_available", lambda: True)


class _Identity:
    """A tokenizer stand-in for tracing an export function on ids as text."""

    def tokenize(self, text):
        return tf.strings.to_number(tf.strings.split(text), tf.int32)


def _seq2seq(**config):
    model = RNNSeq2Seq(30, 30, embed_dim=8, units=12, **config)
    model.build()
    return model


def _teacher_forced(model):
    return tf.function(lambda s, t: model({"source_ids": s, "target_ids": t})).get_concrete_function(IDS, IDS)


def _search(model, search):
    return tf.function(lambda ids: model.search(ids, search)).get_concrete_function(IDS)


SEQ2SEQ = [
    dict(cell="lstm", attention="dot", bidirectional=True, num_layers=2),
    dict(cell="gru", attention="bahdanau", reverse_source=True),
    dict(cell="gru", peeky=True),
]


@pytest.mark.parametrize("config", SEQ2SEQ, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_seq2seq_trains_on_cudnn_and_searches_without_it(config, keras_sees_a_gpu):
    model = _seq2seq(**config)
    assert cudnn_ops(_teacher_forced(model)) == ["CudnnRNNV3"]
    assert cudnn_ops(_search(model, GreedySearch(6))) == []
    assert cudnn_ops(_search(model, BeamSearch(6, beam_size=3))) == []


def test_language_model_and_classifier_serve_without_cudnn(keras_sees_a_gpu):
    model = RNNLanguageModel(30, embed_dim=8, units=8, cell="gru", num_layers=2)
    model.build()
    train = tf.function(lambda ids: model(ids)).get_concrete_function(IDS)
    assert cudnn_ops(train) == ["CudnnRNNV3"]
    assert cudnn_ops(_search(model, GreedySearch(6))) == []

    classifier = SequenceClassifier(30, 2, cell="lstm", bidirectional=True, embed_dim=8, units=8)
    classifier.build()
    assert cudnn_ops(tf.function(classifier).get_concrete_function(IDS)) == ["CudnnRNNV3"]
    serve = tf.function(classify_function(classifier, _Identity(), ["a", "b"]))
    assert cudnn_ops(serve.get_concrete_function(tf.TensorSpec([None], tf.string))) == []


UNBUILT_RNN_MODELS = {
    "seq2seq": lambda: RNNSeq2Seq(30, 30, embed_dim=8, units=8, attention="general", bidirectional=True),
    "language_model": lambda: RNNLanguageModel(30, embed_dim=8, units=8),
    "classifier": lambda: SequenceClassifier(30, 2, encoder="rnn", embed_dim=8, units=8),
    "conditioned": lambda: ConditionedGenerator(30, num_classes=2, embed_dim=8, units=8, cell="gru"),
}


@pytest.mark.parametrize("name", UNBUILT_RNN_MODELS)
def test_keras_declines_xla_for_a_model_compiled_before_it_is_built(name, keras_sees_a_gpu):
    """`compile(jit_compile="auto")` on a GPU asks keras' `model_supports_jit`
    before the first batch builds the model: the cuDNN layers must already
    be there to say no (a cuDNN op under XLA fails the first train step)."""
    model = UNBUILT_RNN_MODELS[name]()
    assert not model.built
    assert not model_supports_jit(model)


def test_bfloat16_recurrent_layers_stay_off_cudnn(keras_sees_a_gpu):
    """kseq._compat.cudnn_trains_in: cuDNN's bfloat16 gradient is NaN
    (tests/test_gpu.py); float16 and float32 keep cuDNN."""
    for policy, expected in [("mixed_bfloat16", []), ("mixed_float16", ["CudnnRNNV3"])]:
        model = RNNSeq2Seq(30, 30, embed_dim=8, units=8, cell="gru", attention="dot", dtype=policy)
        assert model_supports_jit(model) == (policy == "mixed_bfloat16")
        model.build()
        assert cudnn_ops(_teacher_forced(model)) == expected


@pytest.mark.parametrize(
    "mask, accepted",
    [
        ([[1, 1, 0], [1, 1, 1]], True),
        ([[1, 0, 0], [0, 0, 0]], False),  # an all-PAD row
        ([[1, 0, 1], [1, 1, 1]], False),  # PAD inside a row
        ([[0, 1, 1], [1, 1, 1]], False),  # left padding
    ],
)
def test_cudnn_accepts_right_padded_rows_with_a_real_step(mask, accepted):
    assert bool(cudnn_accepts(np.array(mask, bool))) is accepted


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_the_cudnn_guard_keeps_outputs_and_gradients(cell, monkeypatch):
    """Where keras would use cuDNN, a traced encoder branches on the mask
    (`tf.cond`); both branches must give the plain encoder's outputs and
    gradients. (A CPU cannot place the cuDNN op even in an untaken branch,
    so here keras keeps its CPU loop in both; tests/test_gpu.py runs the
    real thing.)"""
    import kseq.layers.recurrent as recurrent

    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(3, 5, 4)).astype("float32"))
    encoder = RNNEncoder(cell, units=6, bidirectional=True)

    def run(x, mask):
        with tf.GradientTape() as tape:
            tape.watch(x)
            outputs, states = encoder(x, padding_mask=mask)
            total = tf.reduce_sum(outputs) + sum(tf.reduce_sum(s) for layer in states for s in layer)
        return outputs, states, tape.gradient(total, x)

    specs = (tf.TensorSpec([None, None, 4]), tf.TensorSpec([None, None], tf.bool))
    masks = [
        np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], bool),  # cuDNN's kind
        np.array([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0], [1, 0, 1, 1, 0]], bool),  # refused
    ]
    expected = [run(x, mask) for mask in masks]
    monkeypatch.setattr(recurrent, "keras_uses_cudnn", lambda layer: True)
    guarded = tf.function(run)
    assert {"If", "StatelessIf"} & graph_op_types(guarded.get_concrete_function(*specs))
    for mask, want in zip(masks, expected):
        for got, wanted in zip(tf.nest.flatten(guarded(x, mask)), tf.nest.flatten(want)):
            assert_close(got, wanted)
