"""A search's fixed-shape output, cut to what was generated."""

import tensorflow as tf

from kseq.special_ids import PAD_ID


def trim_padding(ids, pad_id=PAD_ID):
    """Drops the trailing columns that are PAD in every row: (..., L) -> (..., T')."""
    ids = tf.convert_to_tensor(ids)
    used = tf.reduce_any(tf.not_equal(ids, pad_id), axis=tf.range(tf.rank(ids) - 1))
    width = tf.reduce_max(tf.where(used, tf.range(1, tf.shape(ids)[-1] + 1), 0))
    return ids[..., :width]
