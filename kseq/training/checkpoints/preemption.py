"""SIGTERM, as cloud schedulers and preemptible machines send it before a
kill: the run saves where it is and exits with `PREEMPTED_EXIT_CODE`; the
same command resumes it.

TensorFlow's `PreemptionCheckpointHandler` watches for the signal and, under
MultiWorkerMirroredStrategy, agrees with every worker on the step at which
all of them save (through the coordination service); with one machine it
runs in its local mode. Its save is the run's own backup
(`ResumableBackup.save_now`), so a preempted run resumes exactly as a
killed one does, from a newer save.
"""

import os
import signal
import sys

import keras
import tensorflow as tf

# EX_TEMPFAIL of sysexits.h: a temporary failure, to be retried. A
# scheduler (or a shell loop) can restart on it and stop on anything else.
PREEMPTED_EXIT_CODE = 75


class SaveOnPreemption(keras.callbacks.Callback):
    """After SIGTERM, `backup` saves at the next step every worker reaches,
    and the process exits with `PREEMPTED_EXIT_CODE`. Place it after the
    backup in the callbacks. Outside `fit` SIGTERM keeps its usual effect:
    what ran after training is recorded as it ends (`kseq.training.checkpoints.phases`).

    Args:
        backup: the run's `kseq.training.checkpoints.resume.ResumableBackup`.
        folder: a folder of the handler's own (it writes nothing there when
            the backup saves, but needs one).
    """

    def __init__(self, backup, folder):
        super().__init__()
        self.backup, self.folder = backup, folder
        self.handler = None

    def on_train_begin(self, logs=None):
        strategy = self.model.distribute_strategy
        resolver = getattr(strategy, "cluster_resolver", None)
        if resolver is not None and not resolver.cluster_spec().jobs:
            resolver = None  # one machine: the handler's local mode
        self.previous = signal.getsignal(signal.SIGTERM)
        self.handler = tf.distribute.experimental.PreemptionCheckpointHandler(
            resolver, tf.train.Checkpoint(), os.path.join(self.folder, "preemption"),
            tf.distribute.experimental.TerminationConfig(save_fn=self._save, exit_fn=self._exit))

    def on_train_batch_end(self, batch, logs=None):
        self.handler.save_checkpoint_if_preempted()

    def on_train_end(self, logs=None):
        signal.signal(signal.SIGTERM, self.previous)

    def _save(self):
        self.saved = self.backup.save_now()

    def _exit(self):
        backup = self.backup.backup_dir
        kept = "saved this step" if self.saved else "kept the last epoch's save (this epoch runs again)"
        print(f"\nSIGTERM: {kept} in {backup}; exiting with code {PREEMPTED_EXIT_CODE}. "
              "Run the same command to resume.", flush=True)
        sys.exit(PREEMPTED_EXIT_CODE)
