"""kseq._shapes.dynamic_shape: keras.ops.shape's answer from one Shape and one Unpack."""

import keras
import numpy as np
import tensorflow as tf

from kseq._shapes import dynamic_shape


def test_static_dimensions_are_ints_and_unknown_ones_read_one_shape_op():
    @tf.function(input_signature=[tf.TensorSpec((None, 5, None), tf.float32)])
    def dims(x):
        batch, width, length = dynamic_shape(x)
        assert width == 5 and isinstance(width, int)
        assert tf.is_tensor(batch) and tf.is_tensor(length)
        return tf.stack([batch, width, length])

    graph = dims.get_concrete_function().graph
    kinds = [op.type for op in graph.get_operations()]
    assert kinds.count("Shape") == 1 and kinds.count("Unpack") == 1 and "StridedSlice" not in kinds
    assert dims(tf.zeros((3, 5, 7))).numpy().tolist() == [3, 5, 7]


def test_it_answers_what_keras_ops_shape_answers():
    x = np.zeros((2, 4), "float32")
    assert dynamic_shape(tf.constant(x)) == keras.ops.shape(x) == (2, 4)
    symbolic = keras.KerasTensor((None, 4))
    assert dynamic_shape(symbolic) == keras.ops.shape(symbolic) == (None, 4)

    @tf.function(input_signature=[tf.TensorSpec((None, None), tf.int32)])
    def both(x):
        return tf.stack(list(dynamic_shape(x))), tf.stack(list(keras.ops.shape(x)))

    ours, keras_answer = both(tf.zeros((6, 9), tf.int32))
    assert ours.numpy().tolist() == keras_answer.numpy().tolist() == [6, 9]
