"""StepDropout (how compiled blocks drop): keras Dropout's keep probability
and scaling, one key a step, a counter a call, off where the model is not
training."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from kseq.layers.dropout import StepDropout

SEED = tf.constant([7, 3], tf.int64)


def kept_values(y):
    y = np.asarray(tf.cast(y, tf.float32)).ravel()
    return y[y != 0]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_keeps_and_scales_as_keras_dropout(dtype, rate):
    x = tf.ones((64, 1000), dtype)
    ours = StepDropout(SEED)(x, rate)
    theirs = keras.layers.Dropout(rate, dtype=dtype)(x, training=True)
    assert ours.dtype == x.dtype and ours.shape == x.shape
    # The same kept value (1 / (1 - rate) in the inputs' dtype), the rest 0.
    assert set(kept_values(ours)) == set(kept_values(theirs)) and len(set(kept_values(ours))) == 1
    kept = kept_values(ours).size / x.shape.num_elements()
    spread = 5 * np.sqrt(rate * (1 - rate) / x.shape.num_elements())
    # bfloat16 noise has 8 bits: `u >= rate` keeps a slightly different
    # share, as in keras' Dropout on bfloat16 inputs.
    slack = 2 ** -8 if dtype == "bfloat16" else 0
    assert abs(kept - (1 - rate)) < spread + slack


def test_a_call_draws_its_own_mask_and_a_seed_repeats_them():
    x = tf.ones((8, 256))
    first, again, other = StepDropout(SEED), StepDropout(SEED), StepDropout(SEED + [0, 1])
    masks = [first(x, 0.5) for _ in range(2)]
    repeated = [again(x, 0.5) for _ in range(2)]
    for a, b in zip(masks, repeated):
        np.testing.assert_array_equal(a, b)
    assert np.any(np.asarray(masks[0]) != np.asarray(masks[1]))
    assert np.any(np.asarray(other(x, 0.5)) != np.asarray(masks[0]))


@pytest.mark.parametrize("jit_compile", [False, True])
def test_the_gradient_is_the_upstream_through_the_mask(jit_compile):
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(6, 40)) + 3, tf.float32)  # no zeros
    upstream = tf.constant(rng.normal(size=(6, 40)), tf.float32)

    @tf.function(jit_compile=jit_compile)
    def run(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = StepDropout(SEED)(x, 0.25)
            value = tf.reduce_sum(y * upstream)
        return y, tape.gradient(value, x)

    y, gradient = run(x)
    scale = np.where(np.asarray(y) != 0, np.float32(1 / 0.75), 0).astype("float32")
    np.testing.assert_allclose(np.asarray(y), np.asarray(x) * scale, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(gradient), np.asarray(upstream) * scale, rtol=1e-6)
    assert 0 < np.mean(scale == 0) < 0.5


def test_rate_zero_is_the_identity_and_a_bad_rate_is_refused():
    x = tf.ones((2, 3))
    dropout = StepDropout(SEED)
    assert dropout(x, 0.0) is x
    assert dropout.calls == 0
    with pytest.raises(ValueError, match="rate"):
        dropout(x, 1.0)
