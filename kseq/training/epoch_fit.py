"""`model.fit` over data epochs that a kill cannot undo: what the recipes
that train in epochs (classify, language_model, generate_reviews, reverse)
share, as translate shares `CadencedFit`.

Each epoch ends with one save (`ResumableBackup`): the weights, the
optimizer, and `KeepBest`'s best epoch and patience count, published
together. The same command started again goes on from the last finished
epoch and ends as the uninterrupted run would, because the data's order
comes from the epoch (`kseq.data.epoch_order`). SIGTERM exits at once
(`SaveOnPreemption`), to run the epoch in progress again. `train_once` records a
model's training as done (`kseq.training.phases`) once the weights the
later steps use are written, and only then deletes the backup: a restart
after training loads those weights instead of training again.
"""

import os
import shutil

from kseq.training.callbacks import TimeLimit
from kseq.training.cadenced_fit import Trained
from kseq.training.decisions import as_metrics
from kseq.training.periods import global_step
from kseq.training.preemption import SaveOnPreemption
from kseq.training.resume import ResumableBackup, TrainingPosition
from kseq.training.stopping import KeepBest
from kseq.training.warm_start import TRAINED_WEIGHTS, keep_trained


class EpochFit:
    """Fits for at most `epochs` and `max_minutes` (counting the runs
    before a resume), keeping the weights of the best epoch's `monitor`
    and stopping after `patience` epochs without a better one (0: never).

    Build the training data from `position` (e.g. `epoch_ordered_slices`),
    and create this object outside `strategy.scope()`.

    Args:
        workdir: the model's folder; its backup goes to `<workdir>/backup`.
        monitor: the validation log key, e.g. "val_loss" or "val_accuracy".
        mode: "min" (a loss) or "max" (a score).
        patience: epochs without improvement before stopping.
        max_minutes: the training budget, or None.
    """

    def __init__(self, workdir, monitor="val_loss", mode="min", patience=0, max_minutes=None):
        self.workdir, self.backup_dir = workdir, os.path.join(workdir, "backup")
        self.resuming = ResumableBackup.saved_state(self.backup_dir)
        self.position = TrainingPosition()
        self.backup = ResumableBackup(self.backup_dir, self.position, save_freq="epoch", delete_at_end=False)
        self.best = KeepBest(monitor, os.path.join(workdir, "best"), mode=mode, patience=patience)
        self.limit = TimeLimit(max_minutes)  # counts the runs before a resume from `fit` on

    def fit(self, model, data, epochs, callbacks=(), verbose=2):
        """`model.fit` on `data["train"]`, validated on `data["valid"]`,
        with `callbacks` (logging: they run before the best epoch is chosen
        and the epoch saved). The model ends with the best epoch's weights.
        Returns metrics.json's entries on the training."""
        self.backup.participants = [self.best]
        self.backup.restore(model.distribute_strategy)
        self.resuming = self.backup.restored  # the workers may have agreed on an older save
        self.limit.spent_seconds = self.resuming["train_seconds"] if self.resuming else 0.0
        model.fit(data["train"], validation_data=data["valid"], epochs=epochs, verbose=verbose, shuffle=False,
                  callbacks=[self.limit, *callbacks, self.best, self.backup,
                             SaveOnPreemption(self.backup, self.workdir)])
        state = self.best.state
        return {
            **{valid(key): value for key, value in state["best_logs"].items()},
            "best_epoch": state["best_evaluation"],
            "best_step": state["best_step"],
            "epochs_run": state["evaluations"],
            f"{valid(self.best.monitor)}_by_epoch": state["scores"],
            "steps": global_step(model),
            "stopped_early": state["stopped_early"],
            "resumed_from_epoch": self.resuming["epoch"] if self.resuming else None,
            "train_seconds": round(self.backup.train_seconds, 1),
        }

    def release(self):
        """Deletes the backup (and `KeepBest`'s emptied folder), once what training produced is written."""
        shutil.rmtree(self.backup_dir, ignore_errors=True)
        shutil.rmtree(os.path.join(self.workdir, "best"), ignore_errors=True)


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
