"""What the Transformer encoder and decoder blocks share."""

import keras
from keras import ops

from kseq.layers.cached_multi_head_attention import CachedMultiHeadAttention
from kseq.layers.feed_forward import PositionwiseFeedForward
from kseq.layers.layer_norm import LayerNorm
from kseq._shapes import dynamic_shape
from kseq._validation import check_positive_int, check_rate


class TransformerBlock(keras.layers.Layer):
    """Base of the encoder and decoder blocks: sublayers wrapped in a
    residual connection, dropout and LayerNorm, post-norm (the paper,
    LN(x + Dropout(F(x)))) or pre-norm (x + Dropout(F(LN(x)))).

    Args:
        num_heads: H, attention heads; must divide the model width D.
        ff_dim: inner width of the feed-forward network.
        dropout: rate applied to every sublayer output before the residual
            sum. Defaults to 0.1.
        norm_first: False for post-norm (the paper), True for pre-norm (the
            stack then needs a final LayerNorm, which the models add).
        activation: feed-forward activation. Defaults to "relu".
        layer_norm_epsilon: LayerNorm epsilon. Defaults to 1e-5.
    """

    def __init__(
        self,
        num_heads: int,
        ff_dim: int,
        dropout: float = 0.1,
        norm_first: bool = False,
        activation: str = "relu",
        layer_norm_epsilon: float = 1e-5,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.ff_dim = check_positive_int("ff_dim", ff_dim)
        self.dropout = check_rate("dropout", dropout)
        self.norm_first = bool(norm_first)
        self.activation = keras.activations.get(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.supports_masking = True

    def _make_attention(self, name, query_shape, value_shape):
        width = query_shape[-1]
        if width % self.num_heads:
            raise ValueError(
                f"The model width D={width} must be divisible by "
                f"`num_heads`={self.num_heads}."
            )
        layer = CachedMultiHeadAttention(
            num_heads=self.num_heads,
            key_dim=width // self.num_heads,
            dtype=self.dtype_policy,
            name=name,
        )
        layer.build(query_shape, value_shape)
        return layer

    def _make_residual(self, name, inputs_shape):
        """A (LayerNorm, Dropout) pair for one sublayer."""
        norm = LayerNorm(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=f"{name}_norm"
        )
        norm.build(inputs_shape)
        return norm, keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)

    def _build_feed_forward(self, inputs_shape):
        self.feed_forward = PositionwiseFeedForward(
            self.ff_dim, self.activation, dtype=self.dtype_policy, name="feed_forward"
        )
        self.feed_forward.build(inputs_shape)
        self.feed_forward_norm, self.feed_forward_dropout = self._make_residual(
            "feed_forward", inputs_shape
        )

    def _residual(self, x, sublayer, norm, dropout, training, step_dropout=None):
        """One sublayer with its residual, `dropout` (a keras Dropout) and
        `norm`; `step_dropout` (a `kseq.layers.dropout.StepDropout`, given in
        compiled blocks) drops instead of `dropout` when given."""
        if step_dropout is None:
            def drop(y):
                return dropout(y, training=training)
        else:
            def drop(y):
                return step_dropout(y, self.dropout)
        if self.norm_first:
            return x + drop(sublayer(norm(x)))
        return norm(x + drop(sublayer(x)))

    def _feed_forward_residual(self, x, training, step_dropout=None):
        return self._residual(
            x, self.feed_forward, self.feed_forward_norm, self.feed_forward_dropout, training,
            step_dropout,
        )

    @staticmethod
    def _default_padding_mask(inputs, padding_mask):
        if padding_mask is None:
            return ops.ones(dynamic_shape(inputs)[:2], "bool")
        return padding_mask

    def compute_output_shape(self, inputs_shape, *args, **kwargs):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "ff_dim": self.ff_dim,
                "dropout": self.dropout,
                "norm_first": self.norm_first,
                "activation": keras.activations.serialize(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
            }
        )
        return config
