"""Length-bucketed batches under a token budget, for training on real text."""

import dataclasses

import numpy as np
import tensorflow as tf

from kseq.data.text_pairs import add_specials
from kseq.special_ids import PAD_ID
from kseq._validation import check_choice, check_positive_int


@dataclasses.dataclass
class PipelineReport:
    """What the pipeline kept and why it left pairs out, and its batches."""

    pairs: int
    kept: int
    empty: int  # a side with no tokens
    over_long: int  # dropped or truncated, see `over_long_action`
    over_long_action: str
    max_length: int
    batches_per_epoch: int = 0
    batch_shapes: int = 0  # distinct (rows, width) shapes of an epoch

    def __str__(self):
        return (
            f"{self.kept} of {self.pairs} pairs kept; {self.empty} with an empty side "
            f"dropped; {self.over_long} over {self.max_length} tokens {self.over_long_action}; "
            f"{self.batches_per_epoch} batches of {self.batch_shapes} shapes per epoch"
        )


def default_boundaries(max_length):
    """Makes bucket edges about 5% apart and at least 2 apart, from 3.

    The last edge is max_length + 1 (so every kept sequence fits the last
    bucket's padded length). Fine buckets cost nothing in tracing (keras
    traces the train step once for the dataset's (None, None) batches) and
    keep padding to a few percent: on the Bible's en->fr pairs at max_length
    96 the target pieces are 97.0% of the padded positions (88.3% with
    1.3x-wide buckets), which makes each real token 9% cheaper to train on.

    Args:
        max_length: the longest padded pair length kept.

    Returns:
        A list of increasing int edges, the last one max_length + 1.
    """
    edges, edge = [], 3
    while edge <= max_length:
        edges.append(edge)
        edge = max(edge + 2, int(edge * 1.05))
    return edges + [max_length + 1]


def xla_boundaries(max_length):
    """Makes fewer, coarser bucket edges for XLA, which compiles once per batch shape.

    Bucket widths are 16, 24, 32, 48, 72, 96, ... (1.33-1.5x apart), each
    edge a width + 1, the last edge max_length + 1. More padding, far fewer
    compilations than `default_boundaries`.

    Args:
        max_length: the longest padded pair length kept.

    Returns:
        A list of increasing int edges, the last one max_length + 1.
    """
    edges, width = [], 16
    while width < max_length:
        edges.append(width + 1)
        width = width * 3 // 2 if width % 16 == 0 else width * 4 // 3
    return edges + [max_length + 1]


def tokenize_pairs(sources, targets, source_tokenizer, target_tokenizer, chunk=4096):
    """Tokenizes parallel strings in chunks into two (N, None) ragged tensors.

    Args:
        sources: N source strings.
        targets: N target strings, parallel to `sources`.
        source_tokenizer: the kseq tokenizer of the sources.
        target_tokenizer: the kseq tokenizer of the targets.
        chunk: the most strings tokenized in one call. Defaults to 4096.

    Returns:
        (source ids, target ids), two (N, None) ragged tensors.

    Raises:
        ValueError: if `sources` and `targets` differ in length, or
            `sources` is empty.
    """
    if len(sources) != len(targets):
        raise ValueError(
            f"`sources` and `targets` must have the same length; got {len(sources)} "
            f"and {len(targets)}."
        )
    if not sources:
        raise ValueError("`sources` must not be empty.")

    def run(tokenizer, texts):
        parts = [tokenizer.tokenize(list(texts[i : i + chunk])) for i in range(0, len(texts), chunk)]
        return tf.concat(parts, axis=0)

    return run(source_tokenizer, sources), run(target_tokenizer, targets)


def bucketed_pair_dataset(
    sources, targets, source_tokenizer, target_tokenizer, token_budget=4096, max_length=128,
    boundaries=None, shuffle=True, seed=None, over_long="drop", drop_remainder=False,
    pad_remainder=False, epochs=1, position=None,
):
    """Batches of ({"source_ids", "target_ids"}, labels) with little padding.

    Pairs are tokenized once, then grouped by length into buckets; each
    bucket's batches hold about `token_budget` padded tokens (so short
    sentences come in big batches and long ones in small), padded to the
    bucket's edge, which bounds the number of distinct shapes (one XLA
    compilation each, where XLA is on) and keeps padding small (both sides
    of a batch share its width).
    Targets get BOS (decoder input) and EOS (labels). For pairs in files,
    of any size, `kseq.data.streaming.streamed_pair_dataset` makes the same
    batches without holding them.

    Args:
        sources, targets: parallel lists of strings.
        source_tokenizer, target_tokenizer: kseq tokenizers.
        token_budget: padded tokens per batch (per side).
        max_length: the longest source, or target with BOS/EOS, kept.
        boundaries: bucket edges (default: `default_boundaries`; for XLA
            `xla_boundaries`).
        shuffle: reshuffle pairs every epoch (the batches differ each epoch).
        seed: shuffle seed.
        over_long: "drop" pairs over `max_length`, or "truncate" them.
        drop_remainder: drop each bucket's last, smaller batch of an epoch.
        pad_remainder: pad each bucket's last batch with all-PAD rows to the
            bucket's batch size instead: one shape per bucket (for XLA)
            without leaving data out; PAD rows add nothing to kseq's losses.
        epochs: data epochs in one pass over the dataset (each reshuffled).
        position: a `kseq.training.checkpoints.resume.TrainingPosition`, or None. When given,
            epoch e's order is a fixed function of (seed, e), the pass starts
            at `position.epoch` and its first `position.skip` batches are
            left out, so a resumed run trains on exactly the batches an
            uninterrupted one would; the position learns `steps_per_epoch`
            and `epochs` (what `kseq.training.loop.Fit` reads).

    Returns:
        (dataset, PipelineReport).
    """
    _check_batching(token_budget, max_length, epochs, over_long, drop_remainder, pad_remainder)
    source_ids, target_ids, lengths, report = _kept_pairs(
        sources, targets, source_tokenizer, target_tokenizer, max_length, over_long)
    boundaries = check_boundaries(list(boundaries or default_boundaries(max_length)), max_length)
    batch_sizes = bucket_batch_sizes(boundaries, token_budget)
    _count_epoch_batches(report, lengths, boundaries, batch_sizes, drop_remainder, pad_remainder, token_budget)

    def batched(source_ids, target_ids, order):
        return window_batches(source_ids, target_ids, boundaries, batch_sizes, drop_remainder, pad_remainder, order)

    dataset = _epochs((source_ids, target_ids), batched, shuffle, seed, epochs, position, report.batches_per_epoch)
    return dataset.prefetch(tf.data.AUTOTUNE), report


def _check_batching(token_budget, max_length, epochs, over_long, drop_remainder, pad_remainder):
    """Raises ValueError, naming the argument, for `bucketed_pair_dataset`'s
    bad batching options (those of the same names)."""
    check_positive_int("token_budget", token_budget)
    check_positive_int("max_length", max_length)
    check_positive_int("epochs", epochs)
    check_choice("over_long", over_long, ("drop", "truncate"))
    if token_budget < max_length:
        raise ValueError(
            f"`token_budget` ({token_budget}) must be >= `max_length` ({max_length}) so "
            "that the longest pair fits in a batch."
        )
    if drop_remainder and pad_remainder:
        raise ValueError("`drop_remainder` and `pad_remainder` exclude each other; pass one.")


def _count_epoch_batches(report, lengths, boundaries, batch_sizes, drop_remainder, pad_remainder, token_budget):
    """Sets `report`'s batches per epoch and batch shapes (`epoch_batches`);
    raises ValueError where `drop_remainder` leaves no batch.

    Args:
        report: the `PipelineReport` to complete.
        lengths: the kept pairs' padded lengths.
        boundaries, batch_sizes: the buckets' edges and rows per batch.
        drop_remainder, pad_remainder, token_budget: as `bucketed_pair_dataset`
            takes them.
    """
    report.batches_per_epoch, report.batch_shapes = epoch_batches(
        lengths, boundaries, batch_sizes, drop_remainder, pad_remainder)
    if not report.batches_per_epoch:
        raise ValueError(
            f"`drop_remainder=True` leaves no batch: no length bucket holds a full batch of "
            f"`token_budget`={token_budget} tokens ({report}); lower `token_budget` or keep "
            "the remainders."
        )


def _epochs(pairs, batched, shuffle, seed, epochs, position, batches_per_epoch):
    """The batches of `epochs` passes over `pairs`, from `position` where
    one is given (it learns `steps_per_epoch` and `epochs`), their count told to tf.data.

    Args:
        pairs: (source ids, target ids), two (N, None) ragged tensors.
        batched: (source ids, target ids, order) -> a dataset of batches.
        shuffle, seed, epochs, position: as `bucketed_pair_dataset` takes them.
        batches_per_epoch: the batches `batched` makes of every order.

    Returns:
        A tf.data.Dataset of batches.
    """
    if position is None:
        dataset = _shuffled_epochs(pairs, batched, shuffle, seed, epochs)
        batches = epochs * batches_per_epoch
    else:
        position.steps_per_epoch, position.epochs = batches_per_epoch, epochs
        dataset = _positioned_epochs(pairs, batched, shuffle, seed, epochs, position)
        batches = epochs * batches_per_epoch - int(position.skip.numpy())
    # Bucket membership depends on lengths only, so the batch count is fixed
    # whatever the shuffle; telling tf.data lets Keras show progress.
    return dataset.apply(tf.data.experimental.assert_cardinality(batches))


def epoch_batches(lengths, boundaries, batch_sizes, drop_remainder=False, pad_remainder=False):
    """Counts the batches per epoch and the distinct batch shapes for pairs of these lengths.

    Args:
        lengths: the pairs' padded lengths (a pair's longer side, the target
            counted with BOS, as `kept_pairs` gives them).
        boundaries: the buckets' edges.
        batch_sizes: the rows of each bucket's batches (`bucket_batch_sizes`).
        drop_remainder: leave out each bucket's last, smaller batch.
            Defaults to False.
        pad_remainder: pad each bucket's last batch to its batch size (one
            shape per bucket). Defaults to False.

    Returns:
        (batches per epoch, distinct batch shapes), two ints.
    """
    counts = np.bincount(np.searchsorted(boundaries, lengths, side="right"), minlength=len(boundaries))
    sizes = np.asarray(batch_sizes)
    full, remainders = counts // sizes, (counts % sizes) > 0
    batches = int((full + (0 if drop_remainder else remainders)).sum())
    if drop_remainder:
        return batches, int((full > 0).sum())
    if pad_remainder:
        return batches, int((counts > 0).sum())
    return batches, int((full > 0).sum() + remainders.sum())


def _shuffled_epochs(pairs, batched, shuffle, seed, epochs):
    """`epochs` passes, each in a new order: every iteration over the
    dataset draws new orders (as tf.data's reshuffle_each_iteration)."""
    count = int(pairs[0].nrows())
    seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).take(epochs)

    def one_epoch(draw):
        order = tf.range(count, dtype=tf.int64)
        if shuffle:
            order = tf.random.experimental.stateless_shuffle(order, seed=tf.stack([draw, 0]))
        return batched(*pairs, order)

    return seeds.flat_map(one_epoch)


def _positioned_epochs(pairs, batched, shuffle, seed, epochs, position):
    """`epochs` passes from `position`: epoch e shuffled by (seed, e), the
    first pass without its first `position.skip` batches."""
    count = int(pairs[0].nrows())

    def one_epoch(index):  # traced once, run as each epoch starts
        epoch = position.epoch + index
        order = tf.range(count, dtype=tf.int64)
        if shuffle:
            order = tf.random.experimental.stateless_shuffle(
                order, seed=tf.stack([tf.constant(seed or 0, tf.int64), epoch]))
        return batched(*pairs, order).skip(tf.where(index == 0, position.skip, 0))

    return tf.data.Dataset.range(epochs).flat_map(one_epoch)


def _kept_pairs(sources, targets, source_tokenizer, target_tokenizer, max_length, over_long):
    """Tokenized pairs that fit: (source ids, target ids, padded lengths, report)."""
    source_ids, target_ids = tokenize_pairs(sources, targets, source_tokenizer, target_tokenizer)
    empty, too_long = unfit_pairs(source_ids, target_ids, max_length)
    empty, too_long = empty.numpy(), too_long.numpy()
    report = PipelineReport(
        len(sources), int((~empty & ~too_long).sum() if over_long == "drop" else (~empty).sum()),
        int(empty.sum()), int(too_long.sum()), "dropped" if over_long == "drop" else "truncated", max_length,
    )
    if not report.kept:
        raise ValueError(f"No pair is left to train on: {report}.")
    source_ids, target_ids, lengths = kept_pairs(source_ids, target_ids, max_length, over_long)
    return source_ids, target_ids, lengths.numpy(), report


def unfit_pairs(source_ids, target_ids, max_length):
    """Finds the pairs that cannot train as they are: those with an empty side, and those too long.

    Args:
        source_ids: (N, None) ragged source ids.
        target_ids: (N, None) ragged target ids.
        max_length: the longest side allowed, the target counted with its
            BOS or EOS.

    Returns:
        (empty, too long), two (N,) bool tensors: pairs with a side of no
        tokens, and the others with a side over `max_length` (the target
        with its BOS or EOS).
    """
    source_lengths = source_ids.row_lengths()
    target_lengths = target_ids.row_lengths() + 1
    empty = tf.equal(source_lengths, 0) | tf.equal(target_lengths, 1)
    too_long = ~empty & ((source_lengths > max_length) | (target_lengths > max_length))
    return empty, too_long


def kept_pairs(source_ids, target_ids, max_length, over_long="drop"):
    """Keeps the pairs of two (N, None) ragged id tensors that train, in order.

    Those kept have no empty side, and no side over `max_length` ("drop") or
    are cut to it ("truncate"; the target leaves room for its BOS or EOS).
    Runs eagerly and in tf.data's graphs.

    Args:
        source_ids: (N, None) ragged source ids.
        target_ids: (N, None) ragged target ids.
        max_length: the longest side kept, the target counted with its BOS
            or EOS.
        over_long: "drop" pairs over `max_length`; any other value (e.g.
            "truncate") cuts them to it. Defaults to "drop".

    Returns:
        (source ids, target ids, lengths) of the kept pairs: a pair's length
        is its longer side's, the target counted with BOS, as
        `window_batches` buckets it.
    """
    empty, too_long = unfit_pairs(source_ids, target_ids, max_length)
    keep = ~empty & (~too_long if over_long == "drop" else True)
    source_ids = tf.ragged.boolean_mask(source_ids, keep)[:, :max_length]
    target_ids = tf.ragged.boolean_mask(target_ids, keep)[:, : max_length - 1]
    lengths = tf.maximum(source_ids.row_lengths(), target_ids.row_lengths() + 1)
    return source_ids, target_ids, lengths


def bucket_batch_sizes(boundaries, token_budget):
    """Sizes each bucket's batches to the token budget.

    Bucket i holds lengths in [edge[i-1], edge[i]) and is padded to
    edge[i] - 1, so it takes token_budget // (edge[i] - 1) rows.

    Args:
        boundaries: the buckets' edges.
        token_budget: padded tokens per batch (per side).

    Returns:
        A list of the rows of each bucket's batches, each at least 1.
    """
    return [max(1, token_budget // max(edge - 1, 1)) for edge in boundaries]


def check_boundaries(boundaries, max_length):
    """Checks that `boundaries` leave no kept length outside the last bucket.

    Args:
        boundaries: the buckets' edges, as a list.
        max_length: the longest padded pair length kept.

    Returns:
        `boundaries`, unchanged.

    Raises:
        ValueError: if the last boundary is not greater than `max_length`.
    """
    if boundaries[-1] <= max_length:
        raise ValueError(
            f"The last bucket boundary ({boundaries[-1]}) must be > `max_length` ({max_length})."
        )
    return boundaries


def window_batches(source_ids, target_ids, boundaries, batch_sizes, drop_remainder=False, pad_remainder=False,
                   order=None):
    """Makes the model batches ({"source_ids", "target_ids"}, labels) of a window of pairs.

    Whole-window tensor ops, no copy of the window. A pair's length is its longer side's, the target with BOS. Bucket i
    holds lengths in [edge[i-1], edge[i]) and its batches take
    `batch_sizes[i]` pairs in the order they come, padded with PAD to
    edge[i] - 1; a batch is emitted as its last pair comes, and the
    buckets' remainders after every full batch, by bucket: what tf.data's
    `bucket_by_sequence_length(..., pad_to_bucket_boundary=True)` makes of
    the pairs one at a time, without a tensor per pair. Targets get BOS
    (decoder input) and EOS (labels). `drop_remainder` leaves the
    remainders out; `pad_remainder` pads them with all-PAD rows to their
    bucket's batch size (one shape per bucket, for XLA).

    Args:
        source_ids: (N, None) ragged source ids, pairs that fit the last bucket.
        target_ids: (N, None) ragged target ids, parallel to `source_ids`.
        boundaries: the buckets' edges.
        batch_sizes: the rows of each bucket's batches (`bucket_batch_sizes`).
        drop_remainder: leave each bucket's remainder out. Defaults to False.
        pad_remainder: pad each bucket's remainder with all-PAD rows to the
            bucket's batch size. Defaults to False.
        order: the indices of the pairs in the order they come. Defaults to
            None (as they are).

    Returns:
        A tf.data.Dataset of ({"source_ids", "target_ids"}, labels) batches.
    """
    edges = tf.constant(boundaries, tf.int64)
    sizes = tf.constant(batch_sizes, tf.int64)
    lengths = tf.maximum(source_ids.row_lengths(), target_ids.row_lengths() + 1)
    count = tf.shape(lengths, out_type=tf.int64)[0]
    order = tf.range(count) if order is None else tf.cast(order, tf.int64)
    buckets = tf.searchsorted(edges, tf.gather(lengths, order), side="right", out_type=tf.int64)
    by_bucket = tf.cast(tf.argsort(buckets, stable=True), tf.int64)  # each bucket's pairs in the order they come
    counts = tf.math.bincount(buckets, minlength=len(boundaries), dtype=tf.int64)
    firsts = tf.cumsum(counts, exclusive=True)
    per_bucket = counts // sizes if drop_remainder else -(-counts // sizes)
    bucket = tf.repeat(tf.range(len(boundaries), dtype=tf.int64), per_bucket)
    index = tf.ragged.range(per_bucket).flat_values  # the batch's place in its bucket
    size = tf.gather(sizes, bucket)
    start = tf.gather(firsts, bucket) + index * size
    rows = tf.minimum(size, tf.gather(counts, bucket) - index * size)
    # When each batch is emitted: a full one at its last pair, remainders after all, by bucket.
    emitted = tf.where(tf.equal(rows, size), tf.gather(by_bucket, start + rows - 1), count + bucket)
    plan = tf.gather(tf.stack([start, rows, tf.gather(edges, bucket) - 1, size], axis=1),
                     tf.argsort(emitted, stable=True))

    def batch(row):
        start, rows, width, size = tf.unstack(row)
        chosen = tf.gather(order, by_bucket[start : start + rows])
        decoder_input, labels = add_specials(tf.gather(target_ids, chosen))
        shape = tf.stack([size if pad_remainder else rows, width])
        source = tf.gather(source_ids, chosen).to_tensor(PAD_ID, shape=shape)
        return ({"source_ids": source, "target_ids": decoder_input.to_tensor(PAD_ID, shape=shape)},
                labels.to_tensor(PAD_ID, shape=shape))

    return tf.data.Dataset.from_tensor_slices(plan).map(batch)


def padding_fraction(dataset):
    """Measures the share of PAD among the label positions of one pass over `dataset`.

    Args:
        dataset: a dataset of (inputs, labels) batches.

    Returns:
        The fraction of label positions that are PAD, a float.
    """
    real = total = 0
    for _, labels in dataset:
        real += int(tf.math.count_nonzero(labels))
        total += int(tf.size(labels))
    return 1.0 - real / total
