"""`model.fit` on an evaluation cadence that survives a kill: the callbacks
a task trains with, in the order they must run, and what they measured."""

import dataclasses
import os
import shutil

import tensorflow as tf

from kseq.training.checkpoints.preemption import SaveOnPreemption
from kseq.training.checkpoints.resume import ResumableBackup
from kseq.training.devices.distribution import WorkersAgree, workers
from kseq.training.devices.xla import StableFunctionNames
from kseq.training.loop.callbacks import NonFiniteLoss, StopOnNonFiniteLoss, TimeLimit
from kseq.training.loop.periods import (
    DataEpochsCurve,
    EvaluationPeriods,
    FirstStepLine,
    ProgressLine,
    StepTimer,
    data_epochs,
    global_step,
)

# fit's epochs and steps for data of unknown length.
UNBOUNDED = 2**31 - 1


class CadencedFit:
    """One pass of `fit` over a pipeline of all epochs, cut into evaluation
    periods (`EvaluationPeriods`), timed (`StepTimer`), bounded in minutes
    (`TimeLimit`, counting the runs before a resume) and saved every
    `save_every` steps and at every period (`ResumableBackup`), so that the
    same command started again continues a killed run; SIGTERM saves the
    step and exits (`SaveOnPreemption`); a progress line every half minute
    (`ProgressLine`). The backup stays after `fit` until
    `release()`.

    Args:
        workdir: the run's folder; the backup goes to `<workdir>/backup`.
        position: the `TrainingPosition` the train pipeline reads.
        cadence: a `kseq.training.loop.periods.Cadence`.
        total_steps: the batches of all epochs, or None for streamed data
            (`kseq.data.streaming`), which ends when `position` says so.
        steps_per_epoch: batches per data epoch, or None for streamed data.
        save_every: steps between saves.
        max_minutes: the training budget, or None.
        resuming: the backup's saved state (`ResumableBackup.saved_state`), or None.
        non_finite_hint: what to try when the loss is not finite.
        show: print a line per evaluation period.
    """

    def __init__(self, workdir, position, cadence, total_steps, steps_per_epoch, save_every, max_minutes,
                 resuming, non_finite_hint, show=True):
        self.workdir, self.backup_dir = workdir, os.path.join(workdir, "backup")
        self.backup = ResumableBackup(self.backup_dir, position, save_freq=save_every, steps_position=True,
                                      delete_at_end=False)
        self.timer = StepTimer()
        self.periods = EvaluationPeriods(cadence, total_steps, show=show, steps_per_epoch=steps_per_epoch,
                                         position=position)
        self.total_steps, self.steps_per_epoch, self.position = total_steps, steps_per_epoch, position
        self.resuming = resuming
        spent = resuming["train_seconds"] if resuming else 0.0
        self.limits = [TimeLimit(max_minutes, spent_seconds=spent), StopOnNonFiniteLoss(non_finite_hint),
                       ProgressLine(budget_minutes=max_minutes, spent_seconds=spent, position=position,
                                    steps_per_epoch=steps_per_epoch)]
        self.curve = DataEpochsCurve(position, steps_per_epoch)

    def fit(self, model, train, valid, logging=(), stopping=()):
        """Runs `model.fit` over the periods with the task's callbacks, in the order they must run.

        Stopping runs after logging (a period's line shows its scores) and
        before the periods end and the backup saves (a period counts as
        saved once its logs are written); with several workers their
        decisions are made one after every other decision of a step
        (`WorkersAgree`); nothing traces after that before the steps
        compile (`StableFunctionNames`).

        Args:
            model: the compiled model.
            train: the training batches of all epochs.
            valid: the validation batches.
            logging: the chief's callbacks (scores, curves, checkpoints).
                Default none.
            stopping: callbacks such as `KeepBest`, whose state is saved and
                restored with the backup's. Default none.

        Returns:
            keras' `History`.

        Raises:
            SystemExit: the loss was not finite; the last save is kept.
        """
        several = workers(model.distribute_strategy) > 1
        agreement = [WorkersAgree(self.position, self.limits[0])] if several else []
        callbacks = [self.timer, *self.limits, FirstStepLine(), self.curve, *logging, *stopping, self.periods,
                     *agreement, self.backup, SaveOnPreemption(self.backup, self.workdir), StableFunctionNames()]
        self.backup.participants = [callback for callback in stopping if hasattr(callback, "save_state")]
        self.backup.restore(model.distribute_strategy)
        self.resuming = self.backup.restored  # the workers may have agreed on an older save
        self.limits[0].spent_seconds = self.limits[-1].spent_seconds = (
            self.resuming["train_seconds"] if self.resuming else 0.0)
        # keras epochs are evaluation periods, each ended by `EvaluationPeriods`,
        # which also ends fit; streamed data has no known length, hence the bound.
        bound = self.total_steps or UNBOUNDED
        # A save made after the last batch: fit restores it and runs no epoch (an
        # epoch over data with nothing left would still count a step).
        epochs = self.resuming["epoch"] if self._saved_at_the_end() else bound
        try:
            return model.fit(train, validation_data=counted(valid), epochs=epochs, steps_per_epoch=bound,
                             callbacks=callbacks, verbose=0, shuffle=False)
        except NonFiniteLoss as error:
            raise SystemExit(f"{error}\nThe last save is kept in {self.backup_dir}; delete it to start over.")

    def _saved_at_the_end(self):
        if not self.resuming:
            return False
        if self.total_steps is not None:
            return self.resuming.get("batches", self.resuming["step"]) >= self.total_steps
        place = self.resuming.get("data")
        return bool(place) and self.position.epochs is not None and place["epoch"] >= self.position.epochs

    def release(self):
        """Deletes the backup: call it once what training produced is safely
        written (e.g. `kseq.training.checkpoints.phases`); until then a restart resumes
        training from its last save."""
        shutil.rmtree(self.backup_dir, ignore_errors=True)

    def report(self, model):
        """Gives metrics.json's entries on how training went.

        Args:
            model: the trained model.

        Returns:
            {"train_seconds", "steps", "epochs_run", "evaluations",
            "resumed_from_step", "train_step_seconds", "fit_seconds"}.
        """
        return {
            "train_seconds": round(self.backup.train_seconds, 1),
            "steps": global_step(model),
            "epochs_run": round(data_epochs(model, self.position, self.steps_per_epoch), 3),
            "evaluations": self.periods.periods,
            "resumed_from_step": self.resuming["step"] if self.resuming else None,
            "train_step_seconds": round(self.timer.train_step_seconds, 1),
            "fit_seconds": round(self.timer.fit_seconds, 1),
        }


def counted(dataset):
    """Makes a dataset's length known, counting it once where tf.data cannot tell it.

    keras reads a dataset of unknown length (bucketed batches) to its end
    and then warns that the input "ran out of data", at every evaluation.

    Args:
        dataset: a `tf.data.Dataset`, a distributed dataset, or None.

    Returns:
        `dataset` with its cardinality asserted; a distributed dataset or
        None as it is.
    """
    if isinstance(dataset, tf.data.Dataset) and int(dataset.cardinality()) == tf.data.UNKNOWN_CARDINALITY:
        return dataset.apply(tf.data.experimental.assert_cardinality(sum(1 for _ in dataset)))
    return dataset


@dataclasses.dataclass
class Trained:
    """What a task's `train` returns, the same on every worker: the model
    with the weights to test and export, the decisions made on the way
    (`kseq.training.reporting.decisions.Decision`), metrics.json's training part, and
    whether decoding compiles with XLA."""

    model: object
    decisions: list
    metrics: dict
    decode_xla: bool = False
