"""A search's fixed-shape output, cut to what was generated."""

import tensorflow as tf

from kseq.special_ids import PAD_ID


def trim_padding(ids, pad_id=PAD_ID):
    """Drops the trailing columns that are PAD in every row: (..., L) -> (..., T')."""
    ids = tf.convert_to_tensor(ids)
    used = tf.reduce_any(tf.not_equal(ids, pad_id), axis=tf.range(tf.rank(ids) - 1))
    width = tf.reduce_max(tf.where(used, tf.range(1, tf.shape(ids)[-1] + 1), 0))
    return ids[..., :width]


def best_hypotheses(ids):
    """A search's output with one hypothesis per row: the best beam of a
    beam search's (B, N, L), any other output as it is."""
    return ids[:, 0] if ids.shape.rank == 3 else ids


def decoded_text(tokenizer, ids):
    """(strings (B,), ids (B, T')): a search's output, its best hypothesis
    per row with the all-PAD columns cut, and `tokenizer`'s text of it. The
    one path from generated ids to text: every export and every task's
    sampler goes through it."""
    ids = trim_padding(best_hypotheses(ids))
    return tokenizer.detokenize(ids), ids
