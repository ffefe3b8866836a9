"""Captioned scenes to model inputs: batches of (images, BOS + words) and words + EOS, bucketed by caption length."""

import numpy as np
import tensorflow as tf

from kseq.data.epoch_order import epoch_ordered_batches
from kseq.data.text_pairs import add_specials, bucket_by_target_length

CAPTION_BUCKETS = [12, 22, 32]  # caption lengths (BOS included) where batches are cut: 1, 2, 3 shapes


def caption_batches(scenes, tokenizer, batch_size, position=None, seed=0, epochs=1):
    """Makes one split's batches, bucketed by caption length (cut at `CAPTION_BUCKETS`).

    Every reference caption of every image comes once per epoch; with
    `position`, in an order fixed by its data epoch
    (`kseq.data.epoch_order.epoch_ordered_batches`).

    Args:
        scenes: the split's scenes (images and their reference captions).
        tokenizer: the caption tokenizer.
        batch_size: captions a batch, in every bucket.
        position: the training position, for the training split's epoch
            order; None (default): one pass, in order, for a held-out split.
        seed: the epoch order's seed, with `position`. Default 0.
        epochs: data epochs in the pass, with `position`. Default 1.

    Returns:
        A dataset of ((images (B, H, W, 3) uint8, BOS + words (B, T)),
        words + EOS (B, T)).
    """
    references = len(scenes.captions[0])
    target_in, target_out = add_specials(tokenizer.tokenize([c for cs in scenes.captions for c in cs]))
    which = np.repeat(np.arange(len(scenes), dtype=np.int32), references)  # each caption's image
    images = tf.constant(scenes.images)
    slices = (tf.constant(which), target_in, target_out)

    def batch(examples):
        pairs = examples.map(lambda i, inputs, labels: ((i, inputs), labels))
        batches = bucket_by_target_length(pairs, CAPTION_BUCKETS, batch_size)
        # Images join after batching: one gather per batch, not a copy per caption.
        return batches.map(lambda inputs, labels: ((tf.gather(images, inputs[0]), inputs[1]), labels))

    if position is not None:
        return epoch_ordered_batches(slices, position, batch, seed=seed, epochs=epochs)
    return batch(tf.data.Dataset.from_tensor_slices(slices)).prefetch(tf.data.AUTOTUNE)
