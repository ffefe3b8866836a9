"""Token-level metrics that ignore padding."""

import keras
from keras import ops

from kseq.special_ids import PAD_ID
from kseq.training.objectives.losses import token_log_probs, token_weights


class MaskedTokenMean(keras.metrics.Metric):
    """Running mean of a per-token value over real (non-PAD) label tokens.

    A subclass gives the value in `token_values`.

    Args:
        pad_id: the label id left out. Default PAD_ID (0).
        name: the metric's name; None (default): keras' default.
        dtype: the metric's dtype; None (default): keras' default.
    """

    def __init__(self, pad_id: int = PAD_ID, name: str | None = None, dtype=None) -> None:
        super().__init__(name=name, dtype=dtype)
        self.pad_id = pad_id
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def token_values(self, y_true, y_pred):
        """Gives each token's value; a subclass implements it.

        Args:
            y_true: (B, T) int32 labels.
            y_pred: (B, T, V) logits.

        Returns:
            (B, T) float32 values.
        """
        raise NotImplementedError

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.cast(y_true, "int32")
        weights = token_weights(y_true, sample_weight, self.pad_id)
        values = self.token_values(y_true, y_pred)
        self.total.assign_add(ops.sum(values * weights))
        self.count.assign_add(ops.sum(weights))

    def result(self):
        return ops.divide_no_nan(self.total, self.count)

    def get_config(self):
        return {"name": self.name, "dtype": self.dtype, "pad_id": self.pad_id}


@keras.saving.register_keras_serializable("kseq")
class MaskedAccuracy(MaskedTokenMean):
    """Fraction of real (non-PAD) label tokens whose argmax logit is right.

    Args:
        pad_id: the label id left out. Default PAD_ID (0).
        name: the metric's name. Default "masked_accuracy".
        dtype: the metric's dtype; None (default): keras' default.

    Example:
    >>> metric = MaskedAccuracy()
    >>> metric.update_state([[1, 2, 0]], keras.ops.one_hot([[1, 3, 3]], 4))
    >>> float(metric.result())
    0.5
    """

    def __init__(self, pad_id: int = PAD_ID, name: str = "masked_accuracy", dtype=None) -> None:
        super().__init__(pad_id=pad_id, name=name, dtype=dtype)

    def token_values(self, y_true, y_pred):
        """Gives 1.0 where the argmax logit is the label, else 0.0.

        Args:
            y_true: (B, T) int32 labels.
            y_pred: (B, T, V) logits.

        Returns:
            (B, T) float32.
        """
        predictions = ops.cast(ops.argmax(y_pred, axis=-1), "int32")
        return ops.cast(ops.equal(predictions, y_true), "float32")


@keras.saving.register_keras_serializable("kseq")
class Perplexity(MaskedTokenMean):
    """exp of the mean negative log-likelihood per real (non-PAD) token.

    Computed from logits without label smoothing, so it is comparable
    across runs whatever smoothing the loss used.

    Args:
        pad_id: the label id left out. Default PAD_ID (0).
        name: the metric's name. Default "perplexity".
        dtype: the metric's dtype; None (default): keras' default.

    Example:
    >>> metric = Perplexity()
    >>> metric.update_state([[3, 2, 0]], keras.ops.zeros((1, 3, 8)))
    >>> round(float(metric.result()), 3)  # uniform over 8 ids
    8.0
    """

    def __init__(self, pad_id: int = PAD_ID, name: str = "perplexity", dtype=None) -> None:
        super().__init__(pad_id=pad_id, name=name, dtype=dtype)

    def token_values(self, y_true, y_pred):
        """Gives each label's negative log-likelihood.

        Args:
            y_true: (B, T) int32 labels.
            y_pred: (B, T, V) logits.

        Returns:
            (B, T) float32.
        """
        return -token_log_probs(y_true, y_pred)[0]

    def result(self):
        return ops.exp(super().result())
