"""Keras callbacks for sequence models."""

import keras
import numpy as np
import tensorflow as tf


class GenerationMonitor(keras.callbacks.Callback):
    """Decodes fixed validation inputs after every epoch and reports scores.

    Prints a few samples, logs each score as a scalar and the samples as a
    Markdown table to TensorBoard (under `<logdir>/generation`), and adds
    the scores to the epoch's logs (so they reach other callbacks).

    Args:
        sources: (N,) source strings.
        references: (N,) reference strings.
        translate: `strings -> strings`, e.g. an exported-style translator.
        scores: {name: fn(hypotheses, references) -> float}.
        logdir: TensorBoard log directory, or None for printing only.
        samples: how many examples to print and log. Defaults to 3.
    """

    def __init__(self, sources, references, translate, scores, logdir=None, samples=3):
        super().__init__()
        self.sources, self.references = list(sources), list(references)
        self.translate, self.scores, self.samples = translate, scores, samples
        self.writer = tf.summary.create_file_writer(f"{logdir}/generation") if logdir else None
        self.history = []

    def on_epoch_end(self, epoch, logs=None):
        hypotheses = [
            h.decode("utf-8") if isinstance(h, bytes) else h
            for h in np.asarray(self.translate(self.sources)).tolist()
        ]
        results = {name: float(fn(hypotheses, self.references)) for name, fn in self.scores.items()}
        self.history.append(results)
        if logs is not None:
            logs.update({f"val_{name}": value for name, value in results.items()})
        shown = ", ".join(f"{name} {value:.4f}" for name, value in results.items())
        print(f"\nepoch {epoch + 1}: {shown}")
        rows = list(zip(self.sources, hypotheses, self.references))[: self.samples]
        for source, hypothesis, reference in rows:
            print(f"  {source!r} -> {hypothesis!r} (reference {reference!r})")
        if self.writer is not None:
            table = "| source | output | reference |\n|---|---|---|\n" + "\n".join(
                f"| {s} | {h} | {r} |" for s, h, r in rows
            )
            with self.writer.as_default(step=epoch + 1):
                for name, value in results.items():
                    tf.summary.scalar(name, value)
                tf.summary.text("samples", table)
            self.writer.flush()
