import functools

import keras
import numpy as np
import pytest
import tensorflow as tf

from kseq.layers import device_paths
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


def built_norm(policy, shape, gpu_path, monkeypatch):
    monkeypatch.setattr(device_paths, "FORCE", gpu_path)
    norm = LayerNorm(epsilon=1e-5, dtype=policy)
    norm.build(shape)
    return norm


@functools.lru_cache(maxsize=None)
def cpu_paths_reference(shape, policy, jit_compile):
    """(x, upstream weights, the layer's weight values, the default paths'
    outputs and gradients): the same for every `paths` case of
    test_the_gpu_path_gives_the_cpu_paths_values_and_gradients, so traced
    (and compiled) once a worker."""
    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(size=shape) * 3 + 1, tf.float32)
    weights = tf.constant(rng.normal(size=shape), tf.float32)
    with pytest.MonkeyPatch.context() as patch:
        cpu = built_norm(policy, shape, False, patch)  # the path is chosen at build and kept
    values = [rng.normal(size=w.shape) for w in cpu.weights]
    for weight, value in zip(cpu.weights, values):
        weight.assign(value)
    return x, weights, values, outputs_and_gradients(cpu, x, weights, jit_compile)


@pytest.mark.parametrize("shape", [(3, 5, 8), (4, 8)])
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("paths", [True, ["layer_norm"], ["bias_gradients"]], ids=["both", "layer_norm", "bias_gradients"])
def test_the_gpu_path_gives_the_cpu_paths_values_and_gradients(shape, policy, jit_compile, paths, monkeypatch):
    x, weights, values, expected = cpu_paths_reference(shape, policy, jit_compile)
    gpu = built_norm(policy, shape, paths, monkeypatch)
    for weight, value in zip(gpu.weights, values):
        weight.assign(value)
    actual = outputs_and_gradients(gpu, x, weights, jit_compile)
    assert len(actual) == len(expected) == 4
    # Both normalise in float32; under bfloat16 a last-bit difference may
    # round the output one bfloat16 step apart.
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


def test_the_path_is_chosen_at_build_and_kept(monkeypatch):
    gpu = built_norm("float32", (4, 8), True, monkeypatch)
    cpu = built_norm("float32", (4, 8), False, monkeypatch)
    monkeypatch.setattr(device_paths, "FORCE", True)  # later changes reach no built layer
    gpu_ops, cpu_ops = gradient_graph_ops(gpu, (None, 8)), gradient_graph_ops(cpu, (None, 8))
    assert {"FusedBatchNormV3", "FusedBatchNormGradV3"} <= gpu_ops and not {"Mean", "Rsqrt"} & gpu_ops
    assert not {"FusedBatchNormV3", "FusedBatchNormGradV3"} & cpu_ops and {"Mean", "Rsqrt"} <= cpu_ops
    # The training-mode call each way; gamma and beta as plain ops, their
    # gradients (bias_gradients, on with True) one matmul.
    assert "MatMul" in gpu_ops and "MatMul" not in cpu_ops


def test_the_gpu_path_takes_an_empty_batch(monkeypatch):
    norm = built_norm("float32", (0, 5, 8), True, monkeypatch)
    assert tuple(norm(tf.zeros((0, 5, 8))).shape) == (0, 5, 8)
