"""A token stream cut into parallel streams, for truncated BPTT."""

import numpy as np
import tensorflow as tf

from kseq.special_ids import EOS_ID
from kseq._validation import check_positive_int


def join_documents(token_lists, separator=EOS_ID):
    """Documents' ids (lists or a ragged tensor) -> one int32 stream, each
    document followed by `separator` (EOS), so a model learns where they end."""
    if isinstance(token_lists, tf.RaggedTensor):
        token_lists = token_lists.to_list()
    pieces = []
    for tokens in token_lists:
        pieces.append(np.asarray(tokens, np.int32))
        pieces.append(np.asarray([separator], np.int32))
    if not pieces:
        raise ValueError("`token_lists` must hold at least one document.")
    return np.concatenate(pieces)


def stream_batches(tokens, batch_size, chunk_length, drop_remainder=False):
    """Batches (inputs (B, k), labels (B, k)) for truncated BPTT.

    The stream is cut into B = `batch_size` contiguous streams of equal
    length (the few tokens left over at the end are dropped); batch j holds
    tokens [j*k, (j+1)*k) of every stream, so row b of batch j+1 continues
    row b of batch j, and a model carrying its state from batch to batch
    reads each stream as one text. Labels are the next tokens.

    Under a strategy with R replicas, replica r receives rows
    [r*B/R, (r+1)*B/R) of every batch, the same streams every time.

    Args:
        tokens: 1-D int ids (e.g. from `join_documents`).
        batch_size: B, the number of parallel streams.
        chunk_length: k, the tokens per stream per batch (the BPTT window).
        drop_remainder: drop the last, shorter chunk (fixed shapes).

    Returns:
        A tf.data.Dataset with a known number of batches.
    """
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(
            f"`tokens` must be a 1-D array of int ids; got shape {tokens.shape} and "
            f"dtype {tokens.dtype}."
        )
    check_positive_int("batch_size", batch_size)
    check_positive_int("chunk_length", chunk_length)
    length = (len(tokens) - 1) // batch_size  # tokens per stream, labels need one more
    if length < 1 or (drop_remainder and length < chunk_length):
        raise ValueError(
            f"{len(tokens)} tokens are too few for batch_size={batch_size} streams"
            + (f" of chunk_length={chunk_length}" if drop_remainder else "")
            + "; use a smaller batch_size or more text."
        )
    inputs = tf.constant(tokens[: batch_size * length].reshape(batch_size, length), tf.int32)
    labels = tf.constant(tokens[1 : batch_size * length + 1].reshape(batch_size, length), tf.int32)
    count = length // chunk_length if drop_remainder else -(-length // chunk_length)
    starts = np.arange(count) * chunk_length
    dataset = tf.data.Dataset.from_tensor_slices(starts).map(
        lambda start: (inputs[:, start : start + chunk_length],
                       labels[:, start : start + chunk_length])
    )
    return dataset.prefetch(tf.data.AUTOTUNE)
