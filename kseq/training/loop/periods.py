"""Training on a step or time cadence: evaluation periods instead of data
epochs, where the time goes, and curves at the global step."""

import os
import time

import keras
import numpy as np

from kseq._compat import continue_after_epoch, end_epoch_early, tensorboard_train_writer
from kseq.training.progress import batches_trained, data_epochs, global_step


class EvaluationPeriods(keras.callbacks.Callback):
    """Turns keras epochs into evaluation periods of a step or time cadence.

    Fit one pass over a dataset of several data epochs (e.g.
    `bucketed_pair_dataset(..., epochs=N)`) with `steps_per_epoch` set to its
    batch count: this callback ends each keras epoch after `cadence` (so
    validation, `on_epoch_end` callbacks such as checkpoints, samples and
    attention maps, and TensorBoard's epoch curves come at that cadence, not
    at every pass over a small data set), and ends `fit` after `total_steps`.

    Args:
        cadence: a `Cadence` (its steps are updates; a period of steps ends
            at each multiple of them, so a resumed run evaluates at the
            steps an uninterrupted one does).
        total_steps: the batches trained (`batches_trained`) at which
            training ends, or None.
        show: print a line per period (step, data epoch, logs).
        steps_per_epoch: batches per data epoch, for the printed line.
        clock: seconds, e.g. `time.monotonic` (the default).
        position: the `TrainingPosition` the data reads, or None: training
            ends when a streamed pipeline has no batch left, a cadence of
            epochs follows it, and the printed line says how far into the
            data the run is.
    """

    def __init__(self, cadence, total_steps=None, show=True, steps_per_epoch=None, clock=time.monotonic,
                 position=None):
        super().__init__()
        self.cadence, self.total_steps = cadence, total_steps
        self.show, self.steps_per_epoch, self.clock = show, steps_per_epoch, clock
        self.position = position
        self.periods = 0
        self.evaluation_seconds = None  # the last evaluation's, from its period's last batch to the next batch

    def on_train_begin(self, logs=None):
        self._period_step = None  # read at the first batch: a backup restores the step after this runs
        self._evaluation_began = None

    def _finished(self, batches):
        return (self.total_steps is not None and batches >= self.total_steps) or \
            (self.position is not None and self.position.exhausted(batches))

    def _start_period(self):
        self._period_step, self._period_time = global_step(self.model), self.clock()
        self._period_epoch = self._data_epoch()

    def _data_epoch(self):
        """The data epoch in progress, for a cadence of epochs; None otherwise."""
        if not self.cadence.epoch:
            return None
        if self.position is None:
            raise ValueError("an evaluation cadence of epochs needs the `position` of the data")
        return self.position.where(batches_trained(self.model))[0]

    def on_train_batch_begin(self, batch, logs=None):
        if self._period_step is None:
            self._start_period()
        if self._evaluation_began is not None:
            self.evaluation_seconds = self.clock() - self._evaluation_began
            self._evaluation_began = None

    def on_train_batch_end(self, batch, logs=None):
        step = global_step(self.model)
        if self._finished(batches_trained(self.model)):
            self.model.stop_training = True
        elif self.cadence.steps and step // self.cadence.steps > self._period_step // self.cadence.steps:
            end_epoch_early(self.model)
        elif self.cadence.minutes and self._time_is_up():
            end_epoch_early(self.model)
        elif self.cadence.epoch and self._data_epoch() > self._period_epoch:
            end_epoch_early(self.model)

    def _time_is_up(self):
        now = self.clock()
        if now - self._period_time < self.cadence.period_seconds(self.evaluation_seconds):
            return False
        if self.cadence.evaluation_share:
            self._evaluation_began = now
        return True

    def on_epoch_end(self, epoch, logs=None):
        continue_after_epoch(self.model)
        self.periods += 1
        if self.show:
            step = global_step(self.model)
            epochs = data_epochs(self.model, self.position, self.steps_per_epoch)
            where = f" (data epoch {epochs:.2f})" if epochs is not None else ""
            shown = ", ".join(f"{k} {v:.4g}" for k, v in (logs or {}).items() if np.ndim(v) == 0)
            print(f"step {step}{where}: {shown}", flush=True)
        self._start_period()


class DataEpochsCurve(keras.callbacks.Callback):
    """Adds "data_epochs" (how far into the data, `data_epochs`) to each
    period's logs; put it before the TensorBoard callback, which then draws
    it beside the loss.

    Args:
        position: the `TrainingPosition` of the training data, or None (default).
        steps_per_epoch: batches per data epoch, or None (default) for
            streamed data or where `position` tells.
    """

    def __init__(self, position=None, steps_per_epoch=None):
        super().__init__()
        self.position, self.steps_per_epoch = position, steps_per_epoch

    def on_epoch_end(self, epoch, logs=None):
        epochs = data_epochs(self.model, self.position, self.steps_per_epoch)
        if logs is not None and epochs is not None:
            logs["data_epochs"] = epochs


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


# Seconds between the progress lines: the cadence TensorBoard's train curves
# match or beat (`kseq.training.loop.step_curves`).
PROGRESS_SECONDS = 30.0


class ProgressLine(keras.callbacks.Callback):
    """Prints a line every `every_seconds` of training: the global step, the
    loss (keras' running mean over the period), steps a second since the
    last line, and the minutes left of a `budget_minutes` budget (counted
    from `spent_seconds` already trained, e.g. before a resume). With
    `fit(verbose=0)` and evaluation periods of minutes, the user sees the
    run move between evaluations.

    With a `position` (or `steps_per_epoch`) each line says how far into
    the data the run is.

    Args:
        every_seconds: seconds between lines. Default 30.
        budget_minutes: the training budget, or None (default) for none.
        spent_seconds: seconds trained before this run. Default 0.
        position: the `TrainingPosition`, or None (default).
        steps_per_epoch: batches per data epoch, or None (default).

    Example:
    >>> line = ProgressLine(every_seconds=30, budget_minutes=12, spent_seconds=60)
    >>> line.describe(step=250, loss=4.25, steps_per_second=3.2, elapsed=540.0, epochs=1.375)
    'step 250: loss 4.25, 3.2 steps/s, data epoch 1.38, 3.0 min of 12 left'
    """

    def __init__(self, every_seconds=PROGRESS_SECONDS, budget_minutes=None, spent_seconds=0.0, position=None,
                 steps_per_epoch=None):
        super().__init__()
        self.every_seconds, self.budget_minutes, self.spent_seconds = every_seconds, budget_minutes, spent_seconds
        self.position, self.steps_per_epoch = position, steps_per_epoch

    def on_train_begin(self, logs=None):
        self._started = self._last = time.monotonic()
        self._last_step = global_step(self.model)

    def on_train_batch_end(self, batch, logs=None):
        now = time.monotonic()
        if now - self._last < self.every_seconds or not logs or "loss" not in logs:
            return
        step = global_step(self.model)
        rate = (step - self._last_step) / (now - self._last)
        epochs = data_epochs(self.model, self.position, self.steps_per_epoch)
        print(self.describe(step, float(logs["loss"]), rate, self.spent_seconds + now - self._started, epochs),
              flush=True)
        self._last, self._last_step = now, step

    def describe(self, step, loss, steps_per_second, elapsed, epochs=None):
        """Writes the progress line for `step`.

        Args:
            step: the global step.
            loss: the running mean of the loss.
            steps_per_second: the rate since the last line.
            elapsed: seconds of training in all, runs before a resume included.
            epochs: how far into the data, in epochs; None (default) leaves it out.

        Returns:
            The line.
        """
        left = ""
        if self.budget_minutes:
            left = f", {max(self.budget_minutes - elapsed / 60, 0.0):.1f} min of {self.budget_minutes:g} left"
        where = f", data epoch {epochs:.2f}" if epochs is not None else ""
        return f"step {step}: loss {loss:.4g}, {steps_per_second:.1f} steps/s{where}{left}"


class FirstStepLine(keras.callbacks.Callback):
    """Prints when the first train step of a run ends, with the seconds
    since `fit` began (the data's first batches, tracing the step): how
    long a user waits before training moves."""

    def on_train_begin(self, logs=None):
        self._started, self._done = time.monotonic(), False

    def on_train_batch_end(self, batch, logs=None):
        if not self._done:
            self._done = True
            print(f"the first train step of this run (step {global_step(self.model)}) ended "
                  f"{time.monotonic() - self._started:.1f} s after fit began", flush=True)


class StepTensorBoard(keras.callbacks.TensorBoard):
    """keras' TensorBoard callback with epoch curves at the global step, so
    that evaluation periods, resumed runs and the train curves of every few
    steps (`kseq.training.loop.StepCurves`, which write through
    `train_writer`) share one x-axis (keras writes them at the epoch index)."""

    @property
    def train_dir(self):
        """The folder of the `train` run."""
        return os.path.join(self.log_dir, "train")

    @property
    def train_writer(self):
        """The `tf.summary` writer of the `train` run: made on first use, closed when `fit` ends."""
        return tensorboard_train_writer(self)

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(global_step(self.model), logs)
