"""Requests as the exports receive them, made into the ids a model takes."""

import tensorflow as tf

from kseq.data.text import normalize_text_op
from kseq.special_ids import PAD_ID
from kseq._validation import check_positive_int


def normalized(texts):
    """Reads request strings as training read text; every export reads its strings so.

    Each string goes through `kseq.data.text.normalize_text_op`; one empty after it is blank.

    Args:
        texts: (B,) tf.string.

    Returns:
        (texts, blank): the normalized (B,) strings and (B,) bool, which are blank.
    """
    texts = normalize_text_op(texts)
    return texts, tf.equal(texts, "")


def blank_out(blank, outputs):
    """Empties the rows of blank requests in `outputs`: a blank request gets an empty answer from every export.

    Args:
        blank: (B,) bool, the blank requests.
        outputs: {name: (B, ...) tensor}.

    Returns:
        `outputs` with blank rows set to "" for strings, PAD (0) for int32 ids,
        -1 for "class_id", 0 for other numbers.
    """
    empty = {tf.string: "", tf.int32: PAD_ID}
    masked = {}
    for name, value in outputs.items():
        fill = -1 if name == "class_id" else empty.get(value.dtype, 0)
        rows = tf.reshape(blank, [-1] + [1] * (value.shape.rank - 1))
        masked[name] = tf.where(rows, tf.cast(fill, value.dtype), value)
    return masked


def id_matrix(ragged_ids):
    """Pads ragged ids into a matrix with PAD on the right.

    Args:
        ragged_ids: (B, None) ragged ids.

    Returns:
        (B, L) int32, L >= 1 so that an all-empty batch still has a shape.
    """
    ids = ragged_ids.to_tensor(default_value=PAD_ID)
    ids = tf.pad(ids, [[0, 0], [0, tf.maximum(0, 1 - tf.shape(ids)[1])]])
    return tf.cast(ids, tf.int32)


_ROW_LADDER = [2**i for i in range(21)]


def few_shapes(ids, max_columns, column_multiple=16):
    """Pads ids with PAD to one of few shapes, so that a compiled search compiles few times.

    Rows go up to the next power of two; columns to the next multiple of
    `column_multiple`, at most `max_columns` (never fewer than `ids` has).

    Args:
        ids: (B, S) ids.
        max_columns: the most columns padding goes up to (`ids` wider already stay as they are).
        column_multiple: columns are padded to a multiple of it. Default 16.

    Returns:
        The padded (B', S') ids.
    """
    shape = tf.shape(ids)
    ladder = tf.constant(_ROW_LADDER, tf.int32)
    rows = tf.gather(ladder, tf.searchsorted(ladder, shape[:1]))[0]
    columns = tf.minimum((shape[1] + column_multiple - 1) // column_multiple * column_multiple, max_columns)
    columns = tf.maximum(columns, shape[1])
    return tf.pad(ids, [[0, rows - shape[0]], [0, columns - shape[1]]], constant_values=PAD_ID)


def length_within(limit, length, name):
    """Checks a length option and lowers it to the model's `limit`.

    Args:
        limit: the model's most tokens, or None for no limit.
        length: the length asked for.
        name: the option's name, for the error message.

    Returns:
        `length`, at most `limit`.

    Raises:
        ValueError: `length` is not an int >= 1.
    """
    length = check_positive_int(name, length)
    return length if limit is None else min(length, limit)
