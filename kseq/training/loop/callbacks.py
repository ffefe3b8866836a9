"""Keras callbacks for sequence models: samples and scores, attention maps,
time limits, non-finite losses (also `kseq.callbacks`). Evaluation periods
on a step or time cadence are `kseq.training.loop.EvaluationPeriods`."""

import time

import keras
import numpy as np
import tensorflow as tf

from kseq.decoding import GreedySearch
from kseq.extras import missing
from kseq.special_ids import BOS_ID
from kseq.training.progress import global_step
from kseq.training.reporting.plotting import attention_image
from kseq.training.scoring.evaluation import model_translator
from kseq.training.scoring.selection import all_scores


class GenerationMonitor(keras.callbacks.Callback):
    """Decodes fixed validation inputs after every epoch (every evaluation
    period under `EvaluationPeriods`) and reports scores.

    Prints a few samples, logs each score as a scalar and the samples as a
    Markdown table to TensorBoard (under `<logdir>/generation`, at the
    global step), and adds the scores to the epoch's logs (so they reach
    other callbacks). A time-bounded `translate` (e.g.
    `kseq.training.scoring.evaluation.BatchTranslator(..., seconds=...)`) may return fewer
    outputs than sources: the scores then cover the sentences it reached.

    Args:
        sources: (N,) source strings.
        references: (N,) reference strings, or None (e.g. prompts of a
            language model, whose continuations have no reference).
        translate: `strings -> strings`, e.g. an exported-style translator.
        scores: `fn(hypotheses, references) -> {name: float}`, or a dict
            {name: fn(hypotheses, references) -> float}; may be empty.
        logdir: TensorBoard log directory, or None for printing only.
        samples: how many examples to print and log. Defaults to 3.
    """

    def __init__(self, sources, references, translate, scores, logdir=None, samples=3):
        super().__init__()
        self.sources = list(sources)
        self.references = None if references is None else list(references)
        self.translate, self.scores, self.samples = translate, scores, samples
        self.writer = tf.summary.create_file_writer(f"{logdir}/generation") if logdir else None
        self.history = []

    def _score(self, hypotheses, references):
        if callable(self.scores):
            return {name: float(value) for name, value in self.scores(hypotheses, references).items()}
        return {name: float(fn(hypotheses, references)) for name, fn in self.scores.items()}

    def evaluate(self):
        """Decodes the sources with the model as it is now and scores the outputs.

        Returns:
            (hypotheses, the references they reached or None, {score name: float}).
        """
        hypotheses = [
            h.decode("utf-8") if isinstance(h, bytes) else h
            for h in np.asarray(self.translate(self.sources)).tolist()
        ]
        references = None if self.references is None else self.references[:len(hypotheses)]
        return hypotheses, references, self._score(hypotheses, references)

    def on_epoch_end(self, epoch, logs=None):
        hypotheses, references, results = self.evaluate()
        count = len(hypotheses)
        self.history.append(results)
        if logs is not None:
            logs.update({f"val_{name}": value for name, value in results.items()})
        shown = ", ".join(f"{name} {value:.4f}" for name, value in results.items())
        reached = f" on {count} of {len(self.sources)} sentences" if count < len(self.sources) else ""
        print(f"step {global_step(self.model)}: {shown or 'samples'}{reached}")
        rows = list(zip(self.sources, hypotheses, references or [None] * count))[: self.samples]
        for source, hypothesis, reference in rows:
            known = "" if reference is None else f" (reference {reference!r})"
            print(f"  {source!r} -> {hypothesis!r}{known}")
        if self.writer is not None:
            columns = ["source", "output"] + ([] if self.references is None else ["reference"])
            table = "\n".join(
                ["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
                + ["| " + " | ".join(row[: len(columns)]) + " |" for row in rows]
            )
            with self.writer.as_default(step=global_step(self.model)):
                for name, value in results.items():
                    tf.summary.scalar(name, value)
                tf.summary.scalar("sentences_scored", count)
                tf.summary.text("samples", table)
            self.writer.flush()


class TimeLimit(keras.callbacks.Callback):
    """Stops training once `minutes` of wall-clock time have passed.

    Checked after every batch, so a run stops within one step of its
    budget; the epoch in progress still ends with its validation.

    Args:
        minutes: the training budget (None or 0: no limit).
        spent_seconds: training time already spent, e.g. by the run that a
            resumed one continues. Defaults to 0.
    """

    def __init__(self, minutes, spent_seconds=0.0):
        super().__init__()
        self.minutes = minutes
        self.spent_seconds = spent_seconds
        self.stopped_at_step = None

    def on_train_begin(self, logs=None):
        self.start = time.monotonic() - self.spent_seconds

    def seconds_left(self):
        """Seconds of the budget left (counting the runs before a resume), or None without a budget."""
        if not self.minutes:
            return None
        return max(60.0 * self.minutes - (time.monotonic() - self.start), 0.0)

    def on_train_batch_end(self, batch, logs=None):
        if self.minutes and time.monotonic() - self.start > 60.0 * self.minutes:
            if not self.model.stop_training:
                self.stopped_at_step = int(self.model.optimizer.iterations.numpy())
                print(f"\ntime limit of {self.minutes} min reached at step {self.stopped_at_step}")
            self.model.stop_training = True


class NonFiniteLoss(FloatingPointError):
    """Raised by `StopOnNonFiniteLoss`."""


class StopOnNonFiniteLoss(keras.callbacks.Callback):
    """Stops `fit` at the first step whose loss is NaN or infinite, raising
    `NonFiniteLoss` with the step and what to try, instead of training on
    (keras' TerminateOnNaN names only the batch of the epoch).

    Raising (rather than only stopping) keeps `fit` from ending normally, so
    nothing after it exports the broken model and a `ResumableBackup` keeps
    its last save.

    Args:
        hints: what to suggest, e.g. the task options that lower the
            learning rate or clip gradients.
    """

    def __init__(self, hints="lower the learning rate or clip gradients (e.g. `clipnorm=1.0`)"):
        super().__init__()
        self.hints = hints

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not np.isfinite(float(loss)):
            step = int(self.model.optimizer.iterations.numpy())
            raise NonFiniteLoss(
                f"The training loss became {float(loss)} at step {step} (batch {batch + 1} of the "
                f"epoch); stopped. To fix it, {self.hints}."
            )


class AttentionMaps(keras.callbacks.Callback):
    """Logs decoder-to-source attention heatmaps of fixed sentences after
    every epoch, as images under `<logdir>/attention` (labelled with tokens).

    Args:
        source_ids: (N, S) int ids of the sentences to plot.
        output_ids: `source_ids -> (N, T) output ids` (e.g. greedy decoding).
        labels: `ids (1-D) -> list of token strings`.
        logdir: TensorBoard log directory.
        output_labels: the outputs' `labels`, where the target side has its
            own vocabulary. Default None: `labels`.
    """

    def __init__(self, source_ids, output_ids, labels, logdir, output_labels=None):
        super().__init__()
        self.source_ids, self.output_ids, self.labels = source_ids, output_ids, labels
        self.output_labels = output_labels or labels
        self.writer = tf.summary.create_file_writer(f"{logdir}/attention")

    def on_epoch_end(self, epoch, logs=None):
        if missing("plots", "attention maps are not drawn"):
            return
        outputs = np.asarray(self.output_ids(self.source_ids))
        decoder_input = np.concatenate([np.full((len(outputs), 1), BOS_ID, outputs.dtype), outputs[:, :-1]], 1)
        weights = np.asarray(
            self.model.attention_weights({"source_ids": self.source_ids, "target_ids": decoder_input})
        )
        images = []
        for row, source in enumerate(np.asarray(self.source_ids)):
            source = source[source != 0]
            output = outputs[row][outputs[row] != 0]
            image = attention_image(
                weights[row, : len(output), : len(source)], self.labels(source), self.output_labels(output)
            )
            images.append(image)
        with self.writer.as_default(step=global_step(self.model)):
            for row, image in enumerate(images):
                tf.summary.image(f"sentence_{row}", image[None, :, :, :3])
        self.writer.flush()


def translator_callbacks(model, tokenizer, valid, logdir, max_length, sentences, plots, decode_xla=False,
                         seconds=None, target_tokenizer=None):
    """What a translator logs at each evaluation: greedy translations of the
    first `sentences` validation pairs and their scores (`GenerationMonitor`),
    the last weights (`<logdir>/checkpoints/last.weights.h5`) and, for
    `plots` > 0, the attention maps of the first `plots` sentences.

    Args:
        model, tokenizer: the translator and its one tokenizer.
        valid: (sources, references).
        logdir: TensorBoard's folder.
        max_length: the longest source and translation, in tokens.
        sentences, plots: how many sentences are translated and plotted.
        decode_xla: decode with XLA; `seconds`: an evaluation's time bound.
        target_tokenizer: the targets' own tokenizer (a pretrained
            translator's); None (default): `tokenizer` for both sides.

    Returns:
        (the monitor, [callbacks], the monitor first).
    """
    sources, references = (texts[:sentences] for texts in valid)
    greedy = model_translator(model, tokenizer, max_length, GreedySearch(max_length), decode_xla, seconds,
                              target_tokenizer)
    monitor = GenerationMonitor(sources, references, greedy, all_scores, logdir=logdir)
    callbacks = [monitor, keras.callbacks.ModelCheckpoint(f"{logdir}/checkpoints/last.weights.h5",
                                                          save_weights_only=True)]
    if plots:
        plotted = tokenizer.tokenize(sources[:plots])[:, :max_length].to_tensor()
        callbacks.append(AttentionMaps(plotted, lambda ids: model.generate(ids, max_length=max_length),
                                       tokenizer.id_to_piece, logdir,
                                       (target_tokenizer or tokenizer).id_to_piece))
    return monitor, callbacks
