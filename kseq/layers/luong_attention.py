"""Luong's global attention with dot, general and concat scores."""

import keras
from keras import ops

from kseq.layers.scored_attention import ScoredAttention, additive_score
from kseq._validation import check_choice

LUONG_SCORES = ("dot", "general", "concat")


@keras.saving.register_keras_serializable("kseq")
class LuongAttention(ScoredAttention):
    """Global attention of Luong et al. over encoder outputs.

    score(h_t, h_s) is
    - "dot":     h_t^T h_s (needs Dq == Dv),
    - "general": h_t^T W_a h_s,
    - "concat":  v_a^T tanh(W_a [h_t; h_s]).
    The decoder combines the returned context c_t with its state h_t into the
    attentional state tanh(W_c [c_t; h_t]) (see `RNNDecoder`).

    Args:
        score: "dot", "general" or "concat". Defaults to "dot".
        units: hidden width of the "concat" score; defaults to Dq.

    Call arguments:
        query: (B, T, Dq) decoder states.
        values: (B, S, Dv) encoder outputs.
        padding_mask: optional (B, S) bool, True at real source tokens.

    Returns:
        (context, weights): (B, T, Dv) and (B, T, S); weights sum to 1 over S
        and are 0 on padding.

    Example:
    >>> attention = LuongAttention(score="general")
    >>> context, weights = attention(keras.ops.ones((2, 3, 8)), keras.ops.ones((2, 5, 8)))
    >>> tuple(weights.shape)
    (2, 3, 5)

    References:
        Luong, Pham and Manning, 2015, "Effective Approaches to Attention-based
        Neural Machine Translation", section 3.1.
    """

    def __init__(self, score: str = "dot", units: int | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.score = check_choice("score", score, LUONG_SCORES)
        if units is not None and (not isinstance(units, int) or units < 1):
            raise ValueError(f"`units` must be a positive integer; got {units!r}.")
        self.units = units

    def build(self, query_shape, values_shape):
        query_dim, value_dim = query_shape[-1], values_shape[-1]
        if self.score == "dot" and query_dim != value_dim:
            raise ValueError(
                "LuongAttention(score='dot') needs queries and values of the "
                f"same width; got query width {query_dim} and value width "
                f"{value_dim}. Use score='general' or project the values."
            )
        if self.score == "general":
            self.memory_dense = keras.layers.Dense(
                query_dim, use_bias=False, dtype=self.dtype_policy, name="memory_dense"
            )
            self.memory_dense.build(values_shape)
        if self.score == "concat":
            self.build_additive_score(
                query_shape, values_shape, self.units or query_dim
            )
        self.built = True

    def prepare_memory(self, values):
        """Computes the source-only part of the score, once per source.

        Args:
            values: (B, S, Dv) encoder outputs.

        Returns:
            The values themselves for "dot", W_a h_s (B, S, Dq) for "general",
            the projected keys (B, S, A) for "concat".
        """
        if self.score == "dot":
            return values
        return self.memory_dense(values)

    def compute_scores(self, query, keys):
        """Scores every query against every source position.

        Args:
            query: (B, T, Dq) decoder states.
            keys: the output of `prepare_memory`.

        Returns:
            (B, T, S) unnormalised scores.
        """
        if self.score == "concat":
            return additive_score(self.query_dense(query), keys, self.score_dense)
        return ops.matmul(query, ops.transpose(keys, (0, 2, 1)))

    def get_config(self):
        config = super().get_config()
        config.update({"score": self.score, "units": self.units})
        return config
