"""Luong input feeding in RNNSeq2Seq: the attentional vector of step t is
part of step t+1's input. The shared properties (padding, cached step ==
teacher-forced pass, round trip, generate) run on input-feeding
configurations in test_seq2seq_properties.py."""

import numpy as np
import pytest
import tensorflow as tf

from kseq.layers.masking import padding_mask
from kseq.layers.recurrent import portable_recurrence
from support import assert_close, check_padding_invariance, check_step_equals_call, random_batch, small_model

GENERAL = dict(cell="lstm", attention="general")


def fed_and_plain(scale):
    """An input-feeding model and a plain one with the same weights, but
    for the feeding model's rows for the fed vector (the last U input rows
    of its first decoder kernel): random, times `scale`."""
    fed = small_model("rnn", dict(GENERAL, input_feeding=True), dropout=0.0)
    plain = small_model("rnn", GENERAL, dropout=0.0)
    batch = random_batch()
    fed(batch), plain(batch)
    widened = []
    for mine, theirs in zip(fed.weights, plain.weights):
        if mine.shape == theirs.shape:
            mine.assign(theirs)
        else:  # the decoder's first kernel: (E + U, 4U) against (E, 4U)
            rows = np.random.default_rng(0).normal(size=(fed.units, mine.shape[1]))
            mine.assign(np.concatenate([theirs.numpy(), scale * rows.astype("float32")], axis=0))
            widened.append(mine.path)
    assert len(widened) == 1 and "decoder" in widened[0], widened
    return fed, plain, batch


def test_the_fed_vector_changes_only_later_steps():
    fed, plain, batch = fed_and_plain(0.0)
    real = batch["target_ids"] != 0
    # Zero rows for the fed vector: the feeding model is the plain one.
    assert_close(np.asarray(fed(batch))[real], np.asarray(plain(batch))[real])

    fed, plain, batch = fed_and_plain(1.0)
    fed_logits, plain_logits = np.asarray(fed(batch)), np.asarray(plain(batch))
    # Step 0 reads a zero vector; every later step reads h~_{t-1}.
    assert_close(fed_logits[:, 0], plain_logits[:, 0])
    later = real[:, 1:]
    assert np.all(np.abs(fed_logits[:, 1:][later] - plain_logits[:, 1:][later]).max(axis=-1) > 1e-4)


def test_the_state_carries_the_attentional_vector_into_the_next_step():
    model = small_model("rnn", dict(GENERAL, input_feeding=True), dropout=0.0)
    batch = random_batch()
    model(batch)
    source, target = batch["source_ids"], tf.constant(batch["target_ids"])
    state = model.initial_state(model.encode(source), padding_mask(source))
    assert np.all(np.asarray(state["feed"]) == 0.0)
    logits, state = model.step(target[:, 0], state, 0)
    # What step 0 feeds forward is what its output layer read: h~_0.
    assert_close(model.output_projection(state["feed"]), logits)
    next_logits, _ = model.step(target[:, 1], state, 1)
    nudged = dict(state, feed=state["feed"] + 0.5)
    nudged_logits, _ = model.step(target[:, 1], nudged, 1)
    assert np.abs(np.asarray(nudged_logits) - np.asarray(next_logits)).max() > 1e-3


def test_stacked_layers_step_as_the_teacher_forced_pass():
    model = small_model("rnn", dict(cell="rnn", attention="concat", num_layers=2, input_feeding=True))
    check_step_equals_call(model)
    check_padding_invariance(model)


def log_probabilities(model, sources, hypotheses):
    """(N,) log P(hypothesis | source), each summed up to its EOS, by one
    teacher-forced pass, PAD and BOS excluded as the searches exclude them."""
    targets = np.concatenate([np.ones((len(hypotheses), 1), "int32"), hypotheses[:, :-1]], 1)
    logits = np.array(model({"source_ids": sources, "target_ids": targets}))
    logits[..., :2] = -np.inf
    logp = np.take_along_axis(np.asarray(tf.nn.log_softmax(logits)), hypotheses[..., None], -1)[..., 0]
    return np.where(hypotheses != 0, logp, 0.0).sum(1)


def test_beam_search_reorders_the_fed_vector_with_its_hypotheses():
    """Each n-best hypothesis scores what a teacher-forced pass gives it: a
    beam continuing with another beam's fed vector would not."""
    model = small_model("rnn", dict(GENERAL, input_feeding=True), dropout=0.0)
    batch = random_batch()
    model(batch)
    for weight in model.weights:  # sharper, more varied steps: beams trade places
        weight.assign(weight * 3.0)
    beams, source = 4, batch["source_ids"]
    ids, scores = model.generate(
        source, max_length=7, method="beam", beam_size=beams, num_return=beams,
        length_penalty=0.0, return_scores=True,
    )
    hypotheses = np.asarray(ids).reshape(-1, np.asarray(ids).shape[-1])
    expected = log_probabilities(model, np.repeat(source, beams, axis=0), hypotheses)
    np.testing.assert_allclose(np.asarray(scores).reshape(-1), expected, atol=1e-4, rtol=1e-5)


# Compiling the gradient of the step loop takes about 6 s of CPU: -m slow.
@pytest.mark.parametrize("with_gradient", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_the_teacher_forced_pass_compiles_with_xla(with_gradient):
    model = small_model("rnn", dict(GENERAL, input_feeding=True), dropout=0.0)
    batch = {key: tf.constant(value) for key, value in random_batch().items()}
    model(batch)

    def run(batch):
        with tf.GradientTape() as tape:
            logits = model(batch, training=True)
            loss = tf.reduce_sum(tf.square(logits))
        return tape.gradient(loss, model.trainable_variables) if with_gradient else logits

    plain = run(batch)
    # On a GPU the encoder's cuDNN op has no XLA kernel: traced portable.
    with portable_recurrence(model):
        compiled = tf.function(run, jit_compile=True)(batch)
    for a, b in zip(tf.nest.flatten(plain), tf.nest.flatten(compiled)):
        assert_close(tf.convert_to_tensor(b), tf.convert_to_tensor(a), atol=1e-4)
