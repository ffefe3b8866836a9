"""A tensor's dimensions for code that runs in traced graphs."""

from kseq import _backend  # noqa: F401  (first: the TensorFlow backend checked before keras loads)

import tensorflow as tf
from keras import ops


def dynamic_shape(x):
    """`x`'s shape as a tuple: Python ints where the static shape knows a
    dimension, scalar int32 tensors where it does not.

    What `keras.ops.shape` returns, from fewer ops: keras slices `tf.shape(x)`
    once per unknown dimension (a StridedSlice and three constants each) and
    each call adds a Shape; here one Shape and one Unpack give them all. A
    trace is built op by op: a 2-layer Transformer's greedy search has 20%
    fewer ops, its beam search 13% (benchmarks/RESULTS.md, "Test suite and
    packaging").

    Args:
        x: a tensor of known rank.

    Returns:
        A tuple of len(x.shape) entries.
    """
    if not tf.is_tensor(x):  # a KerasTensor, a NumPy array: keras knows it
        return tuple(ops.shape(x))
    static = x.shape.as_list()
    if None not in static:
        return tuple(static)
    dims = tf.unstack(tf.shape(x), num=len(static))
    return tuple(dim if size is None else size for size, dim in zip(static, dims))
