"""Attention heatmaps as images, for TensorBoard or files."""

import io

import numpy as np


def attention_image(weights, source_tokens, target_tokens, title=None):
    """Renders a (T, S) attention matrix with labelled axes.

    Args:
        weights: (T, S) array, rows summing to 1.
        source_tokens: S labels (x axis).
        target_tokens: T labels (y axis).
        title: optional title.

    Returns:
        (H, W, 4) uint8 RGBA image.

    Example:
    >>> image = attention_image(np.eye(2), ["a", "b"], ["x", "y"])
    >>> image.dtype, image.shape[-1]
    (dtype('uint8'), 4)
    """
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    from matplotlib import pyplot

    weights = np.asarray(weights, dtype="float32")
    if weights.shape != (len(target_tokens), len(source_tokens)):
        raise ValueError(
            f"`weights` has shape {weights.shape}; expected (len(target_tokens), "
            f"len(source_tokens)) = ({len(target_tokens)}, {len(source_tokens)})."
        )
    size = (max(3.0, 0.3 * len(source_tokens) + 1.5), max(2.5, 0.3 * len(target_tokens) + 1.2))
    figure, axes = pyplot.subplots(figsize=size, dpi=80)
    axes.imshow(weights, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    axes.set_xticks(range(len(source_tokens)), source_tokens, rotation=90, fontsize=7)
    axes.set_yticks(range(len(target_tokens)), target_tokens, fontsize=7)
    axes.set_xlabel("source")
    axes.set_ylabel("output")
    if title:
        axes.set_title(title, fontsize=8)
    return figure_pixels(figure)


def figure_pixels(figure):
    """Renders a matplotlib figure as pixels (for tf.summary.image) and closes it.

    Args:
        figure: a matplotlib figure.

    Returns:
        (H, W, 4) uint8 RGBA pixels.
    """
    from matplotlib import pyplot

    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="rgba", dpi=80)
    width, height = figure.canvas.get_width_height()
    pyplot.close(figure)
    return np.frombuffer(buffer.getvalue(), np.uint8).reshape(height, width, 4)
