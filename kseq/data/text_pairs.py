"""Text pairs to model inputs: BOS/EOS around targets, padded batches."""

from collections.abc import Sequence

import tensorflow as tf

from kseq.data.epoch_order import epoch_ordered_batches
from kseq.special_ids import BOS_ID, EOS_ID, PAD_ID


def add_specials(target_ids):
    """Adds BOS before and EOS after target ids: the decoder's inputs and its labels.

    Args:
        target_ids: ragged (B, T) target ids.

    Returns:
        (BOS + ids, ids + EOS), both ragged (B, T + 1).
    """
    batch = target_ids.nrows()
    bos = tf.fill([batch, 1], tf.constant(BOS_ID, target_ids.dtype))
    eos = tf.fill([batch, 1], tf.constant(EOS_ID, target_ids.dtype))
    return tf.concat([bos, target_ids], axis=1), tf.concat([target_ids, eos], axis=1)


def text_pair_dataset(
    sources: Sequence[str], targets: Sequence[str], source_tokenizer, target_tokenizer, batch_size: int,
    shuffle: bool = False, seed: int | None = None, position=None, epochs: int = 1,
) -> tf.data.Dataset:
    """Makes batches of ({"source_ids", "target_ids"}, labels) from parallel strings.

    Tokenizes in the graph, adds BOS to the decoder inputs and EOS to the
    labels, pads each batch to its own longest row with PAD. With
    `position`, the batches of `epochs` data epochs from the position on,
    each epoch shuffled by (seed, its index), so a resumed run sees the
    order an uninterrupted one would (`kseq.data.epoch_order.epoch_ordered_batches`).

    Args:
        sources: N source strings.
        targets: N target strings, parallel to `sources`.
        source_tokenizer: the kseq tokenizer of the sources.
        target_tokenizer: the kseq tokenizer of the targets.
        batch_size: B, pairs a batch (the last one may be smaller).
        shuffle: shuffle the pairs each epoch. Default False.
        seed: the shuffle's seed. Default None (0 with `position`).
        position: a `kseq.training.checkpoints.resume.TrainingPosition`, or None. Default None.
        epochs: data epochs in the pass, with `position`. Default 1.

    Returns:
        A tf.data.Dataset of ({"source_ids": (B, S), "target_ids": (B, T)}, labels (B, T)), int32.
    """
    pairs = (tf.constant(list(sources), tf.string), tf.constant(list(targets), tf.string))

    def to_model_inputs(source, target):
        source_ids = source_tokenizer.tokenize(source)
        target_ids, labels = add_specials(target_tokenizer.tokenize(target))
        pad = lambda ragged: tf.cast(ragged.to_tensor(default_value=PAD_ID), tf.int32)  # noqa: E731
        return {"source_ids": pad(source_ids), "target_ids": pad(target_ids)}, pad(labels)

    def batch(examples):
        return examples.batch(batch_size).map(to_model_inputs, num_parallel_calls=tf.data.AUTOTUNE)

    if position is not None:
        return epoch_ordered_batches(pairs, position, batch, seed=seed or 0, shuffle=shuffle, epochs=epochs)
    dataset = tf.data.Dataset.from_tensor_slices(pairs)
    if shuffle:
        dataset = dataset.shuffle(len(sources), seed=seed, reshuffle_each_iteration=True)
    return batch(dataset).prefetch(tf.data.AUTOTUNE)


def bucket_by_target_length(examples, boundaries, batch_size):
    """Batches examples of similar label length, each batch padded to its own longest row.

    Args:
        examples: a dataset of (inputs, labels), `inputs` a tuple whose last
            element and `labels` are ragged rows (target ids).
        boundaries: label lengths where batches are cut, ascending.
        batch_size: examples a batch, in every bucket.

    Returns:
        The dataset of padded batches, PAD (0) after each row's end.
    """
    # Rows of a ragged tensor come out ragged; padded batches need them dense.
    dense = examples.map(lambda inputs, labels: ((*inputs[:-1], tf.identity(inputs[-1])), tf.identity(labels)))
    return dense.bucket_by_sequence_length(lambda inputs, labels: tf.shape(labels)[0], boundaries,
                                           [batch_size] * (len(boundaries) + 1))
