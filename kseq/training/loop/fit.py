"""`Fit`: the one fit driver every task uses, `model.fit` that a kill
cannot undo.

One pass of `model.fit` over a pipeline of all epochs, cut into
evaluation periods (`EvaluationPeriods`): evaluation runs every data
epoch's end, or every so many steps or minutes (`eval_every`), so that an
epoch of hours is evaluated and logged inside the epoch; saves
(`ResumableBackup`: the weights, the optimizer, the stopping callbacks'
state and the data position, published together) come at every evaluation
and every `save_every` steps. The same command started again goes on from
the last save and ends as the uninterrupted run would, because the data's
order comes from the position (`fit.position`, which the training pipeline
reads) and the batches already trained are skipped. SIGTERM saves and
exits (`SaveOnPreemption`). `kseq.training.loop.trained.train_once` records
a model's training as done once the weights the later steps use are
written, and only then releases the backup.
"""

import os
import shutil
import time
from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf

from kseq.training.checkpoints.preemption import SaveOnPreemption
from kseq.training.checkpoints.resume import ResumableBackup, TrainingPosition
from kseq.training.devices.distribution import WorkersAgree, workers
from kseq.training.devices.xla import StableFunctionNames
from kseq.training.loop.anneal import anneal_decision, planned_anneal
from kseq.training.loop.callbacks import NonFiniteLoss, StopOnNonFiniteLoss, TimeLimit
from kseq.training.loop.periods import DataEpochsCurve, EvaluationPeriods, FirstStepLine, ProgressLine, StepTimer
from kseq.training.loop.stopping import KeepBest
from kseq.training.objectives.schedules import annealed_schedule
from kseq.training.progress import Cadence, batches_trained, data_epochs, global_step, parse_cadence

NON_FINITE_HINT = "lower --learning-rate, or clip gradients with --clipnorm"
# fit's epochs and steps for data of unknown length.
UNBOUNDED = 2**31 - 1


class Fit:
    """Fits for at most `epochs` and `max_minutes` (counting the runs before
    a resume), evaluated and saved on a cadence; with a `monitor`, keeps the
    weights of the best evaluation and stops after `patience` evaluations
    without a better one (0: never).

    Build the training data from `fit.position`: `epoch_ordered_batches(...,
    position, ..., epochs=epochs)`, `bucketed_pair_dataset(..., position=,
    epochs=)`, a stream from files
    (`kseq.data.streaming.streamed_examples(..., position, epochs=epochs)`,
    `streamed_pair_dataset`, a language model's
    `kseq.data.streams.streamed_stream_batches`), or one epoch's batches in
    a fixed order. A language model's carried state is kept
    (`CarriedStreams`). Create this object outside `strategy.scope()`.

    Args:
        workdir: the model's folder; its backup goes to `<workdir>/backup`.
        eval_every: "epoch" (each data epoch's end), steps ("500"), minutes
            ("5m"), "auto" (6 in `max_minutes`, fewer where each evaluation
            would take over `AUTO_EVALUATION_SHARE` of the time), or a `Cadence`.
        save_every: steps between saves, or "epoch": at evaluations only.
        max_minutes: the training budget, or None.
        monitor: the validation log key to keep the best of, e.g. "val_loss"
            or "val_accuracy"; None: the `stopping` callbacks decide.
        mode: "min" (a loss) or "max" (a score).
        patience: evaluations without improvement before stopping.
    """

    non_finite_hint = NON_FINITE_HINT  # what the error on a non-finite loss suggests

    def __init__(self, workdir: str, eval_every: str | Cadence = "epoch", save_every: int | str = "epoch",
                 max_minutes: float | None = None, monitor: str | None = None, mode: str = "min",
                 patience: int = 0) -> None:
        self.workdir, self.backup_dir = workdir, os.path.join(workdir, "backup")
        self.resuming = ResumableBackup.saved_state(self.backup_dir)
        self.position = TrainingPosition()
        self.best = monitor and KeepBest(monitor, os.path.join(workdir, "best"), mode=mode, patience=patience)
        self.cadence = eval_every if isinstance(eval_every, Cadence) else parse_cadence(eval_every, max_minutes)
        self.save_every, self.max_minutes = save_every, max_minutes
        self.history = self.anneal = None

    def fit(self, model: keras.Model, train: tf.data.Dataset, valid: tf.data.Dataset, epochs: int,
            logging: Sequence[keras.callbacks.Callback] = (), stopping: Sequence[keras.callbacks.Callback] = (),
            batches: str | None = None, verbose: bool = True) -> dict:
        """Trains on `train`, validated on `valid` at each evaluation, with the
        chief's `logging` callbacks (scores, curves: they run before the best
        evaluation is chosen and the backup saves) and `stopping` ones (their
        state is saved with the backup's). `batches` describes an epoch's
        batches in the opening line; `verbose` False prints no line per
        evaluation. With a `monitor` the model ends with the best
        evaluation's weights. An `Annealed` learning rate (`--anneal`) is
        planned to reach 0 where training ends (`BudgetAnneal`), and
        patience (the monitor's, or a `KeepBest` among `stopping`) starts
        the anneal instead of stopping. `fit.history` holds keras' history;
        the backup stays until `release()`.

        Args:
            model: the compiled model.
            train: the training batches, built from `fit.position`.
            valid: the validation batches.
            epochs: data epochs at most.
            logging: the chief's callbacks; those with `save_state` (the
                train curves' cadence) are saved with the backup too. Default none.
            stopping: callbacks whose state the backup keeps. Default none.
            batches: a description of an epoch's batches for the opening line;
                None (default): the count, where known.
            verbose: print a line per evaluation. Default True.

        Returns:
            metrics.json's entries on the training.

        Raises:
            ValueError: the data's epochs differ from `epochs`, or one epoch
                of it has no known length.
            SystemExit: the loss was not finite; the last save is kept.
        """
        train = self._all_epochs(train, epochs)
        per_epoch = self.position.steps_per_epoch  # None for streamed data: it ends when the position says so
        self._new_callbacks(per_epoch and per_epoch * epochs, per_epoch, show=bool(verbose))
        saves = "" if self.save_every == "epoch" else f", saves every {self.save_every} steps"
        batches = batches or (per_epoch and f"{per_epoch} batches")
        print(f"evaluation and checkpoints {self.cadence}{saves}; at most {epochs} epochs"
              f"{f' of {batches}' if batches else ''}\n{self.anneal_decision(model)}")
        carries = getattr(model, "carry_state", False) and hasattr(model, "carried_state")
        carried = [CarriedStreams(self.position)] if carries else []
        best = [self.best] if self.best else []
        self.anneal = planned_anneal(model, self.max_minutes, self.total_steps,
                                     clock=lambda: time.monotonic() - self.limits[0].start)
        for keeper in [*best, *stopping]:
            if isinstance(keeper, KeepBest):
                keeper.anneal = self.anneal
        anneal = [self.anneal] if self.anneal else []  # after stopping: patience may shorten its plan first
        self.history = self._fit_periods(model, train, valid, logging, [*best, *stopping, *carried, *anneal])
        return {**self._training_entries(model), **self._best_entries(), **(self.anneal.report() if anneal else {}),
                "resumed_from_epoch": self.resuming["epoch"] if self.resuming else None}

    def anneal_decision(self, model):
        """Says what the learning rate's anneal (`--anneal`) does in this run,
        once the training data is built from `fit.position`.

        Args:
            model: the compiled model.

        Returns:
            The `Decision` "lr_anneal" (`kseq.training.loop.anneal.anneal_decision`).
        """
        known = self.position.epochs is None or self.position.steps_per_epoch is not None
        return anneal_decision(annealed_schedule(model.optimizer), self.max_minutes, known)

    def _new_callbacks(self, total_steps, steps_per_epoch, show):
        """This call's backup, timer, periods, limits and curve: `total_steps`
        is the batches of all epochs, None (with `steps_per_epoch`) for
        streamed data, which ends when the position says so."""
        self.backup = ResumableBackup(self.backup_dir, self.position, save_freq=self.save_every,
                                      steps_position=True, delete_at_end=False)
        self.timer = StepTimer()
        self.periods = EvaluationPeriods(self.cadence, total_steps, show=show, steps_per_epoch=steps_per_epoch,
                                         position=self.position)
        self.total_steps, self.steps_per_epoch = total_steps, steps_per_epoch
        spent = self.resuming["train_seconds"] if self.resuming else 0.0
        self.limits = [TimeLimit(self.max_minutes, spent_seconds=spent), StopOnNonFiniteLoss(self.non_finite_hint),
                       ProgressLine(budget_minutes=self.max_minutes, spent_seconds=spent, position=self.position,
                                    steps_per_epoch=steps_per_epoch)]
        self.curve = DataEpochsCurve(self.position, steps_per_epoch)

    def _fit_periods(self, model, train, valid, logging, stopping):
        """Runs `model.fit` over the periods with the callbacks in the order they must run.

        Stopping runs after logging (a period's line shows its scores) and
        before the periods end and the backup saves (a period counts as
        saved once its logs are written); with several workers their
        decisions are made one after every other decision of a step
        (`WorkersAgree`); nothing traces after that before the steps
        compile (`StableFunctionNames`). Returns keras' `History`.
        """
        several = workers(model.distribute_strategy) > 1
        agreement = [WorkersAgree(self.position, self.limits[0], self.anneal)] if several else []
        callbacks = [self.timer, *self.limits, FirstStepLine(), self.curve, *logging, *stopping, self.periods,
                     *agreement, self.backup, SaveOnPreemption(self.backup, self.workdir), StableFunctionNames()]
        self.backup.participants = [callback for callback in (*logging, *stopping) if hasattr(callback, "save_state")]
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

    def expected_steps(self, model, steps_per_second=None):
        """Estimates the global step this training will end at, from what bounds it.

        The least of: the steps of all epochs where their batches are known;
        the steps so far over the share of the data's epochs they read
        (streamed data); the steps so far plus `steps_per_second` times the
        budget's seconds left. Call it while `fit` runs.

        Args:
            model: the model in training.
            steps_per_second: the rate the budget is spent at; None (default)
                leaves the budget out.

        Returns:
            An int, or None where nothing bounds the training.
        """
        step, accumulation = global_step(model), getattr(model.optimizer, "gradient_accumulation_steps", None) or 1
        estimates = [self.total_steps // accumulation] if self.total_steps else []
        epochs_read = data_epochs(model, self.position, self.steps_per_epoch)
        if not self.total_steps and self.position.epochs and epochs_read:
            estimates.append(step * self.position.epochs / epochs_read)
        left = self.limits[0].seconds_left()
        if left is not None and steps_per_second:
            estimates.append(step + steps_per_second * left)
        return round(min(estimates)) if estimates else None

    def _saved_at_the_end(self):
        if not self.resuming:
            return False
        if self.total_steps is not None:
            return self.resuming.get("batches", self.resuming["step"]) >= self.total_steps
        place = self.resuming.get("data")
        return bool(place) and self.position.epochs is not None and place["epoch"] >= self.position.epochs

    def _training_entries(self, model):
        """metrics.json's entries on how training went: {"train_seconds", "steps", "epochs_run",
        "evaluations", "resumed_from_step", "train_step_seconds", "fit_seconds"}."""
        return {
            "train_seconds": round(self.backup.train_seconds, 1),
            "steps": global_step(model),
            "epochs_run": round(data_epochs(model, self.position, self.steps_per_epoch), 3),
            "evaluations": self.periods.periods,
            "resumed_from_step": self.resuming["step"] if self.resuming else None,
            "train_step_seconds": round(self.timer.train_step_seconds, 1),
            "fit_seconds": round(self.timer.fit_seconds, 1),
        }

    def _best_entries(self):
        if not self.best:
            return {}
        state = self.best.state
        return {
            **{valid(key): value for key, value in state["best_logs"].items()},
            "best_epoch": state["best_evaluation"] if self.cadence.epoch else None,
            "best_evaluation": state["best_evaluation"],
            "best_step": state["best_step"],
            "evaluations": state["evaluations"],
            f"{valid(self.best.monitor)}_by_epoch": state["scores"],
            "stopped_early": state["stopped_early"],
        }

    def _all_epochs(self, train, epochs):
        """The training batches of every epoch left: `train` itself when
        `epoch_ordered_batches` or a streamed pipeline built it, else
        `train` as one epoch in a fixed order, repeated from the position on."""
        if self.position.epochs is not None:
            if self.position.epochs != epochs:
                raise ValueError(f"the training data holds {self.position.epochs} epochs; `fit` was asked for "
                                 f"{epochs}.")
            return train
        self.position.steps_per_epoch = int(train.cardinality())
        if self.position.steps_per_epoch <= 0:
            raise ValueError("the training data must have a known, non-zero number of batches (one epoch in a "
                             "fixed order), or be built with `epoch_ordered_batches`.")
        left = tf.data.Dataset.range(epochs).take_while(lambda index: self.position.epoch + index < epochs)
        return left.flat_map(lambda index: train.skip(tf.where(index == 0, self.position.skip, 0)))

    def release(self):
        """Deletes the backup (and the best weights' emptied folder), once what training produced is written."""
        shutil.rmtree(self.backup_dir, ignore_errors=True)
        shutil.rmtree(os.path.join(self.workdir, "best"), ignore_errors=True)


class CarriedStreams(keras.callbacks.Callback):
    """The train streams' state a language model carries from batch to
    batch (`RNNLanguageModel(carry_state=True)`), zeroed where each data
    epoch begins (and each window of streams read from files,
    `kseq.data.streams.streamed_stream_batches`, whose streams do not go
    on from the last window's) and kept with every save, so that a run
    resumed mid-epoch goes on with the state the uninterrupted run had there.

    Args:
        position: the `TrainingPosition` the streams are read from.
    """

    resets_train_streams = True  # in place of the model's reset at each of fit's epochs
    FILE = "carried_streams.npz"

    def __init__(self, position):
        super().__init__()
        self.position, self._restored = position, None

    def save_state(self, folder):
        """Writes the carried state into a save being written (`ResumableBackup`).

        Args:
            folder: the save's folder.
        """
        state = self.model.carried_state("train")
        np.savez(os.path.join(folder, self.FILE), *[v for layer in state for values in layer for v in values])

    def restore_state(self, folder):
        """Reads a save's carried state, set at the next batch; a save without one is skipped.

        Args:
            folder: the save's folder.
        """
        path = os.path.join(folder, self.FILE)
        if os.path.exists(path):  # a save made at an epoch's end needs none
            with np.load(path) as saved:
                self._restored = [saved[f"arr_{i}"] for i in range(len(saved.files))]

    def on_train_batch_begin(self, batch, logs=None):
        restored, self._restored = self._restored, None
        if self.position.where(batches_trained(self.model))[2] == 0:
            self.model.reset_streams("train")
        elif restored is not None:
            values = iter(restored)
            shape = self.model.carried_state("train")
            self.model.set_carried_state("train", [[[next(values) for _ in replicas] for replicas in layer]
                                                   for layer in shape])


def valid(key):
    """Names a validation log key as metrics.json does.

    Args:
        key: a keras log key, such as "val_loss".

    Returns:
        The key with its first "val_" made "valid_": "valid_loss".
    """
    return key.replace("val_", "valid_", 1)


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
