"""Examples in an order fixed by the data epoch, so that a resumed run sees
what an uninterrupted one would.

tf.data's `shuffle(reshuffle_each_iteration=True)` draws each pass's order
from the iterations made so far in this process: a run resumed at epoch 3
would see epoch 1's order again. Here the order of a pass comes from
(seed, `position.epoch`), read as the pass starts
(`kseq.training.checkpoints.resume.TrainingPosition`, set by `ResumableBackup`).
"""

import tensorflow as tf


def epoch_ordered_slices(tensors, position, seed=0, shuffle=True):
    """Makes a dataset of the slices of `tensors`, shuffled anew at the start of each pass.

    The order comes from (`seed`, the epoch in `position`).

    Args:
        tensors: a nested structure of tensors or ragged tensors with the same
            number of rows.
        position: a `kseq.training.checkpoints.resume.TrainingPosition`; its
            `epoch` is read as each pass starts.
        seed: the shuffle's seed. Default 0.
        shuffle: False keeps the rows' order. Default True.

    Returns:
        A tf.data.Dataset of the rows, its cardinality known.

    Example:
    >>> from kseq.training.checkpoints.resume import TrainingPosition
    >>> position = TrainingPosition()
    >>> data = epoch_ordered_slices(tf.range(5), position, seed=1)
    >>> first = [int(x) for x in data]
    >>> position.set(1)
    >>> sorted(int(x) for x in data) == sorted(first) and [int(x) for x in data] != first
    True
    >>> position.set(0)
    >>> [int(x) for x in data] == first
    True
    """
    flat = tf.nest.flatten(tensors, expand_composites=False)
    count = int(flat[0].nrows() if isinstance(flat[0], tf.RaggedTensor) else flat[0].shape[0])

    def one_pass(_):  # traced once, run as each pass starts
        order = tf.range(count, dtype=tf.int64)
        if shuffle:
            order = tf.random.experimental.stateless_shuffle(
                order, seed=tf.stack([tf.constant(seed, tf.int64), position.epoch]))
        return tf.data.Dataset.from_tensor_slices(tf.nest.map_structure(lambda t: tf.gather(t, order), tensors))

    return tf.data.Dataset.range(1).flat_map(one_pass).apply(tf.data.experimental.assert_cardinality(count))


def epoch_ordered_batches(tensors, position, batch, seed=0, shuffle=True, epochs=1):
    """Makes one pass over `epochs` data epochs of batches, from `position`.

    Epoch e holds the slices of `tensors` in an order fixed by (`seed`, e),
    made into batches by `batch`; the pass starts at `position.epoch`, its
    first epoch without the first `position.skip` batches, so a run resumed
    mid-epoch trains on the batches an uninterrupted one would. Sets
    `position.steps_per_epoch` (batches per epoch, counted once here) and
    `position.epochs`.

    Args:
        tensors: a nested structure of tensors or ragged tensors with the same
            number of rows.
        position: a `kseq.training.checkpoints.resume.TrainingPosition`.
        batch: a function from a dataset of examples to a dataset of batches.
        seed: the shuffle's seed. Default 0.
        shuffle: False keeps the rows' order in every epoch. Default True.
        epochs: the data epochs of the whole run. Default 1.

    Returns:
        A tf.data.Dataset of batches (prefetched).

    Example:
    >>> from kseq.training.checkpoints.resume import TrainingPosition
    >>> position = TrainingPosition()
    >>> data = epoch_ordered_batches(tf.range(6), position, lambda d: d.batch(4), seed=1, epochs=2)
    >>> position.steps_per_epoch, len([b for b in data])
    (2, 4)
    >>> position.set(1, skip=1)
    >>> [b.shape[0] for b in data]
    [2]
    """
    flat = tf.nest.flatten(tensors, expand_composites=False)
    count = int(flat[0].nrows() if isinstance(flat[0], tf.RaggedTensor) else flat[0].shape[0])
    one = batch(tf.data.Dataset.from_tensor_slices(tensors))
    known = int(one.cardinality())
    position.steps_per_epoch = known if known >= 0 else sum(1 for _ in one)
    position.epochs = epochs

    def one_epoch(index):  # traced once, run as each epoch starts
        epoch = position.epoch + index
        order = tf.range(count, dtype=tf.int64)
        if shuffle:
            order = tf.random.experimental.stateless_shuffle(order, seed=tf.stack([tf.constant(seed, tf.int64),
                                                                                   epoch]))
        examples = tf.data.Dataset.from_tensor_slices(tf.nest.map_structure(lambda t: tf.gather(t, order), tensors))
        return batch(examples).skip(tf.where(index == 0, position.skip, 0))

    left = tf.data.Dataset.range(epochs).take_while(lambda index: position.epoch + index < epochs)
    return left.flat_map(one_epoch).prefetch(tf.data.AUTOTUNE)
