"""The train curves of every few optimizer steps: the loss, the learning
rate, examples or tokens a second and the gradient's global norm, in
TensorBoard's `train` run at the global step, beside keras' curves of each
evaluation period."""

import json
import math
import os
import statistics
import time
from typing import NamedTuple

import keras
import tensorflow as tf

from kseq.training.config.options import AUTO
from kseq.training.loop.periods import PROGRESS_SECONDS
from kseq.training.loop.train_totals import TrainTotals
from kseq.training.progress import batches_trained
from kseq.training.reporting.decisions import Decision
from kseq.training.reporting.tensorboard import last_step

# "auto" gives a run at least this many points: a smooth curve, well within
# the 1,000 points a curve TensorBoard shows (it samples down to those).
AUTO_POINTS = 300
# "auto" measures the step rate over at least this many steps and seconds
# after the first step (which traces), or this long at most.
WARMUP_STEPS, WARMUP_SECONDS, LONGEST_WARMUP_SECONDS = 10, 10.0, 60.0


def auto_log_every(steps_per_second, expected_steps=None, timed_steps=0):
    """Chooses the steps between two points of the train curves.

    As many as `PROGRESS_SECONDS` take (the progress lines' cadence, so a
    long run's event files grow by a point a line), and fewer where the
    run would otherwise get under `AUTO_POINTS` points; rounded down to
    1, 2 or 5 times a power of ten.

    Args:
        steps_per_second: the measured rate; None where no step was timed.
        expected_steps: the step the run is expected to end at; None where unknown.
        timed_steps: the steps the rate was measured over, for the reason.

    Returns:
        The `Decision` "log_every".

    Example:
    >>> auto_log_every(2.0, expected_steps=900, timed_steps=20).value
    2
    >>> auto_log_every(50.0, expected_steps=10**6).value
    1000
    """
    bounds = {}
    if steps_per_second:
        bounds[f"a point at least every {PROGRESS_SECONDS:g} s, as the progress lines, at {steps_per_second:.3g} "
               f"steps/s (the median of {timed_steps} steps)"] = steps_per_second * PROGRESS_SECONDS
    if expected_steps:
        bounds[f"{AUTO_POINTS} points or more over the ~{expected_steps:,} steps expected"] = \
            expected_steps / AUTO_POINTS
    if not bounds:
        return Decision("log_every", 1, "no step timed and no length known: every step")
    reason = min(bounds, key=bounds.get)
    return Decision("log_every", round_down(bounds[reason]), reason)


def round_down(value):
    """Rounds down to 1, 2 or 5 times a power of ten, at least 1.

    Args:
        value: a positive number.

    Returns:
        An int.

    Example:
    >>> [round_down(v) for v in (0.3, 3, 75, 1000)]
    [1, 2, 50, 1000]
    """
    if value < 1:
        return 1
    power = 10 ** math.floor(math.log10(value) + 1e-9)
    return max(m * power for m in (1, 2, 5) if m * power <= value * (1 + 1e-9))


class Snapshot(NamedTuple):
    """The totals at the end of a step: `TrainTotals.read`'s, the seconds
    inside train steps and the learning rate."""

    step: int
    loss_sum: float
    loss_weight: float
    units: float
    norms: float
    seconds: float
    learning_rate: float


class StepCurves(keras.callbacks.Callback):
    """Writes the train curves every `every` optimizer steps, at the global step.

    At each multiple of `every`: "loss" (the mean since the point before,
    weighted as keras' logged loss), "learning_rate" (the optimizer's: its
    schedule's value at the step), "examples_per_second" or
    "tokens_per_second" (over the seconds inside train steps since the
    point before, evaluations left out) and, where the optimizer clips and
    keeps the norms (`FusedAdam.gradient_norm_sum`), "global_norm" (their
    mean since the point before, taken before clipping). Between points a
    step costs two clock readings.

    "auto" times the steps after the first (which traces) until
    `WARMUP_STEPS` and `WARMUP_SECONDS` (or the first save, or the end),
    keeping each step's totals, then asks `expected_steps` how long the run
    is and decides (`auto_log_every`), writing the kept steps that fall on
    the cadence.

    The cadence is saved with the backup (`Fit` saves a logging callback's
    `save_state`): a resumed run keeps it, and writes no point at or before
    the last one the train run's event files hold, so points a killed run
    wrote after its last save are not written twice.

    Args:
        board: the run's `StepTensorBoard`, whose train writer these curves
            share; put this callback before it (it closes the writer).
        every: steps between points, or "auto" (default).
        expected_steps: `(model, steps_per_second) -> int | None` (such as
            `Fit.expected_steps`) for "auto"; None: unknown.
        units: what the rate counts, "examples" (default) or "tokens".
        on_decided: `(Decision) -> None`, called when this run decides the
            cadence rather than a resumed run keeping it (e.g. to write
            HParams with it); None (default) for nothing.
    """

    FILE = "step_curves.json"

    def __init__(self, board, every=AUTO, expected_steps=None, units="examples", on_decided=None):
        super().__init__()
        self.board, self.every, self.expected_steps = board, every, expected_steps
        self.units, self.on_decided = units, on_decided
        self.decision, self.resumed, self.totals = None, False, None

    def save_state(self, folder):
        """Writes the cadence into a save being written (`ResumableBackup`).

        "auto" decides here at the latest, from the steps timed so far, so
        that the points up to the save are written (each point is flushed
        as written): a run resumed from the save writes later ones only.

        Args:
            folder: the save's folder.
        """
        if self.decision is None and self.totals is not None:
            self._decide_auto()
        saved = {"log_every": self.decision.value, "reason": self.decision.reason} if self.decision else {}
        with open(os.path.join(folder, self.FILE), "w") as f:
            json.dump(saved, f)

    def restore_state(self, folder):
        """Reads a save's cadence, if one was decided when it was made.

        Args:
            folder: the save's folder.
        """
        self.resumed, path = True, os.path.join(folder, self.FILE)
        if os.path.exists(path):
            with open(path) as f:
                saved = json.load(f)
            self.decision = Decision("log_every", saved["log_every"], saved["reason"]) if saved else None

    def on_train_begin(self, logs=None):
        self.written_up_to = last_step(self.board.train_dir, "loss") if self.resumed else None
        kept, self.decision = self.decision, None
        if self.every != AUTO:
            self._decide(Decision("log_every", int(self.every), "--log-every"), new=kept is None)
        elif kept is not None:
            self._decide(kept, new=False)
        self.totals, self.kept_steps, self.batch_seconds = None, [], []
        self.seconds, self.period_ended = 0.0, False
        self.accumulation = getattr(self.model.optimizer, "gradient_accumulation_steps", None) or 1

    def on_train_batch_begin(self, batch, logs=None):
        if self.totals is None:  # by now the backup restored the step and keras zeroed its metrics
            self.totals = TrainTotals(self.model, self.units)
            self.batches = batches_trained(self.model)
            self.last = self._snapshot(self.batches // self.accumulation)
        self.began = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        took = time.monotonic() - self.began
        self.seconds += took
        self.batches += 1
        if self.decision is None:
            self.batch_seconds.append(took)
        if self.batches % self.accumulation:
            return
        step = self.batches // self.accumulation
        if self.decision is None:
            self.kept_steps.append(self._snapshot(step))
            if self._timed_enough():
                self._decide_auto()
        elif step % self.decision.value == 0:
            self._write(self._snapshot(step))

    def on_epoch_begin(self, epoch, logs=None):
        self.period_ended = False

    def on_test_begin(self, logs=None):
        # fit's validation: keras zeroes the train metrics right after this.
        if self.totals is not None:
            self.totals.end_period()
            self.period_ended = True

    def on_epoch_end(self, epoch, logs=None):
        if self.totals is not None and not self.period_ended:  # no validation: zeroed at the next epoch
            self.totals.end_period()

    def on_train_end(self, logs=None):
        if self.decision is None:
            self._decide_auto()
        self.resumed = False

    def _timed_enough(self):
        after_first = self.batch_seconds[1:]
        return (len(after_first) >= WARMUP_STEPS and sum(after_first) >= WARMUP_SECONDS) or \
            sum(after_first) >= LONGEST_WARMUP_SECONDS

    def _decide_auto(self):
        # The first batch traces; where a save comes right after it, its rate is all there is (low: more points).
        timed = self.batch_seconds[1:] or self.batch_seconds
        rate = 1.0 / (statistics.median(timed) * self.accumulation) if timed else None
        expected = self.expected_steps(self.model, rate) if self.expected_steps else None
        self._decide(auto_log_every(rate, expected, len(timed)), new=True)
        for snapshot in self.kept_steps:
            if snapshot.step % self.decision.value == 0:
                self._write(snapshot)
        self.kept_steps = []

    def _decide(self, decision, new):
        self.decision = decision
        print(decision, flush=True)
        if new and self.on_decided:
            self.on_decided(decision)

    def _snapshot(self, step):
        optimizer = getattr(self.model.optimizer, "inner_optimizer", self.model.optimizer)
        rate = float(keras.ops.convert_to_numpy(optimizer.learning_rate))
        return Snapshot(step, *self.totals.read(), self.seconds, rate)

    def _write(self, point):
        before, self.last = self.last, point
        if self.written_up_to is not None and point.step <= self.written_up_to:
            return
        values = {"learning_rate": point.learning_rate}
        if point.loss_weight > before.loss_weight:
            values["loss"] = (point.loss_sum - before.loss_sum) / (point.loss_weight - before.loss_weight)
        if point.seconds > before.seconds:
            values[f"{self.units}_per_second"] = (point.units - before.units) / (point.seconds - before.seconds)
        if self.totals.norms is not None and point.step > before.step:
            values["global_norm"] = (point.norms - before.norms) / (point.step - before.step)
        with self.board.train_writer.as_default(step=point.step):
            for name, value in values.items():
                tf.summary.scalar(name, value)
