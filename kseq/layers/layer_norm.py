"""LayerNorm over the last axis with its gradient written out."""

import keras
import tensorflow as tf

from kseq.layers.column_sums import column_sums
from kseq.layers.device_paths import uses


@keras.saving.register_keras_serializable("kseq")
class LayerNorm(keras.layers.LayerNormalization):
    """Normalises over the last axis as keras' LayerNormalization, with a closed-form backward pass.

    Same weights and outputs as `keras.layers.LayerNormalization`; the
    backward pass is the closed form
    dx = (g - mean(g) - x̂ mean(g x̂)) / sigma with g = dy * gamma: fewer ops
    forward and backward than differentiating keras' forward pass (moments,
    rsqrt, the affine terms). In float32 whatever the policy, as keras'.
    On a CPU those small ops were a large share of the Transformer's step
    (figures in benchmarks/RESULTS.md). With the `layer_norm` path of
    `kseq.layers.device_paths` the statistics are one fused batch-norm op
    each way (`_fused_layer_norm`): a GPU pays a launch per op; with
    `bias_gradients`, gamma's and beta's gradients are one matmul. Other
    configurations (several axes, RMS scaling, no centre or scale) run
    keras' own call.

    Example:
    >>> x = keras.ops.convert_to_tensor([[1.0, 2.0, 3.0, 6.0]])
    >>> [round(float(v), 3) for v in LayerNorm(epsilon=1e-5)(x)[0]]
    [-1.069, -0.535, 0.0, 1.604]
    """

    def build(self, input_shape):
        super().build(input_shape)
        # Chosen once: every trace of this layer builds the same graph.
        self._fused = uses("layer_norm")
        self._sums_by_product = uses("bias_gradients")

    def call(self, inputs):
        axes = [self.axis] if isinstance(self.axis, int) else list(self.axis)
        last = len(inputs.shape) - 1
        if (keras.backend.backend() != "tensorflow" or self.rms_scaling or not self.center
                or not self.scale or [a % len(inputs.shape) for a in axes] != [last]):
            return super().call(inputs)
        x = tf.cast(inputs, tf.float32)
        normalise = _fused_layer_norm if self._fused else _layer_norm
        outputs = normalise(x, tf.cast(self.gamma, tf.float32), tf.cast(self.beta, tf.float32),
                            self.epsilon, self._sums_by_product)
        return tf.cast(outputs, self.compute_dtype)


def _layer_norm(x, gamma, beta, epsilon, sums_by_product=False):
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
            return (dx,) + _affine_gradients(upstream, normed, sums_by_product)

        return normed * gamma + beta, gradient

    return normalise(x, gamma, beta)


def _affine_gradients(upstream, normed, sums_by_product):
    """(d gamma, d beta): sums over the rows of upstream * normed and of upstream."""
    if not sums_by_product:
        rows = tf.range(tf.rank(upstream) - 1)
        return tf.reduce_sum(upstream * normed, rows), tf.reduce_sum(upstream, rows)
    return tuple(tf.split(column_sums(tf.concat([upstream * normed, upstream], -1)), 2))


def _fused_layer_norm(x, gamma, beta, epsilon, sums_by_product=False):
    """`_layer_norm` with its statistics as TensorFlow's fused batch-norm kernels.

    Normalising rows: x viewed as one (1, rows, D, 1) NCHW image whose
    channels are the rows, in training mode (statistics of the batch, here
    a row's own), with unit scale and zero offset; its gradient is the
    training-mode FusedBatchNormGradV3. gamma and beta are plain ops: as an
    inference-mode batch norm on (rows, D, 1, 1) cuDNN ran them at about
    30 times the training-mode call's time (benchmarks/RESULTS.md, "GPU").
    Each runs on a CPU too, which tests it.
    """
    width = x.shape[-1]
    shape = tf.shape(x)

    @tf.custom_gradient
    def normalise(x, gamma, beta):
        rows = tf.reshape(x, (1, -1, width, 1))
        count = tf.shape(rows)[1:2]
        unit_rows = tf.ones(count)
        normed, _, _, mean, variance, reserve = tf.raw_ops.FusedBatchNormV3(
            x=rows, scale=unit_rows, offset=tf.zeros(count), mean=tf.zeros([0]),
            variance=tf.zeros([0]), epsilon=epsilon, exponential_avg_factor=1.0,
            data_format="NCHW", is_training=True)
        normed = tf.reshape(normed, shape)

        def gradient(upstream):
            d_normed = tf.reshape(upstream * gamma, (1, -1, width, 1))
            dx = tf.raw_ops.FusedBatchNormGradV3(
                y_backprop=d_normed, x=rows, scale=unit_rows,
                reserve_space_1=mean, reserve_space_2=variance, reserve_space_3=reserve,
                epsilon=epsilon, data_format="NCHW", is_training=True)[0]
            return (tf.reshape(dx, shape),) + _affine_gradients(upstream, normed, sums_by_product)

        return normed * gamma + beta, gradient

    return normalise(x, gamma, beta)
