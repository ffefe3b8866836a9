"""Sums over every axis but the last, as a matmul with a ones vector (the
`bias_gradients` path of `kseq.layers.device_paths`).

TensorFlow without XLA sums a bias's gradient with BiasAddGrad, or a
broadcast's with a column reduction: on a GPU the first runs with shared
atomics in bfloat16, the second as its own reduction kernel. A (1, N) ones
row times the (N, D) values is one matmul the BLAS library runs instead.
"""

import tensorflow as tf


def column_sums(values):
    """Sums `values` over all axes but the last, as one matmul.

    Args:
        values: (..., D) float tensor.

    Returns:
        (D,) tensor of the values' dtype.
    """
    rows = tf.reshape(values, (-1, values.shape[-1]))
    ones = tf.ones((1, tf.shape(rows)[0]), values.dtype)
    return tf.matmul(ones, rows)[0]


def add_bias(x, bias):
    """x + bias over the last axis, whose bias gradient is `column_sums`.

    Args:
        x: (..., D) float tensor.
        bias: (D,) tensor of x's dtype.

    Returns:
        x + bias.
    """

    @tf.custom_gradient
    def added(x, bias):
        return x + bias, lambda upstream: (upstream, column_sums(upstream))

    return added(x, bias)
