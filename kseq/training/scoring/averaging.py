"""Checkpoint averaging: the mean of the last weights snapshots, kept
where it scores better on validation than the best single evaluation."""

import collections
import os

import keras
import numpy as np

from kseq._validation import check_positive_int
from kseq.training.progress import global_step


class RecentWeights(keras.callbacks.Callback):
    """Keeps the model's weights of every `every`-th step, the last `count`
    of them, in memory; a backup saves them (`save_state`, `restore_state`),
    so a resumed run averages the snapshots an uninterrupted one would.

    Args:
        every: steps between snapshots.
        count: snapshots kept (the oldest goes first).

    Example:
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", "mse")
    >>> recent = RecentWeights(every=2, count=3)
    >>> x, y = np.ones((8, 2)), np.ones((8, 1))
    >>> _ = model.fit(x, y, batch_size=1, epochs=1, callbacks=[recent], verbose=0)
    >>> recent.steps  # steps 2, 4, 6, 8: the last three
    [4, 6, 8]
    """

    def __init__(self, every, count):
        super().__init__()
        self.every = check_positive_int("every", every)
        self.snapshots = collections.deque(maxlen=check_positive_int("count", count))

    @property
    def steps(self):
        return [step for step, _ in self.snapshots]

    def on_train_batch_end(self, batch, logs=None):
        step = global_step(self.model)  # the batches of an accumulated update share it
        if step % self.every == 0 and step not in self.steps:
            self.snapshots.append((step, [np.array(w) for w in self.model.get_weights()]))

    def save_state(self, folder):
        """Writes the snapshots into a backup's save being written.

        Args:
            folder: the save's folder.
        """
        arrays = {f"{i}_{j}": w for i, (_, weights) in enumerate(self.snapshots) for j, w in enumerate(weights)}
        np.savez(os.path.join(folder, "recent_weights.npz"), steps=np.array(self.steps, "int64"), **arrays)

    def restore_state(self, folder):
        """Reads back the snapshots `save_state` wrote, replacing those held.

        Args:
            folder: the save's folder.
        """
        with np.load(os.path.join(folder, "recent_weights.npz")) as saved:
            count = len(saved["steps"])
            weights = [[saved[key] for key in sorted((k for k in saved.files if k.startswith(f"{i}_")),
                                                     key=lambda k: int(k.split("_")[1]))] for i in range(count)]
            self.snapshots.clear()
            self.snapshots.extend(zip(saved["steps"].tolist(), weights))

    def average(self):
        """The element-wise mean of the snapshots' weights (non-float
        weights, e.g. counters, from the last snapshot)."""
        weights = [w for _, w in self.snapshots]
        return [np.mean(group, axis=0).astype(group[-1].dtype)
                if np.issubdtype(group[-1].dtype, np.floating) else group[-1]
                for group in zip(*weights)]


def recent_weights(options):
    """Makes the `RecentWeights` a task's `StoppingOptions` ask to average at the end.

    Args:
        options: the task's options (`--average-snapshots`, `--snapshot-every`,
            `--strategy`).

    Returns:
        The callback, or None: averaging off, or several workers (the chief
        alone cannot score the average).
    """
    if options.average_snapshots < 2 or options.strategy == "multiworker":
        return None
    return RecentWeights(options.snapshot_every, options.average_snapshots)


def keep_better_average(model, recent, score, mode):
    """Sets the model to the average of `recent`'s snapshots if that scores better than its weights.

    Args:
        model: the trained model, with the weights to compare against.
        recent: the `RecentWeights`, or None (averaging off).
        score: a function of the model giving a float.
        mode: "max" (a score) or "min" (a loss).

    Returns:
        The report for metrics.json: {"averaged", ...}; with fewer than two
        snapshots there is nothing to average.
    """
    if recent is None:
        return {"averaged": False, "reason": "off"}
    if len(recent.snapshots) < 2:
        return {"averaged": False, "reason": f"{len(recent.snapshots)} snapshot(s): nothing to average"}
    current = model.get_weights()
    current_score = score(model)
    model.set_weights(recent.average())
    average_score = score(model)
    better = average_score > current_score if mode == "max" else average_score < current_score
    if not better:
        model.set_weights(current)
    return {"averaged": bool(better), "steps": recent.steps, "score_before": round(float(current_score), 4),
            "score_averaged": round(float(average_score), 4)}


def validation_score(monitor, valid, key):
    """Makes the function that scores a model on validation, to compare averaged snapshots.

    Args:
        monitor: the chief's `GenerationMonitor`, for a decoded score.
        valid: the validation dataset, for the loss.
        key: the stopping score: "val_loss", else exact match.

    Returns:
        A function of a model giving the score.
    """
    if key == "val_loss":
        return lambda model: model.evaluate(valid, verbose=0, return_dict=True)["loss"]
    return lambda model: monitor.evaluate()[2]["exact_match"]
