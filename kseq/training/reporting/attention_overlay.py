"""Attention over an image drawn on the image: one heat map per generated word."""

import numpy as np
import tensorflow as tf

from kseq.training.reporting.plotting import figure_pixels


def upsample_attention(weights, height, width):
    """Spreads each grid cell's attention weight over the pixels it covers (nearest neighbour).

    Args:
        weights: (h, w) weights over a feature grid.
        height: the image's height in pixels.
        width: the image's width in pixels.

    Returns:
        (height, width) float32 weights.
    """
    weights = np.asarray(weights, np.float32)
    rows = np.minimum((np.arange(height) * weights.shape[0]) // height, weights.shape[0] - 1)
    columns = np.minimum((np.arange(width) * weights.shape[1]) // width, weights.shape[1] - 1)
    return weights[rows][:, columns]


def attention_overlay(image, weights, words, columns=6):
    """Renders each word's attention as a heat map over the image, the word
    as its title, in rows of `columns` panels.

    Args:
        image: (H, W, 3) uint8 or float in [0, 1].
        weights: (T, h, w) attention over the grid, one map per word.
        words: T strings.

    Returns:
        (height, width, 4) uint8 RGBA image (for `tf.summary.image`, drop alpha).

    Example:
    >>> panel = attention_overlay(np.zeros((8, 8, 3), "uint8"), np.ones((2, 2, 2)) / 4, ["a", "b"])
    >>> panel.dtype, panel.shape[-1]
    (dtype('uint8'), 4)
    """
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    from matplotlib import pyplot

    weights = np.asarray(weights, np.float32)
    if weights.ndim != 3 or len(weights) != len(words):
        raise ValueError(f"`weights` must be (len(words), h, w) = ({len(words)}, h, w); got shape {weights.shape}.")
    image = np.asarray(image)
    image = image.astype(np.float32) / 255.0 if image.dtype == np.uint8 else image.astype(np.float32)
    columns = max(1, min(columns, len(words)))
    rows = max(1, -(-len(words) // columns))
    figure, axes = pyplot.subplots(rows, columns, figsize=(1.6 * columns, 1.8 * rows), dpi=80, squeeze=False)
    for axis in axes.flat:
        axis.axis("off")
    for axis, word, grid in zip(axes.flat, words, weights):
        heat = upsample_attention(grid / max(float(grid.max()), 1e-9), *image.shape[:2])
        colours = matplotlib.colormaps["autumn"](heat)
        colours[..., 3] = 0.75 * heat  # unattended pixels show the image as it is
        axis.imshow(image)
        axis.imshow(colours)
        axis.set_title(word, fontsize=9)
    return figure_pixels(figure)


def write_image_attention(writer, step, images, attention, texts):
    """One TensorBoard image a caption: a heat map over its image per word.

    Args:
        writer: a `tf.summary` writer.
        step: the summaries' step.
        images: (N, H, W, 3) images.
        attention: (N, T, h, w) each word's attention over the feature grid.
        texts: N captions, their words split on spaces.
    """
    attention = np.asarray(attention)
    with writer.as_default(step=step):
        for row, (image, text) in enumerate(zip(images, texts)):
            words = text.split()
            panel = attention_overlay(image, attention[row, :len(words)], words)
            tf.summary.image(f"attention_{row}", panel[None, :, :, :3])
