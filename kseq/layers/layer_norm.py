"""LayerNorm over the last axis with its gradient written out."""

import keras
import tensorflow as tf

from kseq.layers.device_paths import use_gpu_paths


@keras.saving.register_keras_serializable("kseq")
class LayerNorm(keras.layers.LayerNormalization):
    """Normalises over the last axis as keras' LayerNormalization, with a closed-form backward pass.

    Same weights and outputs as `keras.layers.LayerNormalization`; the
    backward pass is the closed form
    dx = (g - mean(g) - x̂ mean(g x̂)) / sigma with g = dy * gamma: fewer ops
    forward and backward than differentiating keras' forward pass (moments,
    rsqrt, the affine terms). In float32 whatever the policy, as keras'.
    On a CPU those small ops were a large share of the Transformer's step
    (figures in benchmarks/RESULTS.md). Where the layer is built for a GPU
    (`kseq.layers.device_paths`), the same function runs as four fused
    ops instead, two each way (`_fused_layer_norm`): a GPU pays a launch per
    op. Other configurations (several axes, RMS scaling, no centre or scale)
    run keras' own call.

    Example:
    >>> x = keras.ops.convert_to_tensor([[1.0, 2.0, 3.0, 6.0]])
    >>> [round(float(v), 3) for v in LayerNorm(epsilon=1e-5)(x)[0]]
    [-1.069, -0.535, 0.0, 1.604]
    """

    def build(self, input_shape):
        super().build(input_shape)
        # Chosen once: every trace of this layer builds the same graph.
        self._fused = use_gpu_paths()

    def call(self, inputs):
        axes = [self.axis] if isinstance(self.axis, int) else list(self.axis)
        last = len(inputs.shape) - 1
        if (keras.backend.backend() != "tensorflow" or self.rms_scaling or not self.center
                or not self.scale or [a % len(inputs.shape) for a in axes] != [last]):
            return super().call(inputs)
        x = tf.cast(inputs, tf.float32)
        normalise = _fused_layer_norm if self._fused else _layer_norm
        outputs = normalise(x, tf.cast(self.gamma, tf.float32), tf.cast(self.beta, tf.float32),
                            self.epsilon)
        return tf.cast(outputs, self.compute_dtype)


def _layer_norm(x, gamma, beta, epsilon):
    @tf.custom_gradient
    def normalise(x, gamma, beta):
        mean = tf.reduce_mean(x, -1, keepdims=True)
        centred = x - mean
        inverse_std = tf.math.rsqrt(tf.reduce_mean(tf.square(centred), -1, keepdims=True) + epsilon)
        normed = centred * inverse_std

        def gradient(upstream):
            rows = tf.range(tf.rank(upstream) - 1)
            scaled = upstream * gamma
            dx = inverse_std * (scaled - tf.reduce_mean(scaled, -1, keepdims=True)
                                - normed * tf.reduce_mean(scaled * normed, -1, keepdims=True))
            return dx, tf.reduce_sum(upstream * normed, rows), tf.reduce_sum(upstream, rows)

        return normed * gamma + beta, gradient

    return normalise(x, gamma, beta)


def _fused_layer_norm(x, gamma, beta, epsilon):
    """`_layer_norm` as TensorFlow's fused batch-norm kernels, for a GPU.

    Normalising rows: x viewed as one (1, rows, D, 1) NCHW image whose
    channels are the rows, in training mode (statistics of the batch, here
    a row's own), with unit scale and zero offset. Then gamma and beta as one
    (rows, D, 1, 1) NCHW batch norm in inference mode with mean 0, variance 1
    and epsilon 0: y = x * gamma + beta in one op. The backward pass is the
    two gradients in reverse: the inference-mode one gives d(normed) =
    dy * gamma, d(gamma) and d(beta) at once, in NHWC (its only CPU layout;
    grappler's layout optimizer leaves inference-mode gradients as they are),
    and the training-mode one dx. Each runs on a CPU too, which tests it.
    """
    width = x.shape[-1]
    shape = tf.shape(x)
    zero_features, unit_features = tf.zeros([width]), tf.ones([width])

    @tf.custom_gradient
    def normalise(x, gamma, beta):
        rows = tf.reshape(x, (1, -1, width, 1))
        count = tf.shape(rows)[1:2]
        unit_rows = tf.ones(count)
        normed, _, _, mean, variance, reserve = tf.raw_ops.FusedBatchNormV3(
            x=rows, scale=unit_rows, offset=tf.zeros(count), mean=tf.zeros([0]),
            variance=tf.zeros([0]), epsilon=epsilon, exponential_avg_factor=1.0,
            data_format="NCHW", is_training=True)
        normed = tf.reshape(normed, (-1, width, 1, 1))
        outputs, _, _, _, _, affine_reserve = tf.raw_ops.FusedBatchNormV3(
            x=normed, scale=gamma, offset=beta, mean=zero_features, variance=unit_features,
            epsilon=0.0, data_format="NCHW", is_training=False)

        def gradient(upstream):
            d_normed, d_gamma, d_beta, _, _ = tf.raw_ops.FusedBatchNormGradV3(
                y_backprop=tf.reshape(upstream, (-1, 1, 1, width)),
                x=tf.reshape(normed, (-1, 1, 1, width)), scale=gamma,
                reserve_space_1=zero_features, reserve_space_2=unit_features,
                reserve_space_3=affine_reserve, epsilon=0.0, data_format="NHWC",
                is_training=False)
            dx = tf.raw_ops.FusedBatchNormGradV3(
                y_backprop=tf.reshape(d_normed, (1, -1, width, 1)), x=rows, scale=unit_rows,
                reserve_space_1=mean, reserve_space_2=variance, reserve_space_3=reserve,
                epsilon=epsilon, data_format="NCHW", is_training=True)[0]
            return tf.reshape(dx, shape), d_gamma, d_beta

        return tf.reshape(outputs, shape), gradient

    return normalise(x, gamma, beta)
