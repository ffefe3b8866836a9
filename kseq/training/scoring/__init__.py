"""How good a model is: test scores (BLEU, chrF, exact match) through the
export's translate function, the decoding chosen on validation pairs,
attention on names, and snapshot averaging kept where it scores better."""

from kseq.training.scoring.alignment import name_alignment
from kseq.training.scoring.averaging import keep_better_average
from kseq.training.scoring.evaluation import (
    exact_match,
    model_translator,
    write_test_report,
)
from kseq.training.scoring.selection import (
    DecodingOptions,
    DecodingSettings,
    all_scores,
    choose_decoding,
    choose_metric,
)

__all__ = [
    "DecodingOptions",
    "DecodingSettings",
    "all_scores",
    "choose_decoding",
    "choose_metric",
    "exact_match",
    "keep_better_average",
    "model_translator",
    "name_alignment",
    "write_test_report",
]
