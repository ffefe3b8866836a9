"""Labelled texts (`text<TAB>label` lines) streamed from files, for a
classifier or a generator conditioned on the label.

`kseq.data.corpus.scan_corpus(files, ..., count_labels=True)` reads the
files once for their labels, a sample of texts for the vocabulary and the
validation lines; `labelled_dataset` then streams the training lines
through `kseq.data.streaming.streamed_examples` in windows, each shuffled
whole and cut into batches by the caller's rule, so that memory does not
grow with the corpus and a resumed run sees the batches an uninterrupted
one would.
"""

import numpy as np
import tensorflow as tf

from kseq._validation import check_positive_int
from kseq.data.streaming import count_batches, parse_lines, row_count, streamed_examples, windows_per_epoch
from kseq.data.text_pairs import add_specials, bucket_by_target_length
from kseq.special_ids import PAD_ID


def label_table(names):
    """Makes a lookup table from a label's normalized text to its index in `names`.

    Args:
        names: the labels, normalized, in class-id order.

    Returns:
        A `tf.lookup.StaticHashTable` giving int32 ids, -1 for a label not among them.
    """
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(list(names)), tf.range(len(names), dtype=tf.int32)), -1)


def labelled_lines(lines, table):
    """Reads raw `text<TAB>label` lines into texts and class ids, keeping the good lines whose label `table` knows.

    Good lines follow `parse_lines`' rules; texts and labels are normalized.

    Args:
        lines: (N,) raw lines.
        table: a `label_table`.

    Returns:
        (texts, class_ids): (M,) strings and (M,) int32, M <= N.
    """
    texts, labels, good = parse_lines(lines)
    class_ids = table.lookup(labels)
    keep = good & (class_ids >= 0)
    return tf.boolean_mask(texts, keep), tf.boolean_mask(class_ids, keep)


def labelled_dataset(scan, names, position, examples, batch_count, batches, **stream):
    """Training batches of the labelled corpus `scan` (see the module's doc).

    Args:
        scan: the corpus, scanned with `count_labels=True`.
        names: the labels, in class-id order.
        position: a `kseq.training.checkpoints.resume.TrainingPosition`.
        examples: (texts, class ids) of a chunk of lines -> the tuple of
            tensors a window is made of (e.g. token ids and class ids).
        batch_count, batches: as in `streamed_examples`.
        **stream: `streamed_examples`' shuffle_buffer, shuffle, seed,
            epochs and shard.
    """
    table = label_table(names)
    return streamed_examples(scan, position, lambda lines: examples(*labelled_lines(lines, table)), batch_count,
                             batches, **stream)


def padded_batches(batch_size):
    """Makes the batching rule of `labelled_dataset` for windows of (token ids, class ids).

    A window's examples come in its order, `batch_size` a batch (the last
    one smaller), the ids padded with PAD to the batch's longest.

    Args:
        batch_size: examples a batch.

    Returns:
        (batch_count, batches), the functions `streamed_examples` takes.

    Raises:
        ValueError: `batch_size` is not an int >= 1.
    """
    check_positive_int("batch_size", batch_size)

    def batch_count(window):
        return -(-row_count(window[0]) // batch_size)

    def batches(window, order):
        ids, class_ids = (tf.gather(part, order) for part in window)
        return tf.data.Dataset.from_tensor_slices((ids, class_ids)).ragged_batch(batch_size).map(
            lambda ids, class_ids: (ids.to_tensor(default_value=PAD_ID), class_ids))

    return batch_count, batches


def describe_epoch(scan, batch_size, shuffle_buffer):
    """Describes an epoch of `padded_batches` over `scan`'s training texts, counted from the scan.

    The count is exact where one window holds the epoch, else about.

    Args:
        scan: the labelled corpus's `CorpusScan`.
        batch_size: examples a batch.
        shuffle_buffer: the texts a window holds.

    Returns:
        A string, e.g. "about 1,234 batches of 32 per epoch, in 2 windows of
        250,000 texts, each shuffled whole".
    """
    windows = windows_per_epoch(scan.line_counts, shuffle_buffer)
    batches = windows * -(-scan.pairs // (windows * batch_size))
    about = "" if windows == 1 else "about "
    shuffled = ("one window: shuffled whole" if windows == 1 else
                f"{windows:,} windows of {shuffle_buffer:,} texts, each shuffled whole")
    return f"{about}{batches:,} batches of {batch_size} per epoch, in {shuffled}"


def generation_examples(texts, class_ids, tokenizer, max_length):
    """Tokenizes labelled texts into a conditioned generator's examples, leaving out long ones.

    A text of `max_length` pieces or more (EOS included) is left out rather
    than cut: a cut one would teach the model to stop mid-sentence.

    Args:
        texts: (N,) strings.
        class_ids: (N,) int32 class ids of the texts.
        tokenizer: the text tokenizer.
        max_length: the model's length in pieces, EOS included.

    Returns:
        (class ids, BOS + pieces, pieces + EOS) of the texts kept, the last
        two ragged.
    """
    pieces = tokenizer.tokenize(texts)
    keep = pieces.row_lengths() < max_length
    return (tf.boolean_mask(class_ids, keep), *add_specials(tf.ragged.boolean_mask(pieces, keep)))


def bucketed_generation_batches(batch_size, boundaries):
    """Makes the batching rule of `labelled_dataset` for windows of `generation_examples`.

    Examples of similar length batch together (`bucket_by_target_length`).

    Args:
        batch_size: examples a batch, in every bucket.
        boundaries: target lengths where batches are cut, ascending.

    Returns:
        (batch_count, batches), the functions `streamed_examples` takes.
    """

    def batch_count(window):
        return count_batches(window[2].row_lengths(), boundaries, [batch_size] * (len(boundaries) + 1))

    def batches(window, order):
        class_ids, target_in, target_out = (tf.gather(part, order) for part in window)
        examples = tf.data.Dataset.from_tensor_slices(((class_ids, target_in), target_out))
        return bucket_by_target_length(examples, boundaries, batch_size)

    return batch_count, batches


def held_out_generation_batches(texts, class_ids, tokenizer, max_length, batch_size, boundaries):
    """Makes a held-out split's batches for a conditioned generator, in order, bucketed by length.

    Args:
        texts: the split's texts.
        class_ids: their class ids.
        tokenizer: the text tokenizer.
        max_length: the model's length in pieces (`generation_examples`).
        batch_size: examples a batch, in every bucket.
        boundaries: target lengths where batches are cut, ascending.

    Returns:
        (batches of ((class ids (B,), BOS + pieces (B, T)), pieces + EOS
        (B, T)), how many texts it kept).
    """
    class_ids, target_in, target_out = generation_examples(
        list(texts), tf.constant(np.asarray(class_ids, np.int32)), tokenizer, max_length)
    examples = tf.data.Dataset.from_tensor_slices(((class_ids, target_in), target_out))
    return bucket_by_target_length(examples, boundaries, batch_size).prefetch(tf.data.AUTOTUNE), int(class_ids.shape[0])
