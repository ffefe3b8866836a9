"""What a detokenizer reads of generated ids."""

import tensorflow as tf

from kseq.special_ids import EOS_ID, UNK_ID


def output_ids_to_text_ids(ids, vocab_size):
    """Prepares generated ids for a detokenizer: out-of-range ids as UNK, and which positions come before the first EOS.

    Args:
        ids: generated (B, T) ids.
        vocab_size: V; ids outside [0, V) become UNK.

    Returns:
        (ids, before_eos): (B, T) int32 ids and a (B, T) bool mask of the
        positions before each row's first EOS, what a detokenizer should read.
    """
    ids = tf.convert_to_tensor(ids, tf.int32)
    before_eos = tf.equal(tf.cumsum(tf.cast(tf.equal(ids, EOS_ID), tf.int32), axis=1), 0)
    in_range = tf.logical_and(ids >= 0, ids < vocab_size)
    return tf.where(in_range, ids, UNK_ID), before_eos
