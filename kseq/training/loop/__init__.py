"""The fit loop: `Fit`, the one driver every task calls (`model.fit` on a
cadence of evaluations and saves that a kill cannot undo; `EpochFit` is its
former name), `CadencedFit` under it, the evaluation periods and progress
lines, the callbacks that log samples and attention, and stopping
(patience, the best weights)."""

from kseq.training.loop.cadenced_fit import (
    CadencedFit,
    CadenceOptions,
    Trained,
    counted,
)
from kseq.training.loop.callbacks import AttentionMaps, GenerationMonitor
from kseq.training.loop.fit import EpochFit, Fit, train_once
from kseq.training.loop.periods import StepTensorBoard, global_step, parse_cadence
from kseq.training.loop.stopping import KeepBest, StoppingOptions

__all__ = [
    "AttentionMaps",
    "CadenceOptions",
    "CadencedFit",
    "EpochFit",
    "Fit",
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
