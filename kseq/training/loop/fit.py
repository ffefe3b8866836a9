"""`Fit`: the one fit driver every task uses, `model.fit` that a kill
cannot undo.

Evaluation runs every data epoch's end, or every so many steps or minutes
(`eval_every`), so that an epoch of hours is evaluated and logged inside
the epoch; saves (`ResumableBackup`: the weights, the optimizer, the
stopping callbacks' state and the data position, published together) come
at every evaluation and every `save_every` steps. The same command started
again goes on from the last save and ends as the uninterrupted run would,
because the data's order comes from the position (`fit.position`, which
the training pipeline reads) and the batches already trained are skipped.
SIGTERM saves and exits (`SaveOnPreemption`). `train_once` records a
model's training as done (`kseq.training.checkpoints.phases`) once the
weights the later steps use are written, and only then deletes the
backup: a restart after training loads those weights instead of training
again. Under it, `CadencedFit` cuts one `model.fit` into the periods.
"""

import os
import shutil
from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf

from kseq.training.checkpoints.resume import ResumableBackup, TrainingPosition
from kseq.training.config.warm_start import TRAINED_WEIGHTS, keep_trained
from kseq.training.loop.cadenced_fit import CadencedFit, Trained
from kseq.training.loop.stopping import KeepBest
from kseq.training.progress import Cadence, batches_trained, parse_cadence
from kseq.training.reporting.decisions import as_metrics

NON_FINITE_HINT = "lower --learning-rate, or clip gradients with --clipnorm"


class Fit:
    """Fits for at most `epochs` and `max_minutes` (counting the runs before
    a resume), evaluated and saved on a cadence; with a `monitor`, keeps the
    weights of the best evaluation and stops after `patience` evaluations
    without a better one (0: never).

    Build the training data from `fit.position`: `epoch_ordered_batches(...,
    position, ..., epochs=epochs)`, a stream from files
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

    def __init__(self, workdir: str, eval_every: str | Cadence = "epoch", save_every: int | str = "epoch",
                 max_minutes: float | None = None, monitor: str | None = None, mode: str = "min",
                 patience: int = 0) -> None:
        self.workdir, self.backup_dir = workdir, os.path.join(workdir, "backup")
        self.resuming = ResumableBackup.saved_state(self.backup_dir)
        self.position = TrainingPosition()
        self.best = monitor and KeepBest(monitor, os.path.join(workdir, "best"), mode=mode, patience=patience)
        self.cadence = eval_every if isinstance(eval_every, Cadence) else parse_cadence(eval_every, max_minutes)
        self.save_every, self.max_minutes = save_every, max_minutes
        self.history = None

    def fit(self, model: keras.Model, train: tf.data.Dataset, valid: tf.data.Dataset, epochs: int,
            logging: Sequence[keras.callbacks.Callback] = (), stopping: Sequence[keras.callbacks.Callback] = (),
            batches: str | None = None, verbose: bool = True) -> dict:
        """Trains on `train`, validated on `valid` at each evaluation, with the
        chief's `logging` callbacks (scores, curves: they run before the best
        evaluation is chosen and the backup saves) and `stopping` ones (their
        state is saved with the backup's). `batches` describes an epoch's
        batches in the opening line; `verbose` False prints no line per
        evaluation. With a `monitor` the model ends with the best
        evaluation's weights. `fit.history` holds keras' history.

        Args:
            model: the compiled model.
            train: the training batches, built from `fit.position`.
            valid: the validation batches.
            epochs: data epochs at most.
            logging: the chief's callbacks. Default none.
            stopping: callbacks whose state the backup keeps. Default none.
            batches: a description of an epoch's batches for the opening line;
                None (default): the count, where known.
            verbose: print a line per evaluation. Default True.

        Returns:
            metrics.json's entries on the training.

        Raises:
            ValueError: the data's epochs differ from `epochs`, or one epoch
                of it has no known length.
        """
        train = self._all_epochs(train, epochs)
        per_epoch = self.position.steps_per_epoch  # None for streamed data: it ends when the position says so
        run = CadencedFit(self.workdir, self.position, self.cadence, per_epoch and per_epoch * epochs, per_epoch,
                          self.save_every, self.max_minutes, self.resuming, NON_FINITE_HINT, show=bool(verbose))
        saves = "" if self.save_every == "epoch" else f", saves every {self.save_every} steps"
        batches = batches or (per_epoch and f"{per_epoch} batches")
        print(f"evaluation and checkpoints {self.cadence}{saves}; at most {epochs} epochs"
              f"{f' of {batches}' if batches else ''}")
        carries = getattr(model, "carry_state", False) and hasattr(model, "carried_state")
        carried = [CarriedStreams(self.position)] if carries else []
        best = [self.best] if self.best else []
        self.history = run.fit(model, train, valid, logging=logging, stopping=[*best, *stopping, *carried])
        self.resuming = run.resuming
        return {**run.report(model), **self._best_entries(),
                "resumed_from_epoch": self.resuming["epoch"] if self.resuming else None}

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


def train_once(phases, name, fit, train, options=None, build=None, chief=True, clock=None):
    """The `Trained` of phase `name`, trained once.

    The first time, `train()` returns it; with `options`, the chief writes
    its weights to the logdir (`keep_trained`, what `--init-from` reads);
    then the phase is recorded with its metrics (the decisions among them),
    whether it decodes with XLA and, with a `clock`, the run's seconds so
    far; then `fit`'s backup is released. After a restart, the record's
    metrics come back with the model `build()` makes, loaded with those
    weights (or no model, without `options`).

    Args:
        phases: the run's `kseq.training.checkpoints.Phases`.
        name: the phase's name.
        fit: the `Fit` that trains it (its backup is released here).
        train: `() -> Trained`.
        options: the task's options (their `logdir` holds the weights), or
            None to keep no weights.
        build: `() -> model` (compiled) to load the weights into.
        chief: whether this process writes the logdir.
        clock: `() -> seconds` recorded as `wall_seconds`.

    Returns:
        `Trained`, its decisions folded into its metrics.
    """
    record = phases.get(name)
    if record is None:
        trained = train()
        if options is not None and chief:
            keep_trained(options, trained.model)
        metrics = {**trained.metrics, **as_metrics(trained.decisions)}
        entry = {"metrics": metrics, "decode_xla": trained.decode_xla}
        phases.record(name, {**entry, "wall_seconds": clock()} if clock else entry)
        fit.release()  # only now: a kill before the record resumes from the backup
        return Trained(trained.model, [], metrics, trained.decode_xla)
    fit.release()  # killed between the record and the release
    model = None
    if options is not None:
        model = build()
        model.load_weights(os.path.join(options.logdir, TRAINED_WEIGHTS))
    print(f"training: done before this run; {name}: trained before this run (recorded in {phases.path})")
    return Trained(model, [], record["metrics"], record.get("decode_xla", False))
