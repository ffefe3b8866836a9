"""The Transformer's width and dropout from the size of the training data,
where the user does not say.

What matters is how often the budget can go over the data. Open text seen a
few dozen times is learned by heart by the quick preset's model (no dropout),
and a narrower model with dropout translates it better; seen 8-17 times, the
preset's model without dropout did best, and dropout only slowed it. Short
deterministic targets (exact-match data) have nothing to learn by heart
beyond the rule: dropout did not help there. Figures: benchmarks/RESULTS.md,
"Model size from the data".
"""

import math

import numpy as np

from kseq._validation import check_positive_int
from kseq.training.reporting.decisions import Decision

# More expected passes than this: small data for the budget. The preset did
# best on the Bible (7.5 counted) and 10,000 of its verses (22.3 counted),
# the small model on 3,000 verses (66 counted).
SMALL_DATA_PASSES = 30.0
# Upper bounds for the widths, a floor for the dropout: never wider, never
# less dropout than the preset.
SMALL_DATA_MODEL = dict(d_model=128, num_heads=4, ff_dim=512, dropout=0.3)
WIDTHS = ("d_model", "num_heads", "ff_dim")
# Target tokens a minute each translation preset's model trains on, for the
# passes `choose_model_size` counts: quick, the Bible runs on a 2-core CPU
# (between their float32 and mixed_bfloat16 rates); gpu, the base model's
# train step on one H100 (the gpu preset's smaller model is faster, so its
# passes are counted low); base, epochs alone. The figures:
# benchmarks/RESULTS.md, "Translation quality now".
TOKENS_PER_MINUTE = {"quick": 750_000, "gpu": 6_700_000, "base": None}
# The recurrent translator where the user does not say: one layer, which
# leaves the unigram plateau sooner than two and steps faster
# (benchmarks/RESULTS.md, "Translation quality now").
RNN_MODEL = dict(num_layers=1)
RNN_REASON = "measured for the RNN translator (benchmarks/results/translation-quality/results-rnn-*.md)"


def expected_passes(train_tokens, epochs, minutes=None, tokens_per_minute=None):
    """Estimates how many times training can go over the training data.

    Args:
        train_tokens: the training targets' tokens, > 0.
        epochs: the most passes, > 0.
        minutes: the training budget; None (default) for none.
        tokens_per_minute: the model's training rate in target tokens;
            None (default) where unknown.

    Returns:
        `epochs` as a float, or fewer passes where `minutes` at
        `tokens_per_minute` end training first (3 significant digits).

    Raises:
        ValueError: a count is not a positive int, or `minutes` or
            `tokens_per_minute` is not > 0.

    Example:
    >>> expected_passes(500_000, epochs=1000, minutes=12, tokens_per_minute=750_000)
    18.0
    """
    check_positive_int("train_tokens", train_tokens)
    check_positive_int("epochs", epochs)
    if minutes is None or tokens_per_minute is None:
        return float(epochs)
    if not (minutes > 0 and tokens_per_minute > 0):
        raise ValueError(f"`minutes` and `tokens_per_minute` must be > 0; got {minutes!r}, {tokens_per_minute!r}.")
    # Three significant digits: a corpus larger than the budget covers has
    # a fraction of a pass, never zero.
    return float(f"{min(float(epochs), minutes * tokens_per_minute / train_tokens):.3g}")


def model_for_data(passes, metric, preset):
    """Sizes the Transformer for the data: the preset's widths and dropout, or narrower for small data.

    For open text (`metric` other than "exact_match") that training passes
    over more than `SMALL_DATA_PASSES` times, the widths are capped and the
    dropout raised by `SMALL_DATA_MODEL`.

    Args:
        passes: expected passes over the data (`expected_passes`), > 0.
        metric: the validation metric, such as "chrf" or "exact_match".
        preset: the preset's {"d_model", "num_heads", "ff_dim", "dropout"}.

    Returns:
        (settings: those four, reason: a sentence saying why).

    Raises:
        ValueError: `passes` is not a positive number, or `preset` lacks a key.

    Example:
    >>> preset = dict(d_model=192, num_heads=4, ff_dim=768, dropout=0.0)
    >>> model_for_data(45.0, "chrf", preset)[0]
    {'d_model': 128, 'num_heads': 4, 'ff_dim': 512, 'dropout': 0.3}
    >>> model_for_data(45.0, "exact_match", preset)[0] == preset
    True
    """
    if not math.isfinite(passes) or passes <= 0:
        raise ValueError(f"`passes` must be a positive number; got {passes!r}.")
    missing = sorted(set(SMALL_DATA_MODEL) - set(preset))
    if missing:
        raise ValueError(f"`preset` needs {', '.join(missing)}; got {sorted(preset)}.")
    settings = {name: preset[name] for name in SMALL_DATA_MODEL}
    if metric == "exact_match":
        return settings, "the preset's: short deterministic targets (exact match) did not gain from dropout"
    if passes <= SMALL_DATA_PASSES:
        return settings, f"the preset's: {passes:g} expected passes over the data (<= {SMALL_DATA_PASSES:g})"
    settings.update({name: min(settings[name], SMALL_DATA_MODEL[name]) for name in WIDTHS})
    while settings["d_model"] % settings["num_heads"]:  # heads must split the width
        settings["num_heads"] -= 1
    settings["dropout"] = max(settings["dropout"], SMALL_DATA_MODEL["dropout"])
    return settings, f"small data: {passes:g} expected passes over the data (> {SMALL_DATA_PASSES:g})"


def choose_model_size(options, target_lengths, metric, pairs=None):
    """Chooses the translator's size from the data (`model_for_data`) where the user does not say.

    It reads the options' preset, arch, widths, dropout, max_length, epochs,
    max_minutes and options_given, and counts the training targets' tokens
    (over-long ones are left out, as the pipeline drops them, and each gets
    its EOS). Options given keep their values, a width given keeps every
    width. The RNN gets `RNN_MODEL` on the
    quick preset instead (the rule was measured on the Transformer).

    Args:
        options: the translate task's options.
        target_lengths: the training targets' token counts (or a sample's).
        metric: the validation metric.
        pairs: the corpus's pairs, where `target_lengths` is a uniform
            sample of them; None (default): all of them.

    Returns:
        (settings: {option: value} to change, a `Decision` "model_size").
    """
    lengths = np.asarray(target_lengths)
    tokens = int((lengths[lengths <= options.max_length] + 1).sum())
    if pairs is not None and len(lengths):
        tokens = round(tokens * pairs / len(lengths))
    passes = expected_passes(max(tokens, 1), options.epochs, options.max_minutes,
                             TOKENS_PER_MINUTE.get(options.preset))
    given = set(options.options_given)
    if options.arch == "rnn":
        shown, counted = tuple(RNN_MODEL), set(RNN_MODEL)
        settings, reason = ((dict(RNN_MODEL), RNN_REASON) if options.preset == "quick"
                            else ({}, "the preset's: RNN_MODEL was measured on the quick preset"))
    else:
        shown, counted = tuple(SMALL_DATA_MODEL), {"num_layers", *SMALL_DATA_MODEL}
        settings, reason = model_for_data(passes, metric, {name: getattr(options, name) for name in shown})
        if given & {"num_layers", *WIDTHS}:
            settings, reason = {"dropout": settings["dropout"]}, reason + "; widths as given"
    current = {name: getattr(options, name) for name in shown}
    settings = {name: value for name, value in settings.items() if name not in given}
    details = {"train_target_tokens": tokens, "expected_passes": passes,
               "model_size_options_given": sorted(given & counted)}
    return settings, Decision("model_size", {**current, **settings}, reason, details)
