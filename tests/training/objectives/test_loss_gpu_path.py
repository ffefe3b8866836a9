"""The label-smoothed loss's GPU path (its backward multiply and subtraction
as one fused batch-norm op), forced on the CPU: the CPU path's values and
gradients."""

import numpy as np
import pytest
import tensorflow as tf

from kseq.layers import device_paths
from kseq.training.objectives.losses import MaskedSparseCategoricalCrossentropy, smoothed_cross_entropy
from support import graph_op_types

VOCAB = 11


def value_and_gradient(labels, logits, upstream, smoothing, gpu_path, jit_compile=False):
    @tf.function(jit_compile=jit_compile)
    def run(logits):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            value = smoothed_cross_entropy(labels, logits, smoothing, gpu_path)
            total = tf.reduce_sum(value * upstream)
        return value, tape.gradient(total, logits)

    return run, [np.asarray(tf.cast(t, tf.float32)) for t in run(logits)]


@pytest.mark.parametrize("shape", [(3, 5), (4,), (0, 2)])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("jit_compile", [False, True])
def test_values_and_gradients_are_the_cpu_paths(shape, smoothing, dtype, jit_compile):
    rng = np.random.default_rng(2)
    labels = tf.constant(rng.integers(0, VOCAB, shape), tf.int32)
    logits = tf.cast(tf.constant(rng.normal(size=shape + (VOCAB,)) * 4, tf.float32), dtype)
    upstream = tf.constant(rng.normal(size=shape), tf.float32)
    _, expected = value_and_gradient(labels, logits, upstream, smoothing, False, jit_compile)
    run, actual = value_and_gradient(labels, logits, upstream, smoothing, True, jit_compile)
    for a, e in zip(actual, expected):
        assert a.shape == e.shape
        np.testing.assert_allclose(a, e, atol=1e-6, rtol=1e-6)
    assert "FusedBatchNormV3" in graph_op_types(run.get_concrete_function(logits))


def test_the_loss_chooses_its_path_when_made(monkeypatch):
    rng = np.random.default_rng(3)
    labels = np.array([[5, 6, 2, 0], [7, 2, 0, 0]], "int32")
    logits = tf.constant(rng.normal(size=(2, 4, VOCAB)), tf.float32)
    results = []
    for gpu_path in (False, True):
        monkeypatch.setattr(device_paths, "FORCE", gpu_path)
        loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)
        monkeypatch.setattr(device_paths, "FORCE", not gpu_path)  # made already: no effect
        assert loss._gpu_path is gpu_path
        with tf.GradientTape() as tape:
            tape.watch(logits)
            value = loss(labels, logits)
        results.append((np.asarray(value), np.asarray(tape.gradient(value, logits))))
        assert loss.get_config() == {"name": loss.name, "label_smoothing": 0.1, "pad_id": 0}
    for a, e in zip(*results):
        np.testing.assert_allclose(a, e, atol=1e-6, rtol=1e-6)
