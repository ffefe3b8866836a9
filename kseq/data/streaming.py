"""Training batches streamed from corpus files: memory and start-up flat in
the corpus size, an exact place to resume, one shard per worker.

The lines of an epoch (its files in an order drawn from (seed, epoch)) are
read by tf.data in chunks, normalized in the graph with the function the
exports use, tokenized, and gathered into windows of about
`shuffle_buffer` pairs. Each window is shuffled as a whole (by seed,
epoch and window), bucketed by length under a token budget and emitted as
batches; the next window is tokenized while these train. A window holding
the whole corpus (its files in the order given) is tokenized once and
shuffled whole every epoch; a larger corpus is shuffled within windows, as
a bounded shuffle buffer would.

Windows cut the stream where nothing is buffered, so a place in it is
(epoch, window, batches of the window already trained): a resumed run skips
whole windows as lines, never tokenizing them, and re-tokenizes only the
window it stopped in. The pipeline records each window's batch count in the
`TrainingPosition` as it tokenizes it, which turns a number of batches
trained into such a place (`TrainingPosition.where`).
"""

import dataclasses
import math

import numpy as np
import tensorflow as tf

from kseq._validation import check_choice, check_positive_int
from kseq.data.bucketing import (
    bucket_batch_sizes, check_boundaries, default_boundaries, epoch_batches, kept_pairs, tokenize_pairs, unfit_pairs,
    window_batches,
)
from kseq.data.text import normalize_text_op

# Lines tf.data reads and tokenizes as one element: large enough that the
# per-element cost of tf.data vanishes, small enough to tokenize in parallel.
CHUNK_LINES = 1024
# Batches made ahead of training. Not AUTOTUNE: for small batches (a language
# model's) it buffers thousands, which pulls window after window through the
# tokenizer, taking the CPU from training and, in an iterator fit leaves
# behind, from the next model's.
BATCHES_AHEAD = 8
# Keeps window w's shuffle seed apart from every epoch's: (seed, epoch + w * WINDOW_SEED_STRIDE).
WINDOW_SEED_STRIDE = 1 << 32


def windows_per_epoch(line_counts, shuffle_buffer, shards=1):
    """Counts the windows in one epoch of files with these line counts.

    Each worker of `shards` takes every `shards`-th line into windows of
    about `shuffle_buffer` pairs; the count is the same for every worker.

    Args:
        line_counts: the lines of each file.
        shuffle_buffer: pairs a window holds (per worker).
        shards: the number of workers. Defaults to 1.

    Returns:
        The windows per epoch, an int of at least 1.
    """
    chunks = sum(math.ceil(count / CHUNK_LINES) for count in line_counts)
    return max(1, math.ceil(chunks / chunks_per_window(shuffle_buffer, shards)))


def chunks_per_window(shuffle_buffer, shards=1):
    """Counts the chunks of CHUNK_LINES lines that one window reads.

    A worker of `shards` keeps every `shards`-th line, so a window of about
    `shuffle_buffer` pairs per worker reads shuffle_buffer * shards lines.

    Args:
        shuffle_buffer: pairs a window holds (per worker).
        shards: the number of workers. Defaults to 1.

    Returns:
        ceil(shuffle_buffer * shards / CHUNK_LINES), an int of at least 1.
    """
    return max(1, math.ceil(shuffle_buffer * shards / CHUNK_LINES))


def parse_lines(lines):
    """Splits raw tab-separated lines into normalized sources and targets.

    Both sides are normalized (`normalize_text_op`), after a leading
    byte-order mark is removed.

    Args:
        lines: (N,) string tensor of raw lines.

    Returns:
        (sources, targets, good): two (N,) string tensors, and an (N,) bool
        tensor that is False for the lines `kseq.data.corpus` counts as bad
        (not UTF-8, not exactly one tab, a blank side).
    """
    lines = tf.strings.regex_replace(lines, "^\ufeff", "")
    valid = tf.equal(tf.strings.unicode_transcode(lines, "UTF-8", "UTF-8", errors="replace"), lines)
    fields = tf.strings.split(lines, "\t")
    two = tf.equal(fields.row_lengths(), 2)
    padded = fields.to_tensor(default_value="", shape=[None, 2])
    sources, targets = normalize_text_op(padded[:, 0]), normalize_text_op(padded[:, 1])
    good = valid & two & tf.not_equal(sources, "") & tf.not_equal(targets, "")
    return sources, targets, good


def streamed_pair_dataset(
    scan, source_tokenizer, target_tokenizer, position, token_budget=4096, max_length=128, boundaries=None,
    shuffle_buffer=250_000, shuffle=True, seed=0, epochs=1, shard=(1, 0), over_long="drop", pad_remainder=False,
):
    """Batches of ({"source_ids", "target_ids"}, labels) from the files of a
    `kseq.data.corpus.CorpusScan`, as `kseq.data.bucketing.bucketed_pair_dataset`
    makes them from lists, for `epochs` epochs from `position`.

    Args:
        scan: the corpus (`scan_corpus`): its files, their line counts and
            the hold-out rule (held-out lines never train).
        source_tokenizer, target_tokenizer: kseq tokenizers.
        position: a `kseq.training.checkpoints.resume.TrainingPosition`. An iterator
            starts at its (epoch, window, skip); the pipeline records each
            window's batches in it and sets its `windows_per_epoch` and `epochs`.
        token_budget, max_length, boundaries, over_long, pad_remainder: as
            in `bucketed_pair_dataset`.
        shuffle_buffer: pairs a window holds (per worker).
        shuffle: shuffle each window and each epoch's file order.
        seed: the shuffle seed.
        epochs: epochs in all (a resumed run starts at `position.epoch`).
        shard: (workers, this worker's index): each takes every workers-th
            training line (held-out lines skipped), so no worker tokenizes
            another's data and the shares differ by a line at most.

    Returns:
        A tf.data.Dataset of batches (its length unknown).
    """
    check_positive_int("token_budget", token_budget)
    check_positive_int("max_length", max_length)
    check_choice("over_long", over_long, ("drop", "truncate"))
    if token_budget < max_length:
        raise ValueError(f"`token_budget` ({token_budget}) must be >= `max_length` ({max_length}) so that the "
                         "longest pair fits in a batch.")
    boundaries = check_boundaries(list(boundaries or default_boundaries(max_length)), max_length)
    batch_sizes = bucket_batch_sizes(boundaries, token_budget)

    def tokenized(lines):
        sources, targets, good = parse_lines(lines)
        source_ids = source_tokenizer.tokenize(tf.boolean_mask(sources, good))
        target_ids = target_tokenizer.tokenize(tf.boolean_mask(targets, good))
        return kept_pairs(source_ids, target_ids, max_length, over_long)[:2]

    def batch_count(window):
        source_ids, target_ids = window
        return count_batches(tf.maximum(source_ids.row_lengths(), target_ids.row_lengths() + 1), boundaries,
                             batch_sizes)

    def batches(window, order):
        return window_batches(*window, boundaries, batch_sizes, pad_remainder=pad_remainder, order=order)

    return streamed_examples(scan, position, tokenized, batch_count, batches, shuffle_buffer=shuffle_buffer,
                             shuffle=shuffle, seed=seed, epochs=epochs, shard=shard)


def streamed_examples(scan, position, examples, batch_count, batches, shuffle_buffer=250_000, shuffle=True, seed=0,
                      epochs=1, shard=(1, 0)):
    """Batches of the examples that the training lines of `scan`'s files
    hold, for `epochs` epochs from `position`: the pipeline every streamed
    recipe shares, whatever its lines and batches (see the module's doc).

    Args:
        scan: the corpus (`kseq.data.corpus.scan_corpus`).
        position: a `kseq.training.checkpoints.resume.TrainingPosition`, as in
            `streamed_pair_dataset`.
        examples: (N,) raw lines (this worker's, none held out) -> a tuple
            of tensors or ragged tensors with one row per example: the
            lines parsed (e.g. with `parse_lines`), tokenized and filtered.
        batch_count: a window (that tuple, over the window's lines) -> the
            number of batches (an int64 scalar) `batches` makes of it.
        batches: (window, order) -> a dataset of its batches, the examples
            coming in `order` (int64 indices): the same batches for the
            same window and order, as exact resume needs.
        shuffle_buffer: the lines a window holds (per worker), an example each.
        shuffle, seed, epochs, shard: as in `streamed_pair_dataset`.

    Returns:
        A tf.data.Dataset of batches (its length unknown).
    """
    check_positive_int("shuffle_buffer", shuffle_buffer)
    check_positive_int("epochs", epochs)
    shards, worker = shard
    if not (isinstance(shards, int) and shards >= 1 and 0 <= worker < shards):
        raise ValueError(f"`shard` must be (workers, index) with 0 <= index < workers; got {shard!r}.")
    per_window = chunks_per_window(shuffle_buffer, shards)
    position.windows_per_epoch = windows_per_epoch(scan.line_counts, shuffle_buffer, shards)
    position.epochs = epochs
    stream = _WindowStream(scan, position, examples, batch_count, batches, per_window, shuffle, seed, shard)
    epochs_left = tf.data.Dataset.range(epochs).take_while(lambda i: position.epoch + i < epochs)
    # The next window is read and tokenized while this one trains.
    windows = epochs_left.flat_map(stream.epoch_windows).map(stream.prepared).prefetch(1)
    return windows.flat_map(stream.batches_of).prefetch(BATCHES_AHEAD)


class _WindowStream:
    """The steps of `streamed_examples`' pipeline, as tf.data traces them:
    a file read in chunks, a chunk's examples for this worker, an epoch's
    windows, a window's order and batch count, its batches from `position`.

    Args:
        scan, position, examples, batch_count, batches, shuffle, seed, shard:
            as `streamed_examples` takes them (checked).
        per_window: the chunks a window holds (`chunks_per_window`).
    """

    def __init__(self, scan, position, examples, batch_count, batches, per_window, shuffle, seed, shard):
        self.scan, self.position, self.examples, self.batch_count, self.batches = (
            scan, position, examples, batch_count, batches)
        self.per_window, self.shuffle, self.seed = per_window, shuffle, seed
        self.shards, self.worker = shard
        self.files = tf.constant(scan.files)
        self.compressions = tf.constant(scan.compressions)
        self.offsets = tf.constant(scan.offsets, tf.int64)
        self.hold_out = scan.hold_out
        # A window that holds the whole epoch is read and tokenized once, its files in the order given,
        # and kept for every epoch, which shuffles it anew: tokenizing it again each epoch would take
        # the CPU from training for nothing.
        self.one_window = position.windows_per_epoch == 1
        if self.one_window:
            self.the_window = tf.data.Dataset.range(len(scan.files)).flat_map(self.file_chunks).map(
                self.chunk_examples, num_parallel_calls=tf.data.AUTOTUNE).ragged_batch(per_window).map(_merged).cache()

    def file_chunks(self, file):
        """(line numbers over all files, lines) of one file (its index),
        CHUNK_LINES at a time."""
        lines = tf.data.TextLineDataset(self.files[file], compression_type=self.compressions[file]).batch(CHUNK_LINES)
        return lines.enumerate().map(
            lambda k, chunk: (self.offsets[file] + k * CHUNK_LINES + tf.range(tf.size(chunk, tf.int64)), chunk))

    def chunk_examples(self, numbers, lines):
        """This worker's training examples of a chunk (`examples` of its
        lines), from the lines and their numbers."""
        training, hold_out = numbers, self.hold_out
        if hold_out is not None:
            held = tf.equal(numbers % hold_out.every, 0) & (numbers < hold_out.below)
            # Workers take turns over the training lines, not all lines: held-out
            # lines (every `every`-th) would otherwise all come from one worker's turns.
            training = numbers - (tf.minimum(numbers, hold_out.below) + hold_out.every - 1) // hold_out.every
        mine = tf.equal(training % self.shards, self.worker)
        if hold_out is not None:
            mine &= ~held
        return tuple(self.examples(tf.boolean_mask(lines, mine)))

    def epoch_windows(self, index_in_run):
        """(epoch, window, examples) of one epoch, the run's `index_in_run`-th,
        from `position`'s window in the run's first epoch."""
        epoch = self.position.epoch + index_in_run
        if self.one_window:
            return self.the_window.map(lambda *window: (epoch, tf.constant(0, tf.int64), window))
        order = tf.range(len(self.scan.files), dtype=tf.int64)
        if self.shuffle:
            seed = tf.stack([tf.constant(self.seed, tf.int64) + 1, epoch])
            order = tf.random.experimental.stateless_shuffle(order, seed=seed)
        first = tf.where(index_in_run == 0, self.position.window, 0)
        chunks = tf.data.Dataset.from_tensor_slices(order).flat_map(self.file_chunks).skip(first * self.per_window)
        parts = chunks.map(self.chunk_examples, num_parallel_calls=tf.data.AUTOTUNE)
        windows = parts.ragged_batch(self.per_window).map(_merged)
        return windows.enumerate().map(lambda k, window: (epoch, first + k, window))

    def prepared(self, epoch, window, parts):
        """A window with its order drawn (by seed, epoch and window) and its
        batch count recorded in `position`: (epoch, window, parts, order,
        recorded)."""
        count = row_count(parts[0])
        order = tf.range(count)
        if self.shuffle:
            order = tf.random.experimental.stateless_shuffle(
                order, seed=tf.stack([tf.constant(self.seed, tf.int64), epoch + window * WINDOW_SEED_STRIDE]))
        recorded = tf.py_function(self.position.record_window, [epoch, window, self.batch_count(parts), count],
                                  tf.int64)
        return epoch, window, parts, order, recorded

    def batches_of(self, epoch, window, parts, order, recorded):
        """A prepared window's batches, less the `position.skip` already
        trained where it is the window `position` stopped in."""
        first = tf.equal(epoch, self.position.epoch) & tf.equal(window, self.position.window)
        return self.batches(parts, order).skip(tf.where(first, self.position.skip, 0))


def _merged(*chunks):
    """A window's chunks as one tensor per part."""
    return tuple(part.merge_dims(0, 1) for part in chunks)


def row_count(tensor):
    """Counts the rows of a tensor or ragged tensor.

    Args:
        tensor: a tf.Tensor or tf.RaggedTensor.

    Returns:
        The number of rows, as an int64 scalar.
    """
    if isinstance(tensor, tf.RaggedTensor):
        return tensor.nrows(out_type=tf.int64)
    return tf.shape(tensor, out_type=tf.int64)[0]


def count_batches(lengths, boundaries, batch_sizes):
    """Counts the batches `window_batches` makes of pairs of these (padded) lengths.

    Each bucket gives its full batches and its remainder (no remainder is
    dropped).

    Args:
        lengths: the pairs' padded lengths (a pair's longer side, the target
            counted with BOS).
        boundaries: the buckets' edges.
        batch_sizes: the rows of each bucket's batches (`bucket_batch_sizes`).

    Returns:
        The number of batches, an int64 scalar.
    """
    buckets = tf.searchsorted(tf.constant(boundaries, tf.int64), tf.cast(lengths, tf.int64), side="right")
    counts = tf.math.bincount(tf.cast(buckets, tf.int32), minlength=len(batch_sizes), dtype=tf.int64)
    return tf.reduce_sum(-(-counts // tf.constant(batch_sizes, tf.int64)))


@dataclasses.dataclass
class StreamReport:
    """What an epoch of a streamed corpus holds, from its scan: exact where
    the sample holds every pair and one window the whole epoch, else
    estimated from the sample."""

    pairs: int
    kept: int
    empty: int
    over_long: int
    over_long_action: str
    max_length: int
    batches_per_epoch: int
    batch_shapes: int
    windows_per_epoch: int
    shuffle_buffer: int
    exact: bool

    def describe_batches(self):
        return f"{'' if self.exact else 'about '}{self.batches_per_epoch:,} steps"

    def __str__(self):
        about = "" if self.exact else "about "
        windows = ("one window: shuffled whole" if self.windows_per_epoch == 1 else
                   f"{self.windows_per_epoch:,} windows of {self.shuffle_buffer:,} pairs, each shuffled whole")
        return (f"{about}{self.kept:,} of {self.pairs:,} pairs kept; {self.empty:,} with an empty side dropped; "
                f"{self.over_long:,} over {self.max_length} tokens {self.over_long_action}; "
                f"{about}{self.batches_per_epoch:,} batches of {self.batch_shapes} shapes per epoch, in {windows}")


def estimate_epoch(scan, source_tokenizer, target_tokenizer, token_budget=4096, max_length=128, boundaries=None,
                   shuffle_buffer=250_000, over_long="drop", pad_remainder=False):
    """Estimates one epoch of `streamed_pair_dataset` on `scan` with these settings.

    The counts come from the scan's sample (tokenized here), scaled to the
    corpus; they are exact where the sample holds every pair and one window
    the whole epoch.

    Args:
        scan: the corpus (`kseq.data.corpus.scan_corpus`), whose `sample`
            is counted.
        source_tokenizer, target_tokenizer: kseq tokenizers.
        token_budget: padded tokens per batch (per side). Defaults to 4096.
        max_length: the longest source, or target with BOS/EOS, kept.
            Defaults to 128.
        boundaries: bucket edges. Defaults to None (`default_boundaries`).
        shuffle_buffer: pairs a window holds. Defaults to 250_000.
        over_long: "drop" pairs over `max_length`, or "truncate" them.
            Defaults to "drop".
        pad_remainder: pad each bucket's last batch to its batch size.
            Defaults to False.

    Returns:
        A `StreamReport` of the epoch.

    Raises:
        ValueError: if the last boundary is not greater than `max_length`,
            or the scan's sample is empty.
    """
    boundaries = check_boundaries(list(boundaries or default_boundaries(max_length)), max_length)
    batch_sizes = bucket_batch_sizes(boundaries, token_budget)
    source_ids, target_ids = tokenize_pairs(*scan.sample, source_tokenizer, target_tokenizer)
    empty, too_long = (mask.numpy() for mask in unfit_pairs(source_ids, target_ids, max_length))
    lengths = kept_pairs(source_ids, target_ids, max_length, over_long)[2].numpy()
    windows = windows_per_epoch(scan.line_counts, shuffle_buffer)
    sampled = len(scan.sample[0])
    exact = sampled == scan.pairs and windows == 1
    scale = scan.pairs / sampled
    if exact:
        batches, shapes = epoch_batches(lengths, boundaries, batch_sizes, pad_remainder=pad_remainder)
    else:  # each window's buckets filled in the sample's proportions, every remainder a batch
        counts = np.bincount(np.searchsorted(boundaries, lengths, side="right"), minlength=len(boundaries))
        per_window = counts * scale / windows
        batches = int(windows * np.ceil(per_window / np.asarray(batch_sizes)).sum())
        shapes = int((counts > 0).sum() * (1 if pad_remainder else 2))
    kept = int((~empty & ~too_long).sum()) if over_long == "drop" else int((~empty).sum())
    return StreamReport(round(scan.pairs), round(kept * scale), round(int(empty.sum()) * scale),
                        round(int(too_long.sum()) * scale), "dropped" if over_long == "drop" else "truncated",
                        max_length, batches, shapes, windows, shuffle_buffer, exact)
