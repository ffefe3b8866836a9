"""How good a model is: test scores (BLEU, chrF, exact match) through the
export's translate function, the decoding chosen on validation pairs,
attention on names, snapshot averaging kept where it scores better, and
how generated texts read (a classifier's label agreement, its ceiling on
real texts, a generator's samples scored)."""

from kseq.training.scoring.alignment import name_alignment, report_name_alignment
from kseq.training.scoring.averaging import keep_better_average, recent_weights, validation_score
from kseq.training.scoring.evaluation import (
    exact_match,
    model_translator,
    test_translations,
    write_test_report,
)
from kseq.training.scoring.label_agreement import (
    agreement,
    check_labels,
    classifier_ceiling,
    known_word_rate,
    label_texts,
    log_agreement,
    score_samples,
    seen_in_training,
)
from kseq.training.scoring.selection import (
    DecodingSettings,
    all_scores,
    choose_decoding,
    choose_metric,
    choose_translator_decoding,
)

__all__ = [
    "DecodingSettings",
    "agreement",
    "all_scores",
    "check_labels",
    "choose_decoding",
    "choose_metric",
    "choose_translator_decoding",
    "classifier_ceiling",
    "exact_match",
    "keep_better_average",
    "known_word_rate",
    "label_texts",
    "log_agreement",
    "model_translator",
    "name_alignment",
    "recent_weights",
    "report_name_alignment",
    "score_samples",
    "seen_in_training",
    "test_translations",
    "validation_score",
    "write_test_report",
]
