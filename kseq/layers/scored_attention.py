"""Shared machinery of the RNN-decoder attentions (Luong, Bahdanau)."""

import keras
from keras import ops

from kseq.layers.masking import masked_softmax


def additive_score(projected_query, keys, score_dense):
    """Computes the additive score v^T tanh(W_q q_t + W_k h_s) for every (t, s).

    Args:
        projected_query: (B, T, A) the queries already multiplied by W_q.
        keys: (B, S, A) the source memory already multiplied by W_k.
        score_dense: the Dense layer holding v, mapping A to 1.

    Returns:
        (B, T, S) unnormalised scores.
    """
    hidden = ops.tanh(ops.expand_dims(projected_query, 2) + ops.expand_dims(keys, 1))
    return ops.squeeze(score_dense(hidden), -1)


class ScoredAttention(keras.layers.Layer):
    """Attention as a masked softmax over a score of query and source memory.

    Subclasses define `prepare_memory` (work that depends only on the source,
    done once per sequence rather than once per decoding step) and
    `compute_scores`.

    Call arguments:
        query: (B, T, Dq) decoder states.
        values: (B, S, Dv) encoder outputs (the memory).
        padding_mask: optional (B, S) bool, True at real source tokens.

    Returns:
        (context, weights): (B, T, Dv) weighted sums of `values` and the
        (B, T, S) weights, which sum to 1 over S and are 0 on padding.
    """

    def build_additive_score(self, query_shape, values_shape, units):
        """Creates W_q, W_k and v of the additive score with hidden width `units`.

        Args:
            query_shape: shape of the queries, (B, T, Dq).
            values_shape: shape of the values, (B, S, Dv).
            units: A, the hidden width of the score.
        """
        self.query_dense = keras.layers.Dense(
            units, use_bias=False, dtype=self.dtype_policy, name="query_dense"
        )
        self.memory_dense = keras.layers.Dense(
            units, use_bias=False, dtype=self.dtype_policy, name="memory_dense"
        )
        self.score_dense = keras.layers.Dense(
            1, use_bias=False, dtype=self.dtype_policy, name="score_dense"
        )
        self.query_dense.build(query_shape)
        self.memory_dense.build(values_shape)
        self.score_dense.build(tuple(query_shape[:-1]) + (units,))

    def prepare_memory(self, values):
        """Computes the source-only part of the score, once per source.

        Args:
            values: (B, S, Dv) encoder outputs.

        Returns:
            The keys `compute_scores` takes, (B, S, ...).
        """
        raise NotImplementedError

    def compute_scores(self, query, keys):
        """Scores every query against every source position.

        Args:
            query: (B, T, Dq) decoder states.
            keys: the output of `prepare_memory` for the source.

        Returns:
            (B, T, S) unnormalised scores.
        """
        raise NotImplementedError

    def attend(self, query, keys, values, padding_mask=None):
        """Attends over a source whose memory is already prepared.

        Args:
            query: (B, T, Dq) decoder states.
            keys: the output of `prepare_memory(values)`.
            values: (B, S, Dv) encoder outputs.
            padding_mask: optional (B, S) bool, True at real source tokens. Defaults to None.

        Returns:
            (context, weights): (B, T, Dv) and (B, T, S), as the class's call.
        """
        scores = ops.cast(self.compute_scores(query, keys), "float32")
        mask = None
        if padding_mask is not None:
            mask = ops.expand_dims(ops.cast(padding_mask, "bool"), 1)  # (B, 1, S)
        weights = ops.cast(masked_softmax(scores, mask), values.dtype)
        return ops.matmul(weights, values), weights

    def call(self, query, values, padding_mask=None):
        return self.attend(query, self.prepare_memory(values), values, padding_mask)

    def compute_output_shape(self, query_shape, values_shape):
        batch, length = query_shape[0], query_shape[1]
        return (
            (batch, length, values_shape[-1]),
            (batch, length, values_shape[1]),
        )
