"""Requests as the exports receive them, made into the ids a model takes."""

import tensorflow as tf

from kseq.data.text import normalize_text_op
from kseq.special_ids import PAD_ID
from kseq._validation import check_positive_int


def normalized(texts):
    """(texts as training saw them (`kseq.data.text.normalize_text_op`),
    (B,) bool: which are blank): every export reads its strings so."""
    texts = normalize_text_op(texts)
    return texts, tf.equal(texts, "")


def blank_out(blank, outputs):
    """`outputs` ({name: (B, ...) tensor}) with the rows of blank requests
    emptied: "" for strings, PAD (0) for ids, -1 for class ids, 0 for
    numbers. A blank request gets an empty answer from every export."""
    empty = {tf.string: "", tf.int32: PAD_ID}
    masked = {}
    for name, value in outputs.items():
        fill = -1 if name == "class_id" else empty.get(value.dtype, 0)
        rows = tf.reshape(blank, [-1] + [1] * (value.shape.rank - 1))
        masked[name] = tf.where(rows, tf.cast(fill, value.dtype), value)
    return masked


def id_matrix(ragged_ids):
    """Ragged (B, None) ids -> int32 (B, L) right-padded with PAD, L >= 1 so
    that an all-empty batch still has a shape."""
    ids = ragged_ids.to_tensor(default_value=PAD_ID)
    ids = tf.pad(ids, [[0, 0], [0, tf.maximum(0, 1 - tf.shape(ids)[1])]])
    return tf.cast(ids, tf.int32)


_ROW_LADDER = [2**i for i in range(21)]


def few_shapes(ids, max_columns, column_multiple=16):
    """(B, S) ids padded with PAD to the next power-of-two rows and multiple
    of `column_multiple` columns (at most `max_columns`)."""
    shape = tf.shape(ids)
    ladder = tf.constant(_ROW_LADDER, tf.int32)
    rows = tf.gather(ladder, tf.searchsorted(ladder, shape[:1]))[0]
    columns = tf.minimum((shape[1] + column_multiple - 1) // column_multiple * column_multiple, max_columns)
    columns = tf.maximum(columns, shape[1])
    return tf.pad(ids, [[0, rows - shape[0]], [0, columns - shape[1]]], constant_values=PAD_ID)


def length_within(limit, length, name):
    """`length` checked, and lowered to the model's `limit` (None: none)."""
    length = check_positive_int(name, length)
    return length if limit is None else min(length, limit)
