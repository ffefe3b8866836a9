import keras
import numpy as np
import pytest
import tensorflow as tf

from kseq.layers.layer_norm import LayerNorm
from support import graph_op_types


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


def gradient_graph_ops(norm, shape):
    @tf.function
    def run(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = tf.reduce_sum(norm(x))
        return tape.gradient(value, [x] + norm.trainable_weights)

    return graph_op_types(run.get_concrete_function(tf.TensorSpec(shape, tf.float32)))


def test_the_gradient_is_the_closed_form_of_plain_ops():
    """Means and a reciprocal square root each way: no fused batch-norm
    kernel, no matmul (gamma's and beta's gradients are sums)."""
    norm = LayerNorm(epsilon=1e-5)
    norm.build((4, 8))
    ops = gradient_graph_ops(norm, (None, 8))
    assert not {"FusedBatchNormV3", "FusedBatchNormGradV3"} & ops and {"Mean", "Rsqrt"} <= ops
    assert "MatMul" not in ops


def test_an_empty_batch_is_normalised_to_an_empty_batch():
    norm = LayerNorm(epsilon=1e-5)
    norm.build((0, 5, 8))
    assert tuple(norm(tf.zeros((0, 5, 8))).shape) == (0, 5, 8)
