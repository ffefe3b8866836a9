"""What training minimizes and how it steps: the masked losses and metrics,
FusedAdam, and the learning-rate schedules."""

from kseq.training.objectives.losses import MaskedSparseCategoricalCrossentropy
from kseq.training.objectives.metrics import MaskedAccuracy, MaskedTokenMean, Perplexity
from kseq.training.objectives.optimizers import FusedAdam
from kseq.training.objectives.schedules import (
    Annealed,
    Scaled,
    TransformerSchedule,
    WarmupConstant,
    fine_tuning_learning_rate,
    translation_learning_rate,
)

__all__ = [
    "Annealed",
    "FusedAdam",
    "MaskedAccuracy",
    "MaskedSparseCategoricalCrossentropy",
    "MaskedTokenMean",
    "Perplexity",
    "Scaled",
    "TransformerSchedule",
    "WarmupConstant",
    "fine_tuning_learning_rate",
    "translation_learning_rate",
]
