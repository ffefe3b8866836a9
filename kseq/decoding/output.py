"""A search's fixed-shape output, cut to what was generated."""

import tensorflow as tf

from kseq.special_ids import PAD_ID


def trim_padding(ids, pad_id=PAD_ID):
    """Drops the trailing columns that are PAD in every row.

    Args:
        ids: (..., L) ids.
        pad_id: the padding id. Default PAD_ID.

    Returns:
        (..., T) ids, T <= L.
    """
    ids = tf.convert_to_tensor(ids)
    used = tf.reduce_any(tf.not_equal(ids, pad_id), axis=tf.range(tf.rank(ids) - 1))
    width = tf.reduce_max(tf.where(used, tf.range(1, tf.shape(ids)[-1] + 1), 0))
    return ids[..., :width]


def best_hypotheses(ids):
    """Keeps one hypothesis per row of a search's output: the best beam of a beam search's.

    Args:
        ids: a search's ids, (B, N, L) from a beam search with `num_return` N, else (B, L).

    Returns:
        (B, L) ids.
    """
    return ids[:, 0] if ids.shape.rank == 3 else ids


def decoded_text(tokenizer, ids):
    """Turns a search's output into text: the one path from generated ids to text.

    It keeps each row's best hypothesis, cuts the all-PAD columns and
    detokenizes; every export and every task's sampler goes through it.

    Args:
        tokenizer: the kseq tokenizer of the generated ids.
        ids: a search's ids, (B, L) or (B, N, L).

    Returns:
        (text, ids): (B,) strings and the (B, T) ids they were read from.
    """
    ids = trim_padding(best_hypotheses(ids))
    return tokenizer.detokenize(ids), ids
