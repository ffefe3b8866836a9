import keras
import numpy as np
import pytest
import tensorflow as tf

from kseq.layers.layer_norm import LayerNorm


def outputs_and_gradients(layer, x, weights, jit_compile):
    @tf.function(jit_compile=jit_compile)
    def run(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            value = tf.reduce_sum(tf.cast(y, tf.float32) * weights)
        return [y] + tape.gradient(value, [x] + layer.trainable_weights)

    return [np.asarray(tf.cast(t, tf.float32)) for t in run(x)]


@pytest.mark.parametrize("shape", [(3, 5, 8), (4, 8)])
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("options", [{}, {"center": False}])  # the second: keras' call
def test_layer_norm_matches_keras_in_value_and_gradient(shape, policy, jit_compile, options):
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=shape) * 3 + 1, tf.float32)
    weights = tf.constant(rng.normal(size=shape), tf.float32)
    ours = LayerNorm(epsilon=1e-5, dtype=policy, **options)
    keras_norm = keras.layers.LayerNormalization(epsilon=1e-5, dtype=policy, **options)
    for layer in (ours, keras_norm):
        layer.build(shape)
    for a, b in zip(ours.weights, keras_norm.weights):
        value = rng.normal(size=a.shape)
        a.assign(value)
        b.assign(value)
    expected = outputs_and_gradients(keras_norm, x, weights, jit_compile)
    actual = outputs_and_gradients(ours, x, weights, jit_compile)
    assert len(actual) == len(expected) == 2 + len(ours.trainable_weights)
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, atol=1e-5 if policy == "float32" else 2e-2, rtol=1e-5)
