"""Keras callbacks for sequence models."""

import dataclasses
import re
import time

import keras
import numpy as np
import tensorflow as tf

from kseq._compat import continue_after_epoch, end_epoch_early
from kseq.training.plotting import attention_image
from kseq.special_ids import BOS_ID


def global_step(model):
    """The optimizer's step count (0 before it is built): the x-axis of every
    curve kseq's callbacks write."""
    optimizer = getattr(model, "optimizer", None)
    return int(optimizer.iterations.numpy()) if optimizer is not None else 0


class GenerationMonitor(keras.callbacks.Callback):
    """Decodes fixed validation inputs after every epoch (every evaluation
    period under `EvaluationPeriods`) and reports scores.

    Prints a few samples, logs each score as a scalar and the samples as a
    Markdown table to TensorBoard (under `<logdir>/generation`, at the
    global step), and adds the scores to the epoch's logs (so they reach
    other callbacks). A time-bounded `translate` (e.g.
    `kseq.evaluation.BatchTranslator(..., seconds=...)`) may return fewer
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

    def on_epoch_end(self, epoch, logs=None):
        hypotheses = [
            h.decode("utf-8") if isinstance(h, bytes) else h
            for h in np.asarray(self.translate(self.sources)).tolist()
        ]
        count = len(hypotheses)
        references = None if self.references is None else self.references[:count]
        results = self._score(hypotheses, references)
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
        hints: what to suggest, e.g. the recipe options that lower the
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
    """

    def __init__(self, source_ids, output_ids, labels, logdir):
        super().__init__()
        self.source_ids, self.output_ids, self.labels = source_ids, output_ids, labels
        self.writer = tf.summary.create_file_writer(f"{logdir}/attention")

    def on_epoch_end(self, epoch, logs=None):
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
                weights[row, : len(output), : len(source)], self.labels(source), self.labels(output)
            )
            images.append(image)
        with self.writer.as_default(step=global_step(self.model)):
            for row, image in enumerate(images):
                tf.summary.image(f"sentence_{row}", image[None, :, :, :3])
        self.writer.flush()


@dataclasses.dataclass(frozen=True)
class Cadence:
    """How often evaluation runs: every `steps` train steps or `minutes` of
    training (one of the two)."""

    steps: int = None
    minutes: float = None

    def __str__(self):
        return f"every {self.steps} steps" if self.steps else f"every {self.minutes:g} min"


def parse_cadence(text, budget_minutes=None, periods=6, open_ended_minutes=10.0):
    """`--eval-every` -> Cadence: "500" (steps), "5m" or "5min" (minutes), or
    "auto": `periods` evaluations over a `budget_minutes` budget, else every
    `open_ended_minutes`."""
    text = str(text).strip().lower()
    if text == "auto":
        return Cadence(minutes=budget_minutes / periods if budget_minutes else open_ended_minutes)
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(m|min|minutes?)?", text)
    if not match or float(match.group(1)) <= 0 or (not match.group(2) and "." in match.group(1)):
        raise ValueError(
            f"`eval_every` must be a number of steps (e.g. 500), minutes (e.g. 5m) or 'auto'; got {text!r}."
        )
    if match.group(2):
        return Cadence(minutes=float(match.group(1)))
    return Cadence(steps=int(match.group(1)))


class EvaluationPeriods(keras.callbacks.Callback):
    """Turns keras epochs into evaluation periods of a step or time cadence.

    Fit one pass over a dataset of several data epochs (e.g.
    `bucketed_pair_dataset(..., epochs=N)`) with `steps_per_epoch` set to its
    batch count: this callback ends each keras epoch after `cadence` (so
    validation, `on_epoch_end` callbacks such as checkpoints, samples and
    attention maps, and TensorBoard's epoch curves come at that cadence, not
    at every pass over a small data set), and ends `fit` after `total_steps`.

    Args:
        cadence: a `Cadence`.
        total_steps: the global step at which training ends, or None.
        show: print a line per period (step, data epoch, logs).
        steps_per_epoch: batches per data epoch, for the printed line.
        clock: seconds, e.g. `time.monotonic` (the default).
    """

    def __init__(self, cadence, total_steps=None, show=True, steps_per_epoch=None, clock=time.monotonic):
        super().__init__()
        self.cadence, self.total_steps = cadence, total_steps
        self.show, self.steps_per_epoch, self.clock = show, steps_per_epoch, clock
        self.periods = 0

    def on_train_begin(self, logs=None):
        self._start_period()

    def _start_period(self):
        self._period_step, self._period_time = global_step(self.model), self.clock()

    def on_train_batch_end(self, batch, logs=None):
        step = global_step(self.model)
        if self.total_steps is not None and step >= self.total_steps:
            self.model.stop_training = True
        elif self.cadence.steps and step - self._period_step >= self.cadence.steps:
            end_epoch_early(self.model)
        elif self.cadence.minutes and self.clock() - self._period_time >= 60.0 * self.cadence.minutes:
            end_epoch_early(self.model)

    def on_epoch_end(self, epoch, logs=None):
        continue_after_epoch(self.model)
        self.periods += 1
        if self.show:
            step = global_step(self.model)
            where = f" (data epoch {step / self.steps_per_epoch:.2f})" if self.steps_per_epoch else ""
            shown = ", ".join(f"{k} {v:.4g}" for k, v in (logs or {}).items() if np.ndim(v) == 0)
            print(f"step {step}{where}: {shown}", flush=True)
        self._start_period()


class StepTimer(keras.callbacks.Callback):
    """Wall time inside train steps (from each batch's begin to its end,
    the first batch of a shape with its tracing or compilation), and of the
    whole `fit`: `train_step_share` says how much of `fit` was training."""

    def __init__(self):
        super().__init__()
        self.train_step_seconds = 0.0
        self.fit_seconds = 0.0
        self.steps = 0

    def on_train_begin(self, logs=None):
        self._fit_start = time.monotonic()

    def on_train_batch_begin(self, batch, logs=None):
        self._batch_start = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        # keras leaves the step's outputs on the device; reading the loss
        # waits for the step to finish, as the progress bar would.
        if logs and "loss" in logs:
            float(logs["loss"])
        self.train_step_seconds += time.monotonic() - self._batch_start
        self.steps += 1

    def on_train_end(self, logs=None):
        self.fit_seconds = time.monotonic() - self._fit_start

    @property
    def train_step_share(self):
        return self.train_step_seconds / self.fit_seconds if self.fit_seconds else 0.0


class StepTensorBoard(keras.callbacks.TensorBoard):
    """keras' TensorBoard callback with epoch curves at the global step, so
    that evaluation periods, resumed runs and batch-level curves share one
    x-axis (keras writes them at the epoch index)."""

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(global_step(self.model), logs)
