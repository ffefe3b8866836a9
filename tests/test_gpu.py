"""What a GPU changes, checked on one (every test is marked `gpu` and skipped,
with the reason, where TensorFlow finds no GPU):

- keras runs LSTM/GRU sequences with cuDNN: the teacher-forced pass must
  keep its properties (padding invariance, step == call, final states at
  the last real token) and survive masks cuDNN refuses;
- searches and exports must hold no cuDNN op, and every model family must
  generate under XLA as it does without;
- every model family trains under mixed_bfloat16 and mixed_float16, the
  recurrent ones in bfloat16 off cuDNN (its bfloat16 gradient reads memory
  it never wrote: NaN after NaN-filled tensors were freed);
- two replicas on two logical GPUs (conftest.py splits the first GPU) train
  like one device.

TF32 is off in all but the `tf32` test (conftest.py), so float32 means
float32 here. Run: `.venv/bin/python -m pytest -m gpu` (README).
"""

import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from kseq.decoding import BeamSearch, GreedySearch
from kseq.export import classify_function
from kseq.layers import RNNEncoder
from kseq.layers.recurrent import portable_recurrence
from kseq.models import RNNLanguageModel, SequenceClassifier
from support import (
    FAMILIES, assert_close, build_family, check_encoder_final_states, check_float32_softmax,
    check_mixed_training, check_padding_invariance, check_step_equals_call, config_id, cudnn_ops,
    random_batch, relative_tolerance, small_model,
)
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "training", "devices"))  # its folder, for:
from test_distributed_equivalence import check_two_replicas_match_one  # noqa: E402

pytestmark = pytest.mark.gpu

IDS = tf.TensorSpec([None, None], tf.int32)
CUDNN_CONFIGS = [
    dict(cell="lstm"),
    dict(cell="gru", attention="general", bidirectional=True),
    dict(cell="lstm", attention="dot", num_layers=2, reverse_source=True),
]


def teacher_forced_graph(model):
    call = tf.function(lambda s, t: model({"source_ids": s, "target_ids": t}))
    return call.get_concrete_function(IDS, IDS)


@pytest.mark.parametrize("config", CUDNN_CONFIGS, ids=lambda c: config_id(("rnn", c)))
def test_cudnn_seq2seq_keeps_its_properties(config):
    model = small_model("rnn", config)
    model.build()
    assert cudnn_ops(teacher_forced_graph(model)) == ["CudnnRNNV3"]
    check_padding_invariance(model)
    check_step_equals_call(model)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_cudnn_encoder_final_states_are_at_the_last_real_token(cell, bidirectional):
    encoder = RNNEncoder(cell, units=5, num_layers=2, bidirectional=bidirectional)
    encoder.build((None, None, 4))
    traced = tf.function(lambda x, mask: encoder(x, padding_mask=mask))
    spec = (tf.TensorSpec([None, None, 4]), tf.TensorSpec([None, None], tf.bool))
    assert cudnn_ops(traced.get_concrete_function(*spec)) == ["CudnnRNNV3"]
    check_encoder_final_states(encoder, width=10 if bidirectional else 5)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_masks_cudnn_refuses_run_and_match_the_portable_loop(cell):
    """An all-PAD row and PAD inside a row: keras 3 would stop on its cuDNN
    mask assertion; kseq's guard takes the portable loop for that batch."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 5, 4)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0], [1, 0, 1, 1, 0]], bool)
    encoder = RNNEncoder(cell, units=6, bidirectional=True)
    actual = tf.function(lambda x, mask: encoder(x, padding_mask=mask))(x, mask)
    with portable_recurrence(encoder):
        expected = encoder(x, padding_mask=mask)
    for got, want in zip(tf.nest.flatten(actual), tf.nest.flatten(expected)):
        assert_close(got, want)


def test_searches_and_exports_hold_no_cudnn_op():
    seq2seq = small_model("rnn", CUDNN_CONFIGS[1])
    language_model = RNNLanguageModel(30, embed_dim=8, units=8, cell="gru")
    for model in (seq2seq, language_model):
        model.build()
        for search in (GreedySearch(5), BeamSearch(5, beam_size=2)):
            traced = tf.function(lambda ids: model.search(ids, search))
            assert cudnn_ops(traced.get_concrete_function(IDS)) == []

    classifier = SequenceClassifier(30, 2, cell="lstm", embed_dim=8, units=8)
    classifier.build()
    assert cudnn_ops(tf.function(classifier).get_concrete_function(IDS)) == ["CudnnRNNV3"]

    class Numbers:  # a tokenizer stand-in: "5 6 7" -> [5, 6, 7]
        def tokenize(self, text):
            return tf.strings.to_number(tf.strings.split(text), tf.int32)

    serve = tf.function(classify_function(classifier, Numbers(), ["a", "b"]))
    assert cudnn_ops(serve.get_concrete_function(tf.TensorSpec([None], tf.string))) == []


GENERATORS = [
    ("transformer", dict(norm_first=False)),
    ("transformer", dict(norm_first=True, share_embeddings=True, position="learned")),
    ("rnn", dict(cell="lstm", attention="dot")),
    ("rnn", dict(cell="gru", attention="bahdanau", peeky=True, bidirectional=True, reverse_source=True)),
    ("rnn", dict(cell="lstm", attention="general", num_layers=2)),
    ("rnn", dict(cell="gru")),
    ("language_model", dict(cell="lstm", num_layers=2)),
    ("language_model", dict(cell="gru")),
]


def generator(kind, config):
    if kind == "language_model":
        return RNNLanguageModel(30, embed_dim=8, units=8, **config)
    return small_model(kind, config, dropout=0.0)


@pytest.mark.parametrize("entry", GENERATORS, ids=config_id)
@pytest.mark.parametrize(
    "options", [dict(method="greedy"), dict(method="beam", beam_size=3, num_return=2)],
    ids=["greedy", "beam"],
)
def test_xla_generation_equals_graph_generation(entry, options):
    model = generator(*entry)
    source = random_batch(batch=5, source_length=7)["source_ids"]
    plain, plain_scores = model.generate(source, max_length=8, return_scores=True, **options)
    compiled, scores = model.generate(
        source, max_length=8, return_scores=True, jit_compile=True, **options
    )
    np.testing.assert_array_equal(compiled, plain)
    assert_close(scores, plain_scores, atol=1e-4)


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_trains_in_mixed_precision(family, policy):
    check_mixed_training(*build_family(family, policy))
    check_float32_softmax(*build_family(family, policy))


def leave_nan_in_freed_memory():
    """Frees 64 MiB of NaN-filled tensors: memory the allocator hands out
    next holds NaN where nothing wrote it."""
    junk = [tf.fill([1 << 18], float("nan")) for _ in range(64)]
    del junk


@pytest.mark.parametrize("family", ["rnn", "language_model", "classifier"])
def test_recurrent_families_train_in_bfloat16_from_nan_filled_memory(family):
    """On cuDNN every weight gradient was NaN here (0 of 4 seeds finite,
    kseq._compat.cudnn_trains_in); kseq's bfloat16 LSTM/GRU run keras'
    portable loop instead."""
    model, inputs, labels, loss = build_family(family, "mixed_bfloat16")
    assert cudnn_ops(tf.function(model).get_concrete_function(
        {k: tf.constant(v) for k, v in inputs.items()} if isinstance(inputs, dict) else tf.constant(inputs)
    )) == []
    for _ in range(3):
        leave_nan_in_freed_memory()
        with tf.GradientTape() as tape:
            value = loss(labels, model(inputs, training=True))
        gradients = tape.gradient(value, model.trainable_variables)
        assert all(np.isfinite(tf.convert_to_tensor(g).numpy()).all() for g in gradients if g is not None)


@pytest.mark.parametrize("name", ["transformer", "lstm-general", "gru-bahdanau"])
def test_two_logical_gpus_train_like_one(name):
    assert len(tf.config.list_logical_devices("GPU")) >= 2, "conftest.py splits the first GPU"
    check_two_replicas_match_one(name, ["/gpu:0", "/gpu:1"])


@pytest.mark.tf32
def test_tf32_default_stays_within_its_tolerance():
    """TensorFlow's default on Ampere and later GPUs: float32 matmuls as
    TF32. Logits then sit within TF32's tolerance of true float32 ones."""
    batch = random_batch()
    model = small_model("transformer", {}, dropout=0.0)
    with_tf32 = np.asarray(model(batch))
    tf.config.experimental.enable_tensor_float_32_execution(False)
    try:
        exact = np.asarray(model(batch))
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(True)
    scale = np.abs(exact).max()
    np.testing.assert_allclose(with_tf32, exact, atol=relative_tolerance("tf32") * scale)
