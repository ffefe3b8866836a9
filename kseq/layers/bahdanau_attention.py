"""Bahdanau's additive attention."""

import keras

from kseq.layers.scored_attention import ScoredAttention, additive_score
from kseq._validation import check_positive_int


@keras.saving.register_keras_serializable("kseq")
class BahdanauAttention(ScoredAttention):
    """Additive attention: score(s, h_j) = v_a^T tanh(W_a s + U_a h_j).

    In Bahdanau's decoder the query is the previous decoder state s_{i-1} and
    the context is fed into the next decoder input (see `RNNDecoder`). U_a h_j
    depends only on the source, so `prepare_memory` computes it once.

    Args:
        units: A, the width of the additive hidden layer.

    Call arguments:
        query: (B, T, Dq) decoder states.
        values: (B, S, Dv) encoder outputs.
        padding_mask: optional (B, S) bool, True at real source tokens.

    Returns:
        (context, weights): (B, T, Dv) and (B, T, S); weights sum to 1 over S
        and are 0 on padding.

    Example:
    >>> attention = BahdanauAttention(units=16)
    >>> context, weights = attention(keras.ops.ones((2, 3, 8)), keras.ops.ones((2, 5, 6)))
    >>> tuple(context.shape)
    (2, 3, 6)

    References:
        Bahdanau, Cho and Bengio, 2015, "Neural Machine Translation by Jointly
        Learning to Align and Translate", appendix A.1.2.
    """

    def __init__(self, units: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.units = check_positive_int("units", units)

    def build(self, query_shape, values_shape):
        self.build_additive_score(query_shape, values_shape, self.units)
        self.built = True

    def prepare_memory(self, values):
        """Computes U_a h_j for every source position, once per source.

        Args:
            values: (B, S, Dv) encoder outputs.

        Returns:
            (B, S, A) projected keys.
        """
        return self.memory_dense(values)

    def compute_scores(self, query, keys):
        """Scores every query against every source position.

        Args:
            query: (B, T, Dq) decoder states.
            keys: (B, S, A) from `prepare_memory`.

        Returns:
            (B, T, S) unnormalised scores.
        """
        return additive_score(self.query_dense(query), keys, self.score_dense)

    def get_config(self):
        config = super().get_config()
        config.update({"units": self.units})
        return config
