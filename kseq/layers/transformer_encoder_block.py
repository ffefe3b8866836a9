"""One Transformer encoder layer."""

import keras
from keras import ops

from kseq.layers.masking import attention_mask
from kseq._shapes import dynamic_shape
from kseq.layers.transformer_block import TransformerBlock


@keras.saving.register_keras_serializable("kseq")
class TransformerEncoderBlock(TransformerBlock):
    """Self-attention over the source, then a position-wise feed-forward
    network, each with residual, dropout and LayerNorm.

    Args: see `TransformerBlock` (num_heads, ff_dim, dropout=0.1,
        norm_first=False, activation="relu", layer_norm_epsilon=1e-5).

    Call arguments:
        inputs: (B, S, D).
        padding_mask: optional (B, S) bool, True at real tokens; padded keys
            get no attention. Falls back to the Keras mask of `inputs`.
        training: whether dropout is active.
        step_dropout: optional `kseq.layers.dropout.StepDropout` of the
            training step, which then draws this block's dropout masks
            (what `TransformerSeq2Seq` passes with `compiled_blocks`).

    Returns:
        (B, S, D).

    Example:
    >>> block = TransformerEncoderBlock(num_heads=2, ff_dim=32)
    >>> tuple(block(keras.ops.ones((2, 5, 8))).shape)
    (2, 5, 8)

    References:
        Vaswani et al., 2017, "Attention Is All You Need", section 3.1;
        Xiong et al., 2020, "On Layer Normalization in the Transformer
        Architecture" (pre-norm).
    """

    def build(self, inputs_shape):
        self.self_attention = self._make_attention("self_attention", inputs_shape, inputs_shape)
        self.self_attention_norm, self.self_attention_dropout = self._make_residual(
            "self_attention", inputs_shape
        )
        self._build_feed_forward(inputs_shape)
        self.built = True

    def call(self, inputs, padding_mask=None, training=None, mask=None, step_dropout=None):
        padding_mask = self._default_padding_mask(
            inputs, mask if padding_mask is None else padding_mask
        )
        self_mask = attention_mask(padding_mask, dynamic_shape(inputs)[1])

        def self_attend(x):
            return self.self_attention.attend_sequence(x, attention_mask=self_mask, training=training)

        x = self._residual(
            inputs, self_attend, self.self_attention_norm, self.self_attention_dropout, training,
            step_dropout,
        )
        return self._feed_forward_residual(x, training, step_dropout)
