"""Examples in an order fixed by the data epoch, so that a resumed run sees
what an uninterrupted one would.

tf.data's `shuffle(reshuffle_each_iteration=True)` draws each pass's order
from the iterations made so far in this process: a run resumed at epoch 3
would see epoch 1's order again. Here the order of a pass comes from
(seed, `position.epoch`), read as the pass starts
(`kseq.training.resume.TrainingPosition`, set by `ResumableBackup`).
"""

import tensorflow as tf


def epoch_ordered_slices(tensors, position, seed=0, shuffle=True):
    """A dataset of the slices of `tensors` (a nested structure of tensors
    or ragged tensors with the same number of rows), shuffled by
    (`seed`, the epoch in `position`) at the start of each pass.

    Example:
    >>> from kseq.training.resume import TrainingPosition
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
