"""Captions of images in batches, and the captioner's monitor: content
accuracy and samples at every evaluation, the attention model's heat maps."""

import os

import keras
import numpy as np
import tensorflow as tf

from kseq.data.scenes import content_accuracy
from kseq.extras import missing
from kseq.training.progress import global_step
from kseq.training.reporting.attention_overlay import write_image_attention


def caption_images(model, tokenizer, images, max_length, beam_size, method="beam", batch=100):
    """Captions images, decoded as the export does (beam search) or greedily.

    Args:
        model: the captioner.
        tokenizer: the caption tokenizer.
        images: (N, H, W, 3) uint8.
        max_length: words per generated caption at most (--max-caption-length).
        beam_size: beams of the search (--beam-size).
        method: "beam" (default) or "greedy".
        batch: images a call of `generate`. Default 100.

    Returns:
        (N caption texts, their ids (N, T) padded with 0 to the longest).
    """
    texts, ids = [], []
    for begin in range(0, len(images), batch):
        generated = model.generate(images[begin:begin + batch], max_length=max_length,
                                   method=method, beam_size=beam_size)
        texts += [t.decode() for t in tokenizer.detokenize(generated).numpy()]
        ids.append(generated.numpy())
    width = max(i.shape[1] for i in ids)
    return texts, np.concatenate([np.pad(i, [(0, 0), (0, width - i.shape[1])]) for i in ids])


class CaptionMonitor(keras.callbacks.Callback):
    """At every evaluation: greedy captions of the first `monitor_images`
    validation scenes, their content accuracy (printed, logged, added to
    the epoch's logs) and samples; the attention model's per-word heat maps.

    Args:
        scenes: the validation scenes (`kseq.data.scenes`).
        tokenizer: the caption tokenizer.
        logdir: the model's folder; the logs go to its "generation" run.
        max_length: words per generated caption at most (--max-caption-length).
        beam_size: passed to `generate` (--beam-size); the monitor decodes greedily.
        monitor_images: validation scenes captioned (--monitor-images).
        attention_plots: images whose per-word attention is drawn (--attention-plots).
    """

    def __init__(self, scenes, tokenizer, logdir, max_length, beam_size, monitor_images, attention_plots):
        super().__init__()
        self.images, self.shapes = scenes.images[:monitor_images], scenes.shapes[:monitor_images]
        self.references = [captions[0] for captions in scenes.captions[:monitor_images]]
        self.tokenizer, self.max_length, self.beam_size = tokenizer, max_length, beam_size
        self.attention_plots = attention_plots
        self.writer = tf.summary.create_file_writer(os.path.join(logdir, "generation"))

    def on_epoch_end(self, epoch, logs=None):
        texts, ids = caption_images(self.model, self.tokenizer, self.images, self.max_length, self.beam_size,
                                    method="greedy")
        accuracy = content_accuracy(texts, self.shapes)
        if logs is not None:
            logs["val_content_accuracy"] = accuracy
        print(f"\nvalid content accuracy {accuracy:.1%}; {texts[0]!r} (reference {self.references[0]!r})")
        step = global_step(self.model)
        with self.writer.as_default(step=step):
            tf.summary.scalar("content_accuracy", accuracy)
            tf.summary.text("samples", "\n\n".join(f"- {t}  \n  (a reference: {r})"
                                                   for t, r in zip(texts[:5], self.references)))
        if self.model.has_attention and self.attention_plots and not missing(
                "plots", "attention maps are not drawn"):
            images = self.images[:self.attention_plots]
            write_image_attention(self.writer, step, images, self.model.caption_attention(images, ids[:len(images)]),
                                  texts)
        self.writer.flush()
