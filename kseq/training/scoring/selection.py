"""Choosing by validation scores: the metric that fits the data, and the
decoding settings that score best on the validation split."""

import dataclasses
import math
import statistics
import time

import tensorflow as tf

from kseq.decoding import BeamSearch, GreedySearch, Limits
from kseq.decoding.limits import DEFAULT_LENGTH_SLACK
from kseq.training.config.training_options import METRICS
from kseq.training.reporting.decisions import Decision
from kseq.training.scoring.evaluation import exact_match, model_translator, translation_scores

# Targets of at most this many words (median) are labels, codes, dates or
# numbers: one wrong character makes them wrong, and BLEU's 4-grams do not
# exist in them (a one-word target scores BLEU 0 however close it is).
SHORT_TARGET_WORDS = 3


def choose_metric(references, requested="auto"):
    """Chooses the validation metric: exact match for short targets, else chrF.

    chrF is smoother than BLEU on a few hundred sentences, and defined for
    any length.

    Args:
        references: the validation targets.
        requested: "auto" (default) or a name in `METRICS`, taken as asked.

    Returns:
        (metric name, reason).

    Raises:
        ValueError: `requested` is neither "auto" nor in `METRICS`.
    """
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
    """Scores outputs by every metric the tasks choose from.

    Args:
        hypotheses: output strings.
        references: their reference strings.

    Returns:
        {"bleu", "chrf", "exact_match"}, all on a 0-100 scale.
    """
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
        row = dataclasses.asdict(settings) if dataclasses.is_dataclass(settings) else settings
        table.append({**row, **{name: round(value, 2) for name, value in scores.items()}})
    best = max(range(len(table)), key=lambda i: (table[i][metric], -i))
    return candidates[best], table


def length_ratio_for(source_lengths, target_lengths, step=0.1, headroom=1.0, slack=DEFAULT_LENGTH_SLACK):
    """Finds the smallest length ratio whose per-source limits fit every pair's target.

    The limits are `kseq.decoding.Limits.source_limit`'s: ceil(ratio x
    source tokens) + `slack`, EOS included. Pairs with an empty source are
    ignored.

    Args:
        source_lengths: the sources' lengths in tokens.
        target_lengths: the targets' lengths in tokens, without EOS.
        step: the ratio is a multiple of it. Default 0.1.
        headroom: a factor >= 1 the ratio is multiplied by, rounded up to
            `step`. Default 1.0.
        slack: tokens the limit adds. Default `DEFAULT_LENGTH_SLACK`.

    Returns:
        The ratio, a float.

    Raises:
        ValueError: `headroom` is below 1.

    Example:
    >>> length_ratio_for([10, 4, 20], [12, 9, 15])  # 4 -> 9 tokens + EOS: ceil(4.4) + 5
    1.1
    """
    if headroom < 1:
        raise ValueError(f"`headroom` must be at least 1; got {headroom!r}.")
    pairs = [(source, target) for source, target in zip(source_lengths, target_lengths) if source > 0]
    need = max(((target - slack) / source for source, target in pairs), default=0.0)
    count = max(math.floor(need / step) + 1, 1)
    while any(math.ceil(count * step * source) + slack < target + 1 for source, target in pairs):
        count += 1  # float rounding at the boundary
    return round(math.ceil(round(count * headroom, 6)) * step, 6)


# Decoding settings tried on validation pairs where not given (the first wins
# ties). Greedy is among them: a model trained for minutes can score better
# greedy than with a beam, which prefers its too-short outputs.
BEAM_SIZES = (4, 1)
# Length penalties tried for a beam with a `patience` and for the exact rule.
# A beam that stops at its first finished hypotheses keeps too many short
# ones, which a larger penalty offsets; the exact rule searches on to long
# outputs, which 1.5 or more would then reward (chrF prefers them, BLEU drops:
# benchmarks/RESULTS.md, the beam's default stop).
LENGTH_PENALTIES, EXACT_LENGTH_PENALTIES = (0.6, 1.0, 1.5, 2.0), (0.6, 1.0)
# (n, k): an n-gram of tokens occurs at most k times. The loop guard (4, 2)
# replaced "no constraint" among the candidates: on the Bible that won on
# validation chrF in one of two runs and left 9 of 624 test outputs with a
# 4-word phrase three times or more (benchmarks/RESULTS.md, decoding quality work).
NGRAM_LIMITS = ((4, 2), (3, 1))
# The ratio that just fits the validation pairs, times this: the tight fit
# cut one of 1,000 test dates short (a 6-token source needed 0.67, the
# validation pairs 0.5; benchmarks/user_tasks.py dates). A limit only costs time on outputs
# that would loop, and the loop guard ends most of those first.
LENGTH_HEADROOM = 1.5


@dataclasses.dataclass(frozen=True)
class DecodingSettings:
    """One decoding configuration: `beam_size` (1: greedy), its
    `length_penalty`, the n-gram limit (`no_repeat_ngram` tokens at most
    `max_ngram_count` times; 0: none), `max_length_ratio` (None: the
    search's max_length alone) and the beam's `patience` (None: none)."""

    beam_size: int
    length_penalty: float
    no_repeat_ngram: int
    max_ngram_count: int
    max_length_ratio: float | None
    patience: float | None = None

    def search(self, max_length, length_penalty=None):
        """Makes the kseq.decoding search of these settings.

        Args:
            max_length: tokens an output at most.
            length_penalty: the beam's penalty instead of `self.length_penalty`
                (a scalar float32 `tf.Variable` is read at each call). Default
                None: `self.length_penalty`.

        Returns:
            A `GreedySearch` (beam size 1) or `BeamSearch`.
        """
        limits = Limits(max_length, max_length_ratio=self.max_length_ratio,
                        no_repeat_ngram_size=self.no_repeat_ngram, max_ngram_count=self.max_ngram_count)
        if self.beam_size == 1:
            return GreedySearch(limits=limits)
        penalty = self.length_penalty if length_penalty is None else length_penalty
        return BeamSearch(beam_size=self.beam_size, length_penalty=penalty, limits=limits, patience=self.patience)


class PenaltySharingTranslators:
    """Translators of `DecodingSettings` that trace one search for the
    settings differing only in their length penalty.

    A search's trace takes seconds, and the candidates tried on validation
    pairs are mostly the same search with other penalties. The shared one
    reads its penalty from a variable, set to the asked settings' before the
    translator is returned: it translates with those settings until the
    next call.

    Args:
        make: `(settings, search) -> translator`.
        max_length: tokens an output at most.
    """

    def __init__(self, make, max_length):
        self.make, self.max_length, self.made = make, max_length, {}

    def __call__(self, settings):
        key = dataclasses.replace(settings, length_penalty=0.0)
        if key not in self.made:
            penalty = tf.Variable(0.0, trainable=False, name="length_penalty")
            self.made[key] = penalty, self.make(settings, settings.search(self.max_length, penalty))
        penalty, translator = self.made[key]
        penalty.assign(settings.length_penalty)
        return translator


def decoding_candidates(beam_size="auto", length_penalty="auto", no_repeat_ngram="auto", max_length_ratio=None,
                        patience=None):
    """Lists the `DecodingSettings` to try: every combination of the values given.

    Greedy comes once, with the first penalty.

    Args:
        beam_size: a beam size, or "auto" (default): `BEAM_SIZES`.
        length_penalty: a penalty, or "auto" (default): `LENGTH_PENALTIES`
            (`EXACT_LENGTH_PENALTIES` where `patience` is None or 0: the
            exact rule).
        no_repeat_ngram: n, meaning (n, 1), or "auto" (default): `NGRAM_LIMITS`.
        max_length_ratio: the ratio every candidate takes; None (default) for none.
        patience: the beam's patience; None (default) or 0 for the exact rule.

    Returns:
        A list of `DecodingSettings`, the default first.

    Example:
    >>> [(c.beam_size, c.length_penalty) for c in decoding_candidates(no_repeat_ngram=0)]
    [(4, 0.6), (4, 1.0), (1, 0.6)]
    >>> [c.length_penalty for c in decoding_candidates(4, no_repeat_ngram=0, patience=1.0)]
    [0.6, 1.0, 1.5, 2.0]
    """
    patience = patience or None  # 0: the exact rule
    beams = list(BEAM_SIZES) if beam_size == "auto" else [beam_size]
    auto_penalties = EXACT_LENGTH_PENALTIES if patience is None else LENGTH_PENALTIES
    penalties = list(auto_penalties) if length_penalty == "auto" else [length_penalty]
    ngrams = list(NGRAM_LIMITS) if no_repeat_ngram == "auto" else [(no_repeat_ngram, 1)]
    return [DecodingSettings(beam, penalty, size, count, max_length_ratio, patience if beam > 1 else None)
            for beam in beams for penalty in penalties for size, count in ngrams
            if beam > 1 or penalty == penalties[0]]  # greedy has no penalty


def fitted_length_ratio(requested, source_lengths, target_lengths):
    """Decides `--max-length-ratio`: as given, or fitted to the validation pairs.

    For "auto" it is the smallest ratio whose limits fit every pair
    (`length_ratio_for`) times `LENGTH_HEADROOM`.

    Args:
        requested: "auto", a ratio, or 0 for none.
        source_lengths: the validation sources' lengths in tokens, cut as
            the export cuts them.
        target_lengths: the validation targets' lengths in tokens.

    Returns:
        (the ratio, None for none; reason).
    """
    if requested != "auto":
        return requested or None, "asked for"
    ratio = length_ratio_for(source_lengths, target_lengths, headroom=LENGTH_HEADROOM)
    return ratio, f"{LENGTH_HEADROOM}x the smallest that fits all {len(source_lengths)} validation pairs"


def choose_decoding(options, source_lengths, target_lengths, translator_for, valid, metric):
    """Chooses the decoding settings to test and export.

    The length ratio is `options.max_length_ratio` or fitted to the
    validation pairs' token lengths (`fitted_length_ratio`); the other
    settings are those `options` give, or, where several candidates remain,
    the one scoring best by `metric` on the first `options.tune_sentences`
    validation pairs.

    Args:
        options: the task's `DecodingOptions` (and `tune_sentences`).
        source_lengths: the validation sources' lengths in tokens.
        target_lengths: the validation targets' lengths in tokens.
        translator_for: a function of `DecodingSettings` giving a translator
            of a list of strings.
        valid: (sources, references).
        metric: the score to maximise.

    Returns:
        (the `DecodingSettings`, a `Decision` "decoding").
    """
    ratio, ratio_reason = fitted_length_ratio(options.max_length_ratio, source_lengths, target_lengths)
    print(f"max length: ceil({ratio} x source tokens) + {DEFAULT_LENGTH_SLACK} ({ratio_reason})")
    candidates = decoding_candidates(options.beam_size, options.length_penalty, options.no_repeat_ngram, ratio,
                                     options.beam_patience)
    details = {"max_length_ratio_reason": ratio_reason}
    if len(candidates) == 1:
        return candidates[0], Decision("decoding", dataclasses.asdict(candidates[0]), "asked for", details)
    start = time.time()
    sources, references = (texts[: options.tune_sentences] for texts in valid)
    best, table = tune_decoding(translator_for, candidates, sources, references, metric)
    for row in table:
        print("  decoding " + ", ".join(f"{name} {value}" for name, value in row.items()))
    details.update(decoding_candidates=table, decoding_tune_seconds=round(time.time() - start, 1))
    return best, Decision("decoding", dataclasses.asdict(best),
                          f"best {metric} on {len(sources)} validation pairs", details)


def choose_translator_decoding(options, model, tokenizer, valid, metric, decode_xla=False, target_tokenizer=None):
    """Chooses a translator's decoding (`choose_decoding`), decoding through the export's translate function.

    Args:
        options: the task's options.
        model: the trained translator.
        tokenizer: its one tokenizer, for both sides.
        valid: (sources, references).
        metric: the score to maximise.
        decode_xla: compile the translate function with XLA. Default False.
        target_tokenizer: the targets' tokenizer; None (default): `tokenizer`.

    Returns:
        {"settings": the chosen `DecodingSettings` as a dict, "metrics": the
        decision's metrics.json entries}.
    """
    target_tokenizer = target_tokenizer or tokenizer

    def token_lengths(texts, side=tokenizer):
        return side.tokenize(texts).row_lengths().numpy()

    source_lengths = [min(length, options.max_length) for length in token_lengths(valid[0])]
    translators = PenaltySharingTranslators(
        lambda settings, search: model_translator(model, tokenizer, options.max_length, search, decode_xla,
                                                  target_tokenizer=target_tokenizer),
        options.max_length)
    settings, decision = choose_decoding(options, source_lengths, token_lengths(valid[1], target_tokenizer),
                                         translators, valid, metric)
    print(decision)
    return {"settings": dataclasses.asdict(settings), "metrics": decision.metrics()}
