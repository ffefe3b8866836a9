"""Choosing by validation scores: the metric that fits the data, and the
decoding settings that score best on the validation split."""

import math
import statistics

from kseq.decoding.constraints import LIMIT_SLACK
from kseq.training.evaluation import exact_match, translation_scores

METRICS = ("bleu", "chrf", "exact_match")
# Targets of at most this many words (median) are labels, codes, dates or
# numbers: one wrong character makes them wrong, and BLEU's 4-grams do not
# exist in them (a one-word target scores BLEU 0 however close it is).
SHORT_TARGET_WORDS = 3


def choose_metric(references, requested="auto"):
    """(metric name, reason): exact match for short targets, else chrF
    (smoother than BLEU on a few hundred sentences, and defined for any
    length); `requested` other than "auto" is taken as asked."""
    if requested != "auto":
        if requested not in METRICS:
            raise ValueError(f"`metric` must be one of auto, {', '.join(METRICS)}; got {requested!r}.")
        return requested, "asked for"
    words = statistics.median(len(reference.split()) for reference in references) if references else 0
    median = f"auto: validation targets have a median of {words:g} word{'' if words == 1 else 's'}"
    if words <= SHORT_TARGET_WORDS:
        return "exact_match", median
    return "chrf", f"{median} (> {SHORT_TARGET_WORDS})"


def all_scores(hypotheses, references):
    """{"bleu", "chrf", "exact_match"}, all on a 0-100 scale."""
    scores = translation_scores(hypotheses, references)
    return {"bleu": scores["bleu"], "chrf": scores["chrf"],
            "exact_match": 100.0 * exact_match(hypotheses, references)}


def tune_decoding(translate_with, candidates, sources, references, metric):
    """The candidate decoding settings that score best on validation pairs.

    Args:
        translate_with: `settings -> (strings -> strings)`.
        candidates: settings (dicts), the default first: it wins ties.
        sources, references: validation pairs.
        metric: the name of the score to maximise (see `METRICS`).

    Returns:
        (best settings, [{**settings, **scores}] for every candidate).
    """
    table = []
    for settings in candidates:
        scores = all_scores(translate_with(settings)(sources), references)
        table.append({**settings, **{name: round(value, 2) for name, value in scores.items()}})
    best = max(range(len(table)), key=lambda i: (table[i][metric], -i))
    return candidates[best], table


def length_ratio_for(source_lengths, target_lengths, step=0.1, headroom=1.0):
    """The smallest multiple of `step` whose per-source limits
    (kseq.decoding.constraints.source_length_limits: ceil(ratio x source
    tokens) + LIMIT_SLACK, EOS included) fit every given pair's target,
    times `headroom` (rounded up to `step`); lengths in tokens, pairs with
    an empty source ignored.

    Example:
    >>> length_ratio_for([10, 4, 20], [12, 9, 15])  # 4 -> 9 tokens + EOS: ceil(4.4) + 5
    1.1
    """
    if headroom < 1:
        raise ValueError(f"`headroom` must be at least 1; got {headroom!r}.")
    pairs = [(source, target) for source, target in zip(source_lengths, target_lengths) if source > 0]
    need = max(((target - LIMIT_SLACK) / source for source, target in pairs), default=0.0)
    count = max(math.floor(need / step) + 1, 1)
    while any(math.ceil(count * step * source) + LIMIT_SLACK < target + 1 for source, target in pairs):
        count += 1  # float rounding at the boundary
    return round(math.ceil(round(count * headroom, 6)) * step, 6)
