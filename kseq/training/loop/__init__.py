"""The fit loop: `EpochFit` and `CadencedFit` around `model.fit`, its
evaluation periods and progress lines, the callbacks that log samples and
attention, and stopping (patience, the best weights)."""

from kseq.training.loop.cadenced_fit import (
    CadencedFit,
    CadenceOptions,
    Trained,
    counted,
)
from kseq.training.loop.callbacks import AttentionMaps, GenerationMonitor
from kseq.training.loop.epoch_fit import EpochFit, train_once
from kseq.training.loop.periods import StepTensorBoard, global_step, parse_cadence
from kseq.training.loop.stopping import KeepBest, StoppingOptions

__all__ = [
    "AttentionMaps",
    "CadenceOptions",
    "CadencedFit",
    "EpochFit",
    "GenerationMonitor",
    "KeepBest",
    "StepTensorBoard",
    "StoppingOptions",
    "Trained",
    "counted",
    "global_step",
    "parse_cadence",
    "train_once",
]
