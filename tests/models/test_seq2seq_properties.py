"""Properties every model configuration must have."""

import functools

import numpy as np
import pytest
import tensorflow as tf

from kseq.layers.masking import padding_mask
from support import (
    ALL_CONFIGS, assert_close, check_padding_invariance, check_step_equals_call, config_id,
    random_batch, roundtrip, small_model,
)

CONFIGS = pytest.mark.parametrize("entry", ALL_CONFIGS, ids=config_id)


@functools.lru_cache(maxsize=None)
def _built_model(kind, config_items):
    model = small_model(kind, dict(config_items))
    model(random_batch())  # one way of building it, whichever test comes first
    return model


def shared_model(entry):
    """The small model of `entry` (dropout layers present), built on
    `random_batch()`: one per configuration and worker, shared by the tests
    that only call it in inference mode, save it or decode with it (none
    changes its weights), so each pays neither the build nor the traces of
    another's greedy search."""
    kind, config = entry
    return _built_model(kind, tuple(sorted(config.items())))


@CONFIGS
def test_padding_changes_no_logit_at_real_positions(entry):
    check_padding_invariance(shared_model(entry))


@CONFIGS
def test_no_causal_leak_in_training_mode(entry):
    """Logits at positions <= t get no gradient from target tokens after t,
    with dropout active. Prefix ids come from 4..16, suffix ids from 17..29,
    and only logit columns 4..16 are probed (a tied output projection then
    touches rows 4..16 only), so any gradient on rows 17..29 is a leak."""
    model = small_model(*entry, dropout=0.3)
    batch = random_batch(high=17)
    t = 2
    rng = np.random.default_rng(5)
    batch["target_ids"][:, t + 1 :] = rng.integers(17, 30, batch["target_ids"][:, t + 1 :].shape)
    model(batch)
    table = model.target_embedding.embeddings
    with tf.GradientTape() as tape:
        logits = model(batch, training=True)
        total = tf.reduce_sum(logits[:, : t + 1, 4:17] ** 2)
    gradient = tf.convert_to_tensor(tape.gradient(total, table))
    assert np.abs(gradient[4:17]).max() > 0
    assert np.abs(gradient[17:]).max() == 0.0
    # Inference: changing the suffix leaves the prefix logits unchanged.
    changed = dict(batch, target_ids=batch["target_ids"].copy())
    changed["target_ids"][:, t + 1 :] = 29 - (changed["target_ids"][:, t + 1 :] - 17)
    assert_close(np.asarray(model(changed))[:, : t + 1], np.asarray(model(batch))[:, : t + 1])


@CONFIGS
def test_step_by_step_equals_teacher_forced_call(entry):
    check_step_equals_call(shared_model(entry))


@CONFIGS
def test_generate_contract(entry):
    model = shared_model(entry)
    source = random_batch()["source_ids"]
    out = np.asarray(model.generate(source, max_length=9))
    assert out.dtype == np.int32 and out.shape[0] == 3 and out.shape[1] <= 9
    assert not np.any(out == 1), "no BOS in the output"
    for row in out:
        eos = np.flatnonzero(row == 2)
        if eos.size:
            assert np.all(row[eos[0] + 1 :] == 0), "PAD after EOS"
            assert np.all(row[: eos[0]] != 0)
    # Greedy is the argmax (PAD and BOS excluded) of the step logits fed
    # back: check the first token.
    first, _ = model.step(
        tf.ones(3, tf.int32),
        model.initial_state(model.encode(source), padding_mask(source), max_length=9),
        0,
    )
    first = np.array(first)
    first[:, :2] = -np.inf
    assert np.array_equal(out[:, 0], np.argmax(first, -1))


@CONFIGS
def test_attention_weights_for_plotting(entry):
    kind, config = entry
    model = shared_model(entry)
    batch = random_batch()
    if kind == "rnn" and config.get("attention") is None:
        with pytest.raises(ValueError, match="attention=None"):
            model.attention_weights(batch)
        return
    weights = np.asarray(model.attention_weights(batch))
    assert weights.shape == (3, 6, 7)
    assert_close(weights.sum(-1), np.ones((3, 6)))
    source_padding = batch["source_ids"] == 0
    assert np.all(weights.transpose(0, 2, 1)[source_padding] == 0)


@pytest.mark.parametrize("entry", [("transformer", dict(norm_first=False)),
                                   ("rnn", dict(cell="gru", attention="bahdanau"))], ids=config_id)
@pytest.mark.parametrize("dtype", ["float32", "mixed_bfloat16"])
def test_eager_attention_weights_are_the_eager_steps_traced_once(entry, dtype):
    """Called eagerly, attention_weights runs the steps as one traced loop:
    the values and dtype of `Decoder`'s eager loop, bit for bit, and another
    batch and length reuse the trace."""
    from kseq.decoding.protocol import Decoder

    model = small_model(*entry, dropout=0.0, dtype=dtype)
    batch = random_batch()
    model(batch)
    weights = model.attention_weights(batch)
    expected = Decoder.attention_by_steps(model, tf.constant(batch["source_ids"]), tf.constant(batch["target_ids"]))
    assert weights.dtype == expected.dtype and np.array_equal(np.asarray(weights), np.asarray(expected))
    other = random_batch(batch=5, source_length=9, target_length=8, seed=3)
    assert model.attention_weights(other).shape == (5, 8, 9)
    cached = model._generate_cache.functions.items()
    traced = [function for key, function in cached if key[0] == "attention_by_steps"]
    assert len(traced) == 1 and traced[0].experimental_get_tracing_count() == 1


@CONFIGS
def test_model_round_trip(entry, tmp_path):
    """Decodes with test_generate_contract's options (max_length 9), so the
    shared model's greedy search is traced once for both."""
    model = shared_model(entry)
    batch = random_batch()
    loaded = roundtrip(model, tmp_path, batch)
    assert loaded.get_config() == model.get_config()
    source = batch["source_ids"]
    assert np.array_equal(loaded.generate(source, max_length=9), model.generate(source, max_length=9))


def test_rnn_embeddings_start_from_the_asked_scale():
    from kseq.models import RNNSeq2Seq

    default = RNNSeq2Seq(500, 500, embed_dim=64, units=8)
    default.build()
    assert 0.9 < float(np.std(default.source_embedding.embeddings.numpy())) < 1.1
    keras_uniform = RNNSeq2Seq.from_config({**default.get_config(), "embedding_stddev": None})
    keras_uniform.build()
    assert np.abs(keras_uniform.target_embedding.embeddings.numpy()).max() <= 0.05
    with pytest.raises(ValueError, match="embedding_stddev"):
        RNNSeq2Seq(500, 500, embedding_stddev=-1.0)
