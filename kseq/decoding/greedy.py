"""Greedy search: the most likely token at every step."""

import tensorflow as tf

from kseq.decoding.token_search import TokenSearch


class GreedySearch(TokenSearch):
    """Picks the arg-max token at every step until EOS or `max_length`.

    Args:
        max_length: the most tokens to generate (a Python int).
        eos_id: the id that ends a row (-1: never stop early).
        limits: a `kseq.decoding.Limits` instead of `max_length` and the
            other limits (`eos_id`, `no_repeat_ngram_size`, ...) as keywords.

    Example:
    >>> import tensorflow as tf
    >>> def step(tokens, state, index):  # always prefers id 5, then EOS
    ...     logits = tf.one_hot(tf.fill(tf.shape(tokens), tf.where(index < 2, 5, 2)), 8)
    ...     return logits, state
    >>> ids, _ = GreedySearch(max_length=4)(step, (), batch_size=1)
    >>> ids.numpy().tolist()
    [[5, 5, 2, 0]]
    """

    def chooser(self):
        """Gives the function that picks each row's most likely token.

        Returns:
            `choose(logits (B, V) float32, index) -> (B,) int32 tokens`, the argmax.
        """
        return lambda logits, index: tf.argmax(logits, axis=-1, output_type=tf.int32)
