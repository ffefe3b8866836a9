"""LayerNorm over the last axis with its gradient written out."""

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable("kseq")
class LayerNorm(keras.layers.LayerNormalization):
    """Normalises over the last axis as keras' LayerNormalization, with a closed-form backward pass.

    Same weights and outputs as `keras.layers.LayerNormalization`; the
    backward pass is the closed form
    dx = (g - mean(g) - x̂ mean(g x̂)) / sigma with g = dy * gamma: fewer ops
    forward and backward than differentiating keras' forward pass (moments,
    rsqrt, the affine terms). In float32 whatever the policy, as keras'.
    On a CPU those small ops were a large share of the Transformer's step
    (figures in benchmarks/RESULTS.md). Other configurations (several
    axes, RMS scaling, no centre or scale) run keras' own call.

    Example:
    >>> x = keras.ops.convert_to_tensor([[1.0, 2.0, 3.0, 6.0]])
    >>> [round(float(v), 3) for v in LayerNorm(epsilon=1e-5)(x)[0]]
    [-1.069, -0.535, 0.0, 1.604]
    """

    def call(self, inputs):
        axes = [self.axis] if isinstance(self.axis, int) else list(self.axis)
        last = len(inputs.shape) - 1
        if (keras.backend.backend() != "tensorflow" or self.rms_scaling or not self.center
                or not self.scale or [a % len(inputs.shape) for a in axes] != [last]):
            return super().call(inputs)
        x = tf.cast(inputs, tf.float32)
        outputs = _layer_norm(x, tf.cast(self.gamma, tf.float32), tf.cast(self.beta, tf.float32), self.epsilon)
        return tf.cast(outputs, self.compute_dtype)


def _layer_norm(x, gamma, beta, epsilon):
    @tf.custom_gradient
    def normalise(x, gamma, beta):
        mean = tf.reduce_mean(x, -1, keepdims=True)
        centred = x - mean
        inverse_std = tf.math.rsqrt(tf.reduce_mean(tf.square(centred), -1, keepdims=True) + epsilon)
        normed = centred * inverse_std

        def gradient(upstream):
            scaled = upstream * gamma
            dx = inverse_std * (scaled - tf.reduce_mean(scaled, -1, keepdims=True)
                                - normed * tf.reduce_mean(scaled * normed, -1, keepdims=True))
            # gamma's and beta's gradients: sums over the rows.
            rows = tf.range(tf.rank(upstream) - 1)
            return dx, tf.reduce_sum(upstream * normed, rows), tf.reduce_sum(upstream, rows)

        return normed * gamma + beta, gradient

    return normalise(x, gamma, beta)

