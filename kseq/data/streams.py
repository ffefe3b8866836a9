"""A token stream cut into parallel streams, for truncated BPTT: from a
list of documents in memory (`stream_batches`), or from text files of any
size, a window of lines at a time (`streamed_stream_batches`)."""

import numpy as np
import tensorflow as tf

from kseq.special_ids import EOS_ID
from kseq._validation import check_positive_int
from kseq.data.streaming import streamed_examples
from kseq.data.text import normalize_text_op


def join_documents(token_lists, separator=EOS_ID):
    """Joins documents' ids into one stream, each document followed by `separator`, so a model learns where they end.

    Args:
        token_lists: the documents' ids, lists or a ragged tensor.
        separator: the id after each document. Default EOS_ID.

    Returns:
        A 1-D int32 NumPy array.

    Raises:
        ValueError: no document.
    """
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


def parse_text_lines(lines):
    """Reads raw lines, one document each, into normalized texts and which lines are good.

    Args:
        lines: (N,) raw lines.

    Returns:
        (texts, good): (N,) normalized strings, and (N,) bool, False where
        `kseq.data.corpus.scan_corpus(..., fields=1)` counts the line as bad
        (not UTF-8, blank).
    """
    lines = tf.strings.regex_replace(lines, "^\ufeff", "")
    valid = tf.equal(tf.strings.unicode_transcode(lines, "UTF-8", "UTF-8", errors="replace"), lines)
    texts = normalize_text_op(lines)
    return texts, valid & tf.not_equal(texts, "")


def window_streams(tokens, batch_size, chunk_length):
    """Cuts a 1-D tensor of ids into batches for truncated BPTT: `stream_batches` in the graph.

    The shorter last chunk is dropped.

    Args:
        tokens: 1-D int32 ids.
        batch_size: B, the parallel streams.
        chunk_length: k, the tokens per stream per batch.

    Returns:
        (batches, count): a tf.data.Dataset of (inputs (B, k), labels (B, k))
        and its number of batches, an int64 scalar.
    """
    length = tf.maximum((tf.size(tokens, out_type=tf.int64) - 1) // batch_size, 0)
    count = length // chunk_length
    inputs = tf.reshape(tokens[: batch_size * length], [batch_size, -1])
    labels = tf.reshape(tokens[1 : batch_size * length + 1], [batch_size, -1])
    starts = tf.range(count) * chunk_length
    batches = tf.data.Dataset.from_tensor_slices(starts).map(
        lambda start: (inputs[:, start : start + chunk_length], labels[:, start : start + chunk_length]))
    return batches, count


def streamed_stream_batches(scan, tokenizer, position, batch_size, chunk_length, window_lines=250_000, epochs=1,
                            shard=(1, 0)):
    """Makes batches for truncated BPTT from the documents (one a line) of `scan`'s files, in the files' order.

    The lines are read `window_lines` at a time; each window's documents,
    each followed by EOS, are cut into B = `batch_size` streams as
    `stream_batches` cuts a whole corpus (a corpus of one window gives its
    batches exactly), so memory holds one window whatever the corpus size.
    A stream of window w + 1 does not continue the text of window w: a
    model carrying its state should zero it where each window begins
    (where `position` says a window's first batch comes; see
    `kseq.training.loop.fit.CarriedStreams`).

    Args:
        scan: the corpus, `scan_corpus(..., fields=1)`.
        tokenizer: the kseq tokenizer of the documents.
        position: a `kseq.training.checkpoints.resume.TrainingPosition`; the
            batches start there (resume as in `kseq.data.streaming.streamed_pair_dataset`).
        batch_size: B, the parallel streams.
        chunk_length: k, the tokens per stream per batch.
        window_lines: the lines a window holds. Default 250,000.
        epochs: the epochs to run. Default 1.
        shard: (workers, index): this worker's share of the lines, as in
            `streamed_pair_dataset`. Default (1, 0).

    Returns:
        A tf.data.Dataset of (inputs (B, k), labels (B, k)) int32 (its length unknown).

    Raises:
        ValueError: `batch_size`, `chunk_length`, `window_lines` or `epochs` is
            not an int >= 1, or a bad `shard`.
    """
    check_positive_int("batch_size", batch_size)
    check_positive_int("chunk_length", chunk_length)

    def tokens(lines):  # the documents of these lines, each + EOS, as one stream
        texts, good = parse_text_lines(lines)
        ids = tokenizer.tokenize(tf.boolean_mask(texts, good))
        ids = tf.cast(ids, tf.int32)
        eos = tf.fill([ids.nrows(), 1], tf.constant(EOS_ID, tf.int32))
        return (tf.concat([ids, eos], axis=1).flat_values,)

    def batch_count(window):
        return window_streams(window[0], batch_size, chunk_length)[1]

    def batches(window, order):  # the order is the stream's: never shuffled
        return window_streams(window[0], batch_size, chunk_length)[0]

    return streamed_examples(scan, position, tokens, batch_count, batches, shuffle_buffer=window_lines,
                             shuffle=False, epochs=epochs, shard=shard)
