"""`CadencedFit`, deprecated: the fit loop that `Fit` built anew on every
call, now `Fit` itself. The name keeps its arguments and calls for code
written against it, and warns."""

import shutil
import warnings

from kseq.training.loop.fit import Fit


class CadencedFit(Fit):
    """Deprecated: use `kseq.training.loop.Fit`, which does this job.

    `CadencedFit(workdir, position, cadence, total_steps, steps_per_epoch,
    save_every, max_minutes, resuming, non_finite_hint)` then `.fit(model,
    train, valid, logging, stopping)` and `.report(model)` train as
    `Fit(workdir, cadence, save_every, max_minutes)` does with its data
    built from `fit.position` and `.fit(model, train, valid, epochs,
    logging, stopping)`, whose result holds `report`'s entries; `Fit` learns
    the steps from the data and the saved state from the backup.

    Args:
        workdir: the run's folder; the backup goes to `<workdir>/backup`.
        position: the `TrainingPosition` the train pipeline reads.
        cadence: a `kseq.training.progress.Cadence`.
        total_steps: the batches of all epochs, or None for streamed data.
        steps_per_epoch: batches per data epoch, or None for streamed data.
        save_every: steps between saves, or "epoch".
        max_minutes: the training budget, or None.
        resuming: the backup's saved state (`ResumableBackup.saved_state`), or None.
        non_finite_hint: what to try when the loss is not finite.
        show: print a line per evaluation period. Default True.
    """

    def __init__(self, workdir, position, cadence, total_steps, steps_per_epoch, save_every, max_minutes,
                 resuming, non_finite_hint, show=True):
        warnings.warn("`CadencedFit` is deprecated: use `kseq.training.loop.Fit(workdir, eval_every, save_every, "
                      "max_minutes)` and its `fit(model, train, valid, epochs, logging, stopping)`.",
                      DeprecationWarning, stacklevel=2)
        super().__init__(workdir, cadence, save_every, max_minutes)
        self.position, self.resuming, self.non_finite_hint = position, resuming, non_finite_hint
        self._new_callbacks(total_steps, steps_per_epoch, show)

    def fit(self, model, train, valid, logging=(), stopping=()):
        """Runs `model.fit` over the periods: `Fit.fit` without its epochs,
        opening line, best weights or carried streams.

        Returns:
            keras' `History`.
        """
        return self._fit_periods(model, train, valid, logging, stopping)

    def report(self, model):
        """metrics.json's entries on how training went (`Fit.fit` returns them with its own)."""
        return self._training_entries(model)

    def release(self):
        """Deletes the backup (only: `Fit.release` also deletes its best weights' folder)."""
        shutil.rmtree(self.backup_dir, ignore_errors=True)
