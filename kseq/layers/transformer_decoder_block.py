"""One Transformer decoder layer, with a cached step for decoding."""

import keras
from keras import ops

from kseq.layers.masking import attention_mask
from kseq._shapes import dynamic_shape
from kseq.layers.transformer_block import TransformerBlock


@keras.saving.register_keras_serializable("kseq")
class TransformerDecoderBlock(TransformerBlock):
    """Causal self-attention, encoder-decoder attention over the source (with
    the source padding mask), then a position-wise feed-forward network; each
    sublayer with residual, dropout and LayerNorm.

    Args: see `TransformerBlock` (num_heads, ff_dim, dropout=0.1,
        norm_first=False, activation="relu", layer_norm_epsilon=1e-5).

    Call arguments:
        inputs: (B, T, D) target-side inputs.
        encoder_outputs: (B, S, D).
        padding_mask: optional (B, T) bool, True at real target tokens.
        encoder_padding_mask: optional (B, S) bool, True at real source tokens.
        training: whether dropout is active.
        step_dropout: optional `kseq.layers.dropout.StepDropout` of the
            training step, which then draws this block's dropout masks
            (what `TransformerSeq2Seq` passes with `compiled_blocks`).

    Returns:
        (B, T, D).

    Decoding: `initial_decoding_state` and `step` run the block one token at
    a time with a preallocated key/value cache (the RNNDecoder's decoding
    API too); `step` on the teacher-forced tokens gives the same outputs as
    `call`, and its cross-attention weights.

    Example:
    >>> block = TransformerDecoderBlock(num_heads=2, ff_dim=32)
    >>> tuple(block(keras.ops.ones((2, 4, 8)), keras.ops.ones((2, 6, 8))).shape)
    (2, 4, 8)

    References:
        Vaswani et al., 2017, "Attention Is All You Need", section 3.1.
    """

    def build(self, inputs_shape, encoder_outputs_shape):
        self.self_attention = self._make_attention("self_attention", inputs_shape, inputs_shape)
        self.cross_attention = self._make_attention(
            "cross_attention", inputs_shape, encoder_outputs_shape
        )
        self.self_attention_norm, self.self_attention_dropout = self._make_residual(
            "self_attention", inputs_shape
        )
        self.cross_attention_norm, self.cross_attention_dropout = self._make_residual(
            "cross_attention", inputs_shape
        )
        self._build_feed_forward(inputs_shape)
        self.built = True

    def _forward(self, x, self_attend, cross_attend, training, step_dropout=None):
        x = self._residual(
            x, self_attend, self.self_attention_norm, self.self_attention_dropout, training,
            step_dropout,
        )
        x = self._residual(
            x, cross_attend, self.cross_attention_norm, self.cross_attention_dropout, training,
            step_dropout,
        )
        return self._feed_forward_residual(x, training, step_dropout)

    def _masks(self, inputs, encoder_outputs, padding_mask, encoder_padding_mask):
        length = dynamic_shape(inputs)[1]
        padding_mask = self._default_padding_mask(inputs, padding_mask)
        encoder_padding_mask = self._default_padding_mask(
            encoder_outputs, encoder_padding_mask
        )
        return (
            attention_mask(padding_mask, length, causal=True),
            attention_mask(encoder_padding_mask, length),
        )

    def call(
        self,
        inputs,
        encoder_outputs,
        padding_mask=None,
        encoder_padding_mask=None,
        training=None,
        step_dropout=None,
    ):
        self_mask, cross_mask = self._masks(
            inputs, encoder_outputs, padding_mask, encoder_padding_mask
        )

        def self_attend(x):
            return self.self_attention.attend_sequence(x, attention_mask=self_mask, training=training)

        def cross_attend(x):
            return self.cross_attention.attend_sequence(
                x, encoder_outputs, attention_mask=cross_mask, training=training
            )

        return self._forward(inputs, self_attend, cross_attend, training, step_dropout)

    def initial_decoding_state(self, encoder_outputs, max_length):
        """Makes the block's state for step-by-step decoding of one batch of sources.

        Args:
            encoder_outputs: (B, S, D) the encoder's outputs.
            max_length: L, the number of positions the self-attention cache
                holds; None for one that grows (see `CachedMultiHeadAttention.init_cache`).

        Returns:
            {"cache": a zeroed (B, H, L, D/H) self-attention key/value cache,
            "memory": the source's cross-attention keys/values, (B, H, S, D/H)
            each, computed once per source}.
        """
        batch = dynamic_shape(encoder_outputs)[0]
        return {
            "cache": self.self_attention.init_cache(batch, max_length),
            "memory": self.cross_attention.project_memory(encoder_outputs),
        }

    def step(self, inputs, state, index, encoder_padding_mask, training=False):
        """Runs the (B, T, D) inputs at positions index..index+T-1.

        Args:
            inputs: (R, T, D), usually T = 1: R = B rows, or B*K beams, each
                row's K beams side by side.
            state: from `initial_decoding_state` (or a previous step), its
                cache of R rows, its memory of B rows.
            index: position of the first input (scalar int or tensor).
            encoder_padding_mask: (B, S) bool.

        Returns:
            (outputs (R, T, D), state, cross-attention weights (R, H, T, S)).
        """
        found = {}

        def self_attend(x):
            output, found["cache"] = self.self_attention.cached_self_attention(
                x, state["cache"], index, training=training
            )
            return output

        def cross_attend(x):
            # A source's K beams attend to it as K queries of one row: one
            # (K, S) product a row and head, and the memory is kept once.
            rows, steps, width = dynamic_shape(x)
            sources = dynamic_shape(encoder_padding_mask)[0]
            queries = ops.reshape(x, (sources, -1, width))
            mask = attention_mask(encoder_padding_mask, dynamic_shape(queries)[1])
            output, weights = self.cross_attention.attend(
                queries, state["memory"], mask, training=training, return_attention_scores=True
            )
            heads, length = dynamic_shape(weights)[1::2]
            weights = ops.reshape(weights, (sources, heads, -1, steps, length))
            found["weights"] = ops.reshape(ops.transpose(weights, (0, 2, 1, 3, 4)), (rows, heads, steps, length))
            return ops.reshape(output, (rows, steps, width))

        outputs = self._forward(inputs, self_attend, cross_attend, training)
        return outputs, dict(state, cache=found["cache"]), found["weights"]
