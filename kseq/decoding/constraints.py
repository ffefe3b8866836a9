"""Logit constraints every search applies."""

import tensorflow as tf

from kseq.special_ids import BOS_ID, PAD_ID


def suppress_special_tokens(logits, token_ids=(PAD_ID, BOS_ID)):
    """Sets the logits of PAD and BOS to -inf: a search never emits them.

    PAD after EOS and no BOS in the output are part of the generate
    contract; without this an untrained or odd model could break it.
    """
    vocab = tf.shape(logits)[-1]
    banned = tf.reduce_any(
        tf.equal(tf.range(vocab)[:, None], tf.constant(token_ids, tf.int32)[None, :]), axis=1
    )
    return tf.where(banned, tf.cast(-float("inf"), logits.dtype), logits)
