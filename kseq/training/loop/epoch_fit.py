"""`model.fit` over data epochs that a kill cannot undo: what the recipes
that train in epochs (classify, language_model, generate_reviews, reverse,
caption) share, on the same driver as translate (`CadencedFit`).

Evaluation runs at every data epoch's end by default, or every so many
steps or minutes (`eval_every`), so that an epoch of hours is evaluated and
logged inside the epoch; saves (`ResumableBackup`: the weights, the
optimizer, `KeepBest`'s best evaluation and patience count, published
together) come at every evaluation and every `save_every` steps. The same
command started again goes on from the last save and ends as the
uninterrupted run would, because the data's order comes from the epoch
(`kseq.data.epoch_order.epoch_ordered_batches`) and the batches already
trained are skipped. SIGTERM exits at once (`SaveOnPreemption`), saving
first where saves come by steps. `train_once` records a model's training
as done (`kseq.training.checkpoints.phases`) once the weights the later steps use are
written, and only then deletes the backup: a restart after training loads
those weights instead of training again.
"""

import os
import shutil

import keras
import numpy as np
import tensorflow as tf

from kseq.training.checkpoints.resume import ResumableBackup, TrainingPosition
from kseq.training.config.warm_start import TRAINED_WEIGHTS, keep_trained
from kseq.training.loop.cadenced_fit import CadencedFit, Trained
from kseq.training.loop.stopping import KeepBest
from kseq.training.progress import batches_trained, parse_cadence
from kseq.training.reporting.decisions import as_metrics

NON_FINITE_HINT = "lower --learning-rate, or clip gradients with --clipnorm"


class EpochFit:
    """Fits for at most `epochs` and `max_minutes` (counting the runs
    before a resume), keeping the weights of the best evaluation's `monitor`
    and stopping after `patience` evaluations without a better one (0:
    never).

    Build the training data from `position` with `epoch_ordered_batches(...,
    position, ..., epochs=epochs)` or stream it from files
    (`kseq.data.streaming.streamed_examples(..., position, epochs=epochs)`,
    a language model's `kseq.data.streams.streamed_stream_batches`):
    batches that a resumed run can skip; or give one epoch's batches in a
    fixed order. A language model's carried state is kept by
    `CarriedStreams`. Create this object outside `strategy.scope()`.

    Args:
        workdir: the model's folder; its backup goes to `<workdir>/backup`.
        monitor: the validation log key, e.g. "val_loss" or "val_accuracy".
        mode: "min" (a loss) or "max" (a score).
        patience: evaluations without improvement before stopping.
        max_minutes: the training budget, or None.
        eval_every: "epoch" (each data epoch's end), steps ("500") or
            minutes ("5m") between evaluations.
        save_every: steps between saves, or "epoch": at evaluations only.
    """

    def __init__(self, workdir, monitor="val_loss", mode="min", patience=0, max_minutes=None, eval_every="epoch",
                 save_every="epoch"):
        self.workdir, self.backup_dir = workdir, os.path.join(workdir, "backup")
        self.resuming = ResumableBackup.saved_state(self.backup_dir)
        self.position = TrainingPosition()
        self.best = KeepBest(monitor, os.path.join(workdir, "best"), mode=mode, patience=patience)
        self.cadence = parse_cadence(eval_every, max_minutes)
        self.save_every, self.max_minutes = save_every, max_minutes

    def fit(self, model, data, epochs, callbacks=(), verbose=2):
        """Trains on `data["train"]`, validated on `data["valid"]` at each
        evaluation, with `callbacks` (logging: they run before the best
        evaluation is chosen and the backup saves); `verbose` 0 prints no
        line per evaluation. The model ends with the best evaluation's
        weights. Returns metrics.json's entries on the training."""
        train = self._all_epochs(data["train"], epochs)
        per_epoch = self.position.steps_per_epoch  # None for streamed data: it ends when the position says so
        run = CadencedFit(self.workdir, self.position, self.cadence, per_epoch and per_epoch * epochs, per_epoch,
                          self.save_every, self.max_minutes, self.resuming, NON_FINITE_HINT, show=bool(verbose))
        saves = "" if self.save_every == "epoch" else f", saves every {self.save_every} steps"
        of = f" of {per_epoch} batches" if per_epoch else ""
        print(f"evaluation and checkpoints {self.cadence}{saves}; at most {epochs} epochs{of}")
        carries = getattr(model, "carry_state", False) and hasattr(model, "carried_state")
        carried = [CarriedStreams(self.position)] if carries else []
        run.fit(model, train, data["valid"], logging=callbacks, stopping=[self.best, *carried])
        self.resuming = run.resuming
        state, report = self.best.state, run.report(model)
        return {
            **{valid(key): value for key, value in state["best_logs"].items()},
            "best_epoch": state["best_evaluation"] if self.cadence.epoch else None,
            "best_evaluation": state["best_evaluation"],
            "best_step": state["best_step"],
            "epochs_run": report["epochs_run"],
            "evaluations": state["evaluations"],
            f"{valid(self.best.monitor)}_by_epoch": state["scores"],
            "steps": report["steps"],
            "stopped_early": state["stopped_early"],
            "resumed_from_epoch": self.resuming["epoch"] if self.resuming else None,
            "train_seconds": report["train_seconds"],
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
            raise ValueError("`data['train']` must have a known, non-zero number of batches (one epoch in a fixed "
                             "order), or be built with `epoch_ordered_batches`.")
        left = tf.data.Dataset.range(epochs).take_while(lambda index: self.position.epoch + index < epochs)
        return left.flat_map(lambda index: train.skip(tf.where(index == 0, self.position.skip, 0)))

    def release(self):
        """Deletes the backup (and `KeepBest`'s emptied folder), once what training produced is written."""
        shutil.rmtree(self.backup_dir, ignore_errors=True)
        shutil.rmtree(os.path.join(self.workdir, "best"), ignore_errors=True)


class CarriedStreams(keras.callbacks.Callback):
    """The train streams' state a language model carries from batch to
    batch (`RNNLanguageModel(carry_state=True)`), zeroed where each data
    epoch begins (and each window of streams read from files,
    `kseq.data.streams.streamed_stream_batches`, whose streams do not go
    on from the last window's) and kept with every save, so that a run
    resumed mid-epoch goes on with the state the uninterrupted run had there."""

    resets_train_streams = True  # in place of the model's reset at each of fit's epochs
    FILE = "carried_streams.npz"

    def __init__(self, position):
        super().__init__()
        self.position, self._restored = position, None

    def save_state(self, folder):
        state = self.model.carried_state("train")
        np.savez(os.path.join(folder, self.FILE), *[v for layer in state for values in layer for v in values])

    def restore_state(self, folder):
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
    """metrics.json's name of a validation log key: "val_loss" -> "valid_loss"."""
    return key.replace("val_", "valid_", 1)


def train_once(phases, name, fit, train, options=None, build=None):
    """The `Trained` of phase `name`, trained once.

    The first time, `train()` returns it; with `options`, its weights are
    written to the logdir (`keep_trained`, what `--init-from` reads); then
    the phase is recorded with its metrics (the decisions among them) and
    `fit`'s backup released. After a restart, the record's metrics come
    back with the model `build()` makes, loaded with those weights (or no
    model, without `options`).
    """
    record = phases.get(name)
    if record is None:
        trained = train()
        if options is not None:
            keep_trained(options, trained.model)
        metrics = {**trained.metrics, **as_metrics(trained.decisions)}
        phases.record(name, {"metrics": metrics})
        fit.release()  # only now: a kill before the record resumes from the backup
        return Trained(trained.model, [], metrics, trained.decode_xla)
    fit.release()  # killed between the record and the release
    model = None
    if options is not None:
        model = build()
        model.load_weights(os.path.join(options.logdir, TRAINED_WEIGHTS))
    print(f"{name}: trained before this run (recorded in {phases.path})")
    return Trained(model, [], record["metrics"])
