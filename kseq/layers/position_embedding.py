"""Learned absolute position embeddings."""

import keras
from keras import ops

from kseq._shapes import dynamic_shape


@keras.saving.register_keras_serializable("kseq")
class PositionEmbedding(keras.layers.Layer):
    """A trainable (max_length, D) table of position vectors.

    Args:
        max_length: the number of positions the table holds.
        initializer: initializer of the table. Defaults to "glorot_uniform".

    Call arguments:
        inputs: (B, T, D) tensor; only its shape is used.
        start_index: position of the first step, for step-by-step decoding.

    Returns:
        (B, T, D) position embeddings for positions start_index..start_index+T-1.

    Example:
    >>> tuple(PositionEmbedding(max_length=16)(keras.ops.zeros((2, 5, 8))).shape)
    (2, 5, 8)
    """

    def __init__(self, max_length, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        if not isinstance(max_length, int) or max_length < 1:
            raise ValueError(
                f"`max_length` must be a positive integer; got {max_length!r}."
            )
        self.max_length = max_length
        self.initializer = keras.initializers.get(initializer)

    def build(self, inputs_shape):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.max_length, inputs_shape[-1]),
            initializer=self.initializer,
        )
        self.built = True

    def call(self, inputs, start_index=0):
        shape = dynamic_shape(inputs)
        length = shape[-2]
        if isinstance(length, int) and isinstance(start_index, int):
            if start_index + length > self.max_length:
                raise ValueError(
                    f"PositionEmbedding holds {self.max_length} positions; got "
                    f"a sequence reaching position {start_index + length - 1}."
                )
        table = ops.slice(
            ops.convert_to_tensor(self.embeddings),
            (start_index, 0),
            (length, shape[-1]),
        )
        return ops.broadcast_to(ops.cast(table, self.compute_dtype), shape)

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "max_length": self.max_length,
                "initializer": keras.initializers.serialize(self.initializer),
            }
        )
        return config
