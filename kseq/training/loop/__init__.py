"""The fit loop: `Fit`, the one driver every task calls (`model.fit` on a
cadence of evaluations and saves that a kill cannot undo), what training
gives and a phase trained once (`Trained`, `train_once`), the evaluation
periods and progress lines, the train curves of every few steps
(`StepCurves`), the callbacks that log samples and attention,
the captioner's monitor (`caption_images`, `CaptionMonitor`), and stopping
(patience, the best weights). `CadencedFit` is `Fit`'s deprecated former
loop, kept for code that calls it."""

from kseq.training.loop.cadenced_fit import CadencedFit
from kseq.training.loop.caption_monitor import CaptionMonitor, caption_images
from kseq.training.loop.callbacks import AttentionMaps, GenerationMonitor, translator_callbacks
from kseq.training.loop.fit import Fit, counted
from kseq.training.loop.periods import EvaluationPeriods, StepTensorBoard
from kseq.training.loop.step_curves import StepCurves
from kseq.training.loop.stopping import KeepBest, keep_best
from kseq.training.loop.trained import Trained, train_once

__all__ = [
    "AttentionMaps",
    "CadencedFit",
    "CaptionMonitor",
    "EvaluationPeriods",
    "Fit",
    "GenerationMonitor",
    "KeepBest",
    "StepCurves",
    "StepTensorBoard",
    "Trained",
    "caption_images",
    "counted",
    "keep_best",
    "train_once",
    "translator_callbacks",
]
