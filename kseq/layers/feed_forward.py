"""The Transformer's position-wise feed-forward network."""

import keras
import tensorflow as tf

from kseq._validation import check_positive_int


@keras.saving.register_keras_serializable("kseq")
class PositionwiseFeedForward(keras.layers.Layer):
    """FFN(x) = W_2 act(W_1 x + b_1) + b_2, applied at every position.

    Args:
        ff_dim: width of the inner layer (2048 in the base Transformer).
        activation: inner activation. Defaults to "relu".

    Call arguments:
        inputs: (B, T, D).

    Returns:
        (B, T, D).

    Example:
    >>> tuple(PositionwiseFeedForward(ff_dim=32)(keras.ops.ones((2, 5, 8))).shape)
    (2, 5, 8)

    References:
        Vaswani et al., 2017, "Attention Is All You Need", section 3.3.
    """

    def __init__(self, ff_dim: int, activation: str = "relu", **kwargs) -> None:
        super().__init__(**kwargs)
        self.ff_dim = check_positive_int("ff_dim", ff_dim)
        self.activation = keras.activations.get(activation)

    def build(self, inputs_shape):
        self.inner_dense = keras.layers.Dense(
            self.ff_dim, activation=self.activation, dtype=self.dtype_policy, name="inner"
        )
        self.outer_dense = keras.layers.Dense(
            inputs_shape[-1], dtype=self.dtype_policy, name="outer"
        )
        self.inner_dense.build(inputs_shape)
        self.outer_dense.build(tuple(inputs_shape[:-1]) + (self.ff_dim,))
        self.built = True

    def call(self, inputs):
        layers = (self.inner_dense, self.outer_dense)
        if any(layer.quantization_mode is not None or layer.lora_enabled for layer in layers):
            return self.outer_dense(self.inner_dense(inputs))
        # Plain 2-D matmuls: keras' Dense on (B, T, D) inputs builds a
        # tensordot, a dozen shape ops per layer at every decoding step.
        x = tf.reshape(inputs, (-1, inputs.shape[-1]))
        for layer in layers:
            x = tf.nn.bias_add(tf.matmul(x, tf.cast(layer.kernel, x.dtype)), tf.cast(layer.bias, x.dtype))
            x = layer.activation(x)
        return tf.reshape(x, tf.shape(inputs))

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "ff_dim": self.ff_dim,
                "activation": keras.activations.serialize(self.activation),
            }
        )
        return config
