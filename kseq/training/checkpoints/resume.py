"""Resuming a killed `fit` at the step it last saved, not at its epoch start."""

import errno
import json
import math
import os
import shutil
import time

import keras
import numpy as np
import tensorflow as tf

from kseq._atomic import write_json_atomic
from kseq._compat import continue_after_epoch, end_epoch_early, resume_fit_at_epoch
from kseq._validation import check_positive_int
from kseq.training.progress import batches_trained


class TrainingPosition:
    """Where training is in its data: the data epoch in progress, the window
    of it (streamed data, `kseq.data.streaming`) and the batches of it
    already trained on.

    A data pipeline built with a position (`bucketed_pair_dataset(...,
    position=p)`, `streamed_pair_dataset(..., p)`) reads it each time an
    iterator over it starts: the epoch (and window) fix the shuffle, so
    every run sees the same batches in the same order, and `skip` drops the
    ones a resumed run has already trained on. A pipeline of lists sets
    `steps_per_epoch`, its batches per epoch; a streamed one sets
    `windows_per_epoch` and `epochs` and records each window's batches as
    it prepares it (`record_window`). Either way `where(batches)` turns
    the batches trained since the start into a place to resume from.
    `ResumableBackup` keeps it up to date. Create it outside
    `strategy.scope()`: the pipeline needs plain variables.
    """

    def __init__(self):
        if tf.distribute.has_strategy():
            raise ValueError("Create a TrainingPosition outside `strategy.scope()`.")
        with tf.device("/cpu:0"):
            self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="position_epoch")
            self.window = tf.Variable(0, dtype=tf.int64, trainable=False, name="position_window")
            self.skip = tf.Variable(0, dtype=tf.int64, trainable=False, name="position_skip")
        self.steps_per_epoch = None
        self.windows_per_epoch = None
        self.epochs = None
        self._windows = {}  # (epoch, window) -> its batches, as the pipeline prepared them
        self._pairs = {}  # (epoch, window) -> the pairs it holds
        self._origin = (0, 0, 0, 0)  # (epoch, window, skip) where the pipeline started, at this many batches

    def set(self, epoch, skip=0, window=0):
        """Moves the position: the next iterator over the data starts there.

        Args:
            epoch: the data epoch, from 0.
            skip: batches of it to skip. Default 0.
            window: the window of the epoch, from 0 (streamed data). Default 0.
        """
        self.epoch.assign(epoch)
        self.window.assign(window)
        self.skip.assign(skip)

    def set_step(self, step):
        """Moves the position to after `step` batches from the start of training.

        Args:
            step: batches trained since the start.

        Raises:
            ValueError: no pipeline has set `steps_per_epoch`.
        """
        if not self.steps_per_epoch:
            raise ValueError(
                "`steps_per_epoch` is unknown: build the data pipeline with this position first."
            )
        self.set(*divmod(int(step), self.steps_per_epoch))

    def start_at(self, batches, epoch, window, skip):
        """Starts the pipeline at (epoch, window, skip), a resumed run's last save.

        Args:
            batches: batches trained since the start of training at that place.
            epoch: the data epoch.
            window: the window of the epoch.
            skip: batches of the window already trained on.
        """
        self.set(epoch, skip, window)
        self._origin = (int(epoch), int(window), int(skip), int(batches))

    def record_window(self, epoch, window, batches, pairs):
        """Records a window's size; a streamed pipeline calls it as it prepares the window.

        Args:
            epoch: the data epoch.
            window: the window of the epoch.
            batches: the window's batches.
            pairs: the pairs it holds.

        Returns:
            `batches`.
        """
        self._windows[int(epoch), int(window)] = int(batches)
        self._pairs[int(epoch), int(window)] = int(pairs)
        return batches

    def pairs_read(self):
        """The pairs of every window the pipeline has prepared in this process."""
        return sum(self._pairs.values())

    def where(self, batches):
        """Finds the place in the data after `batches` batches from the start of training.

        Args:
            batches: batches trained since the start.

        Returns:
            (epoch, window, skip); (epochs, 0, 0) once a streamed pipeline
            has none left.

        Raises:
            ValueError: no pipeline has set the epoch's length.
            RuntimeError: `batches` goes past the windows prepared so far.
        """
        batches = int(batches)
        if self.windows_per_epoch is None:
            if not self.steps_per_epoch:
                raise ValueError("the data pipeline has not set this position's epoch length")
            epoch, skip = divmod(batches, self.steps_per_epoch)
            return epoch, 0, skip
        epoch, window, left, origin = self._origin
        left += batches - origin
        start = (epoch, window)
        while epoch < self.epochs:
            count = self._windows.get((epoch, window))
            if count is None:  # not prepared yet: only the start (a resumed run before its first batch)
                if left and (epoch, window) != start:
                    raise RuntimeError(f"{batches} batches trained, more than the pipeline has prepared")
                return epoch, window, left
            if left < count:
                return epoch, window, left
            left -= count
            epoch, window = (epoch, window + 1) if window + 1 < self.windows_per_epoch else (epoch + 1, 0)
        return self.epochs, 0, 0

    def exhausted(self, batches):
        """Tells whether a streamed pipeline has no batch left after `batches`.

        Args:
            batches: batches trained since the start.

        Returns:
            True once every epoch is read; always False for data of lists.
        """
        return self.epochs is not None and self.windows_per_epoch is not None and \
            self.where(batches)[0] >= self.epochs

    def data_epochs(self, batches):
        """Gives how far into the data `batches` batches go, in epochs.

        Args:
            batches: batches trained since the start.

        Returns:
            A float (1.5: half way through the second epoch); None before a
            pipeline sets the epoch's length.
        """
        if self.windows_per_epoch is None:
            return batches / self.steps_per_epoch if self.steps_per_epoch else None
        epoch, window, skip = self.where(batches)
        count = self._windows.get((epoch, window))
        return epoch + (window + (skip / count if count else 0.0)) / self.windows_per_epoch


class ResumableBackup(keras.callbacks.BackupAndRestore):
    """keras' BackupAndRestore, resuming at the step of the last save.

    keras 3.15 restarts an interrupted epoch from its first batch (so a
    resumed run trains more steps than an uninterrupted one) and records
    epoch 0 in backups made after a resume. This callback saves every
    `save_freq` batches and at every epoch end, each save a complete folder
    published by an atomic rename of a pointer file (a kill mid-save leaves
    the previous save intact). On resume it restores the weights, the
    random generators' states (dropout's) and the optimizer (its step count
    included), and with a `position` the data
    continues with the batch after the last saved one, so the run trains
    exactly the steps an uninterrupted one would. The backup is deleted
    when training ends normally, as in keras; it stays when `fit` raises.

    Two ways to lay out training:
    - keras epochs are data epochs (the default): the position follows
      (epoch, batch), and a resumed epoch ends after the batches it had left;
    - `steps_position=True`: one pass of `fit` reads a dataset of several
      data epochs (`bucketed_pair_dataset(..., epochs=N)`) and keras epochs
      are evaluation periods (`kseq.training.loop.periods.EvaluationPeriods`); the
      position follows the global step.

    Put it last in the callback list, so that an epoch's logs are written
    before the epoch counts as saved.

    Args:
        backup_dir: folder for the backups (one per worker).
        position: the `TrainingPosition` the training data reads, or None
            (then a resumed epoch starts again from its first batch). The
            data must have a known number of batches.
        save_freq: batches between saves, or "epoch": at epoch ends only
            (data whose epochs cannot skip batches). Defaults to 200.
        steps_position: the position follows the global step (see above).
        delete_at_end: delete the backup when `fit` ends normally, as keras
            does; False leaves it to the caller, who deletes it once what
            training produced is written.
        participants: callbacks with state of their own (e.g. `KeepBest`,
            `RecentWeights`): each save asks them to `save_state(folder)`
            into the save being written, published with the weights by the
            same pointer; `restore(participants)` gives it back on resume.
    """

    POINTER = "latest.json"

    def __init__(self, backup_dir, position=None, save_freq=200, steps_position=False, delete_at_end=True,
                 participants=()):
        epochs_only = save_freq == "epoch"
        super().__init__(backup_dir, save_freq="epoch" if epochs_only else check_positive_int("save_freq", save_freq),
                         delete_checkpoint=delete_at_end)
        self.batches_between_saves = math.inf if epochs_only else save_freq
        if steps_position and position is None:
            raise ValueError("`steps_position=True` needs the `position` the data reads.")
        self.position = position
        self.steps_position = bool(steps_position)
        self.restored = self.saved_state(backup_dir)
        self._offset = 0  # batches of the current epoch trained before this run
        self._since_save = 0  # batches since the last save
        self.initial_epoch = 0  # the epoch this run started in
        self._published = self.restored
        self.participants = list(participants)

    def restore(self, strategy=None):
        """Gives each participant the state of the save being resumed.

        Call it before `fit` (their `on_train_begin` may read it). With
        several workers, they first agree on a save all of them hold
        (`agree_across_workers`).

        Args:
            strategy: the tf.distribute strategy; None (default) for one worker.
        """
        if strategy is not None and several_workers(strategy):
            self.restored = self._published = agree_across_workers(strategy, self.restored)
        if self.restored is not None:
            for participant in self.participants:
                participant.restore_state(os.path.join(self.backup_dir, self.restored["folder"]))

    @classmethod
    def saved_state(cls, backup_dir):
        """Reads the last save's record from a backup folder.

        Args:
            backup_dir: the backup folder.

        Returns:
            {"epoch", "batch", "step", "batches", "train_seconds", "folder", ...},
            or None where nothing was saved.

        Raises:
            SystemExit: the pointer cannot be read (never a silent fresh start).
        """
        path = os.path.join(backup_dir, cls.POINTER)
        try:
            with open(path) as f:
                state = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            raise SystemExit(damaged(path, error, backup_dir)) from None
        if not isinstance(state, dict) or not {"epoch", "batch", "step", "folder"} <= set(state):
            raise SystemExit(damaged(path, "not a kseq backup pointer", backup_dir))
        return state

    @property
    def train_seconds(self):
        """Training time so far, including the runs before a resume."""
        return self._seconds_before + time.monotonic() - self._started

    def on_train_begin(self, logs=None):
        self._started = time.monotonic()
        self._seconds_before = self.restored["train_seconds"] if self.restored else 0.0
        self._resume_at = (0, 0)
        if self.restored is None:
            return
        if not self.model.built:
            raise ValueError("Build the model before `fit` so that ResumableBackup can restore it.")
        if self.model.optimizer is not None and not self.model.optimizer.built:
            self.model.optimizer.build(self.model.trainable_variables)
        folder = os.path.join(self.backup_dir, self.restored["folder"])
        weights = os.path.join(folder, "model.weights.h5")
        try:
            self.model.load_weights(weights)
        except (OSError, ValueError) as error:  # h5py reports a truncated or garbled file as OSError
            raise SystemExit(damaged(weights, str(error).splitlines()[0], self.backup_dir)) from None
        restore_random_states(self.model, os.path.join(folder, RANDOM_STATES))
        epoch, batch, step = self.restored["epoch"], self.restored["batch"], self.restored["step"]
        if self.steps_position:
            batches = self.restored.get("batches", step)  # more than the steps with gradient accumulation
            place = self.restored.get("data")  # a save from before data places was a step of fixed epochs
            if place:
                self.position.start_at(batches, place["epoch"], place["window"], place["skip"])
            else:
                self.position.set_step(batches)
            self._resume_at = (epoch, 0)  # the period in progress starts again, shorter
            self.initial_epoch = epoch
            resume_fit_at_epoch(self.model, epoch)
            data_epoch, window, skip = self.position.where(batches)
            windows = self.position.windows_per_epoch or 1
            within = f" of window {window + 1} of {windows}" if windows > 1 else ""
            print(f"resuming from {folder}: step {step}, data epoch {data_epoch + 1}, batch {skip}{within}")
            return
        steps = (self.params or {}).get("steps")
        if batch and (self.position is None or not steps):
            print("the data cannot skip batches: the interrupted epoch starts again")
            batch = 0
        elif batch and batch >= steps:  # saved after its last batch, before its end
            epoch, batch = epoch + 1, 0
        self._resume_at = (epoch, batch)
        self.initial_epoch = epoch
        resume_fit_at_epoch(self.model, epoch)
        print(f"resuming from {folder}: step {step}, epoch {epoch + 1}, batch {batch}")

    def on_epoch_begin(self, epoch, logs=None):
        self._current_epoch = epoch
        resumed = self.restored is not None and epoch == self._resume_at[0]
        self._offset = self._resume_at[1] if resumed else 0
        if self.position is not None and not self.steps_position:
            self.position.set(epoch, self._offset)

    def on_train_batch_end(self, batch, logs=None):
        if self._offset and batch + 1 + self._offset >= self.params["steps"]:
            end_epoch_early(self.model)
        self._since_save += 1
        self._batch_end = (self._current_epoch, self._offset + batch + 1)
        if self._since_save >= self.batches_between_saves:
            self._save(*self._batch_end)

    def save_now(self):
        """Saves the state after the last batch, e.g. on a preemption notice.

        A backup that saves only at epoch ends keeps its last epoch's save,
        since its data cannot resume mid-epoch.

        Returns:
            Whether it saved.
        """
        if self.batches_between_saves == math.inf:
            return False
        self._save(*self._batch_end)
        return True

    def on_epoch_end(self, epoch, logs=None):
        if self._offset:
            continue_after_epoch(self.model)
        self._offset = 0
        self._save(epoch + 1, 0)

    def _save(self, epoch, batch):
        self._since_save = 0
        step = int(self.model.optimizer.iterations.numpy()) if self.model.optimizer else 0
        folder = f"step-{step}-epoch-{epoch}-batch-{batch}"
        if self._published and folder == self._published["folder"]:  # this very state is the last save
            return
        path = os.path.join(self.backup_dir, folder)
        # The save before stays too: a worker killed mid-save resumes with
        # the others from the last save all of them finished.
        previous = {key: value for key, value in (self._published or {}).items() if key != "previous"}
        batches = batches_trained(self.model)
        state = dict(epoch=epoch, batch=batch, step=step, batches=batches,
                     train_seconds=self.train_seconds, folder=folder, previous=previous or None)
        if self.steps_position:
            state["data"] = dict(zip(("epoch", "window", "skip"), self.position.where(batches)))
        try:
            os.makedirs(path, exist_ok=True)
            self.model.save_weights(os.path.join(path, "model.weights.h5"), overwrite=True)
            np.savez(os.path.join(path, RANDOM_STATES), *[v.numpy() for v in random_states(self.model)])
            for participant in self.participants:
                participant.save_state(path)
            write_json_atomic(os.path.join(self.backup_dir, self.POINTER), state)
        except OSError as error:
            shutil.rmtree(path, ignore_errors=True)  # half written; the published save stays
            if error.errno != errno.ENOSPC:
                raise
            raise SystemExit(no_space(self.backup_dir, self.model)) from None
        self._published = state
        for name in os.listdir(self.backup_dir):  # older saves
            if name.startswith("step-") and name not in (folder, previous.get("folder")):
                shutil.rmtree(os.path.join(self.backup_dir, name), ignore_errors=True)


def several_workers(strategy):
    """Tells whether a strategy's cluster has more than one task.

    Args:
        strategy: a tf.distribute strategy.

    Returns:
        True for a cluster of several workers.
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    return resolver is not None and sum(len(tasks) for tasks in resolver.cluster_spec().as_dict().values()) > 1


def agree_across_workers(strategy, restored):
    """The save every worker resumes from: the oldest among the workers'
    last saves (one killed mid-save has the one before, which the others
    kept), or none if a worker has none. Each worker has its own backup,
    as on separate disks; they compare steps with an all-gather.

    Args:
        strategy: the multi-worker strategy.
        restored: this worker's last save (`saved_state`), or None.

    Returns:
        The save to resume from, or None to start over.
    """
    own = restored["step"] if restored else -1

    @tf.function
    def gather():
        context = lambda: tf.distribute.get_replica_context().all_gather(tf.constant([own], tf.int64), 0)  # noqa: E731
        return strategy.run(context)

    return agreed_save(restored, strategy.experimental_local_results(gather())[0].numpy().tolist())


def agreed_save(restored, steps):
    """Picks this worker's save of the oldest step among the workers' last saves.

    Args:
        restored: this worker's last save, or None.
        steps: each worker's last saved step, -1 for none.

    Returns:
        The save (this one or the one before it); None when a worker has none.

    Raises:
        SystemExit: this worker holds no save of that step.
    """
    own = restored["step"] if restored else -1
    steps = sorted(set(steps))
    target = steps[0]
    if target == own:
        return restored
    if target == -1:
        print(f"another worker has no save (steps {steps}): every worker starts training over")
        return None
    if restored.get("previous") and restored["previous"]["step"] == target:
        print(f"another worker's last save is step {target} (this one's: {own}): resuming from it")
        return restored["previous"]
    raise SystemExit(f"the workers' backups hold different steps ({steps}) and this worker has no save of "
                     f"step {target}; delete every worker's backup folder to start training over.")


RANDOM_STATES = "random_states.npz"


def random_states(model):
    """Lists the states of the model's random generators (e.g. dropout's).

    keras' weights files leave them out; a resumed run needs them to draw
    the masks an uninterrupted one would.

    Args:
        model: a keras model.

    Returns:
        The variables whose path ends with "seed_generator_state".
    """
    return [v for v in model.variables if v.path.endswith("seed_generator_state")]


def restore_random_states(model, path):
    """Loads the random generators' states that `_save` wrote; a missing file is skipped.

    Args:
        model: the keras model.
        path: the save's random_states.npz.

    Raises:
        SystemExit: the file holds a different number of states.
    """
    if not os.path.exists(path):  # a save from before they were kept
        return
    with np.load(path) as saved:
        states = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    variables = random_states(model)
    if len(states) != len(variables):
        raise SystemExit(damaged(path, f"{len(states)} random states for {len(variables)} generators",
                                 os.path.dirname(os.path.dirname(path))))
    for variable, state in zip(variables, states):
        variable.assign(state)


def damaged(path, error, backup_dir):
    """Writes the message for a backup file that cannot be read.

    Args:
        path: the file.
        error: what is wrong with it.
        backup_dir: the backup folder, to delete to start over.

    Returns:
        The message.
    """
    return (f"{path} is damaged ({error}). To start training over, delete {backup_dir}; "
            "to keep the run, restore that file from a copy.")


def no_space(backup_dir, model):
    """Writes the message for a save that found its disk full, with the space a save needs.

    Args:
        backup_dir: the backup folder.
        model: the model whose weights and optimizer variables a save holds.

    Returns:
        The message.
    """
    variables = model.weights + (model.optimizer.variables if model.optimizer else [])
    needed = sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in variables)
    return (f"no space left on the device of {backup_dir}: a save needs about {needed / 2**20:,.0f} MiB free "
            f"there. The previous save is intact; free space (or move --logdir) and run the same command to "
            "resume from it.")
