"""What a task's training gives (`Trained`), and a phase trained once
(`train_once`): recorded as done (`kseq.training.checkpoints.phases`) once
the weights the later steps use are written, and only then is the `Fit`'s
backup deleted, so that a restart after training loads those weights
instead of training again."""

import dataclasses
import os

from kseq.training.config.warm_start import TRAINED_WEIGHTS, keep_trained
from kseq.training.reporting.decisions import as_metrics


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
