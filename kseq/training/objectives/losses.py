"""Token-level losses that ignore padding."""

import keras
import tensorflow as tf
from keras import ops

from kseq._validation import check_rate, ids_in_range
from kseq.special_ids import PAD_ID


def token_log_probs(y_true, logits):
    """Gives the log-probabilities of the labels and of every id, from logits.

    Computed in float32 whatever the logits' dtype (mixed precision).

    Args:
        y_true: (B, T) int labels.
        logits: (B, T, V) logits.

    Returns:
        (log p(label) (B, T), log p (B, T, V)), float32.
    """
    log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    labels = ops.expand_dims(ops.cast(y_true, "int32"), -1)
    return ops.take_along_axis(log_probs, labels, axis=-1)[..., 0], log_probs


def token_weights(y_true, sample_weight=None, pad_id=PAD_ID):
    """Weighs each label token: 0 at PAD labels, times the sample weights.

    Args:
        y_true: (B, T) int labels, or (B,).
        sample_weight: (B,) or (B, T) weights; None (default) for none.
        pad_id: the label id weighted 0; None: every label counts. Default PAD_ID (0).

    Returns:
        float32 weights shaped as `y_true`: (B, T), or (B,) for (B,) labels.
    """
    if pad_id is None:
        weights = ops.ones_like(y_true, "float32")
    else:
        weights = ops.cast(ops.not_equal(ops.cast(y_true, "int32"), pad_id), "float32")
    if sample_weight is not None:
        sample_weight = ops.cast(sample_weight, "float32")
        if len(sample_weight.shape) < len(weights.shape):
            sample_weight = ops.expand_dims(sample_weight, -1)
        weights = weights * sample_weight
    return weights


def smoothed_cross_entropy(labels, logits, smoothing=0.0):
    """Computes the cross-entropy against a label-smoothed target, with its own gradient.

    The target is (1 - e) one-hot + e / V, e = `smoothing`.

    Written out with its own gradient, softmax minus target: on a CPU these
    few multi-threaded ops take half the time of TensorFlow's fused kernels,
    which need a (N, V) one-hot target or have no smoothing (benchmarks/loss.py).
    The forward pass keeps exp(logits - max): the backward pass is a
    multiply, a subtraction (with smoothing) and a scatter. Labels outside
    [0, V) fail the step with a message naming `y_true` (an Assert that
    nothing waits for, `kseq._validation.ids_in_range`).

    Args:
        labels: (...) int labels in [0, V).
        logits: (..., V) logits, any float dtype.
        smoothing: e in [0, 1). Default 0.

    Returns:
        (...) float32 cross-entropy, one a label.
    """
    labels = ops.cast(labels, "int32")
    logits = ops.cast(logits, "float32")
    vocab_size = tf.shape(logits)[-1]
    flat_labels = ids_in_range(tf.reshape(labels, (-1,)), vocab_size, [
        "`y_true` holds ids outside [0, V), V = the logits' last dimension:", vocab_size])
    uniform = smoothing / tf.cast(vocab_size, tf.float32)

    @tf.custom_gradient
    def per_token(logits):
        rows = tf.reshape(logits, (-1, vocab_size))
        peak = tf.stop_gradient(tf.reduce_max(rows, -1, keepdims=True))
        exp = tf.exp(rows - peak)
        total = tf.reduce_sum(exp, -1, keepdims=True)
        label_logit = tf.gather(rows, flat_labels[:, None], batch_dims=1)[:, 0]
        # -sum_i t_i log p_i = log Z - (1 - e) z_label - e mean(z)
        value = (peak + tf.math.log(total))[:, 0] - (1.0 - smoothing) * label_logit
        if smoothing:
            value -= smoothing * tf.reduce_mean(rows, -1)

        def gradient(upstream):
            upstream = tf.reshape(upstream, (-1, 1))
            grad = exp * (upstream / total)
            if smoothing:
                grad -= uniform * upstream
            at_labels = tf.stack([tf.range(tf.shape(flat_labels)[0]), flat_labels], 1)
            grad = tf.tensor_scatter_nd_sub(grad, at_labels, (1.0 - smoothing) * upstream[:, 0])
            return tf.reshape(grad, tf.shape(logits))

        return tf.reshape(value, tf.shape(labels)), gradient

    return per_token(logits)


@keras.saving.register_keras_serializable("kseq")
class MaskedSparseCategoricalCrossentropy(keras.losses.Loss):
    """Cross-entropy from logits over integer labels, ignoring PAD labels,
    with optional label smoothing; the mean is over real (non-PAD) tokens.

    With smoothing e the target distribution is (1 - e) one-hot + e / V
    (Szegedy et al., 2016; 0.1 in "Attention Is All You Need"). Keras 3.15's
    sparse cross-entropy has `ignore_class` but no label smoothing.

    Args:
        label_smoothing: e in [0, 1). Defaults to 0.
        pad_id: label id to ignore. Defaults to kseq.PAD_ID (0); None: every
            label counts (a classifier's class ids, where 0 is a class).

    Call arguments:
        y_true: (B, T) int labels, or (B,) (one label a row, e.g. a class).
        y_pred: (B, T, V) logits, or (B, V).
        sample_weight: optional (B,) or (B, T) weights.

    Returns:
        Scalar loss: the sum over real tokens divided by the number of real
        tokens (zero when there are none). Under a tf.distribute strategy the
        divisor is the count over all replicas, so the replicas' gradients
        add up to one device's; each replica's value is the global mean
        divided by the number of replicas (they add up to the global mean,
        and Keras' logged loss is the global mean even when a batch splits
        into shards of different sizes).

    Example:
    >>> loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)
    >>> float(loss([[5, 2, 0]], keras.ops.zeros((1, 3, 8))))  # uniform logits: log(8)
    2.079...
    """

    def __init__(
        self,
        label_smoothing: float = 0.0,
        pad_id: int = PAD_ID,
        name: str = "masked_sparse_categorical_crossentropy",
        dtype=None,
    ) -> None:
        super().__init__(name=name, reduction="none", dtype=dtype)
        self.label_smoothing = check_rate("label_smoothing", label_smoothing)
        self.pad_id = pad_id

    def call(self, y_true, y_pred):
        """Per-token losses (B, T), PAD positions included, in float32."""
        return smoothed_cross_entropy(y_true, y_pred, self.label_smoothing)

    def __call__(self, y_true, y_pred, sample_weight=None):
        with keras.name_scope(self.name):
            weights = token_weights(y_true, sample_weight, self.pad_id)
            # Scalars on every replica, whatever their (possibly empty) shard.
            total = ops.reshape(ops.sum(self.call(y_true, y_pred) * weights), ())
            count = ops.reshape(ops.sum(weights), ())
            context = tf.distribute.get_replica_context()
            if context is None or context.num_replicas_in_sync == 1:
                return ops.divide_no_nan(total, count)
            global_total, global_count = tf.unstack(context.all_reduce(
                tf.distribute.ReduceOp.SUM, tf.stack([tf.stop_gradient(total), count])))
            # The gradients come from this replica's share of the global sum...
            share = ops.divide_no_nan(total, global_count)
            # ...the value is the same on every replica: Keras logs the
            # replicas' values times their number, averaged with their row
            # counts as weights, which only gives the global mean when the
            # values are equal (an odd batch splits into unequal shards).
            value = ops.divide_no_nan(global_total, global_count) / context.num_replicas_in_sync
            return share + tf.stop_gradient(value - share)

    def get_config(self):
        return {"name": self.name, "label_smoothing": self.label_smoothing, "pad_id": self.pad_id}

