"""What a kill cannot undo: the resumable backup and the data position it
holds, saving on preemption, and the finished phases a restart skips; and
what a start that a user's mistake stops must not leave (`failed_start`)."""

from kseq.training.checkpoints.phases import Phases
from kseq.training.checkpoints.preemption import PREEMPTED_EXIT_CODE, SaveOnPreemption
from kseq.training.checkpoints.resume import ResumableBackup, TrainingPosition

__all__ = ["PREEMPTED_EXIT_CODE", "Phases", "ResumableBackup", "SaveOnPreemption", "TrainingPosition"]
