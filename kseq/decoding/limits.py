"""Where a search stops and what it may not repeat: one value every search holds."""

import dataclasses
import math

from kseq.special_ids import EOS_ID
from kseq._validation import check_float, check_positive_int

# Tokens a source-length limit allows beyond ratio x source tokens: room for
# EOS and for short sources (a 2-token source may have a 4-token target).
DEFAULT_LENGTH_SLACK = 5


@dataclasses.dataclass(frozen=True)
class Limits:
    """The limits `GreedySearch`, `BeamSearch` and `Sampler` apply
    (`search.limits`), read by kseq.decoding.constraints.

    Args:
        max_length: the most tokens a row generates, EOS included.
        max_length_ratio: with a Seq2Seq model, a row also ends by
            ceil(ratio x its source tokens) + `length_slack` tokens (None:
            `max_length` alone).
        length_slack: the tokens a source-length limit allows beyond the
            ratio. Defaults to `DEFAULT_LENGTH_SLACK` (5).
        no_repeat_ngram_size: n > 0 limits how often an n-gram of tokens
            occurs in a row's output (0: no limit).
        max_ngram_count: how many times such an n-gram may occur (1: never
            twice; 2 lets a phrase come back once but never loop).
        eos_id: the id that ends a row (-1: never stop early).

    Example:
    >>> limits = Limits(64, max_length_ratio=1.5)
    >>> limits.source_limit(10)  # ceil(1.5 x 10) + 5
    20
    """

    max_length: int
    max_length_ratio: float | None = None
    length_slack: int = DEFAULT_LENGTH_SLACK
    no_repeat_ngram_size: int = 0
    max_ngram_count: int = 1
    eos_id: int = EOS_ID

    def __post_init__(self):
        checked = dict(
            max_length=check_positive_int("max_length", self.max_length),
            max_length_ratio=None if self.max_length_ratio is None else check_float(
                "max_length_ratio", self.max_length_ratio, low=0, low_open=True),
            length_slack=check_positive_int("length_slack", self.length_slack, allow_zero=True),
            no_repeat_ngram_size=check_positive_int("no_repeat_ngram_size", self.no_repeat_ngram_size,
                                                    allow_zero=True),
            max_ngram_count=check_positive_int("max_ngram_count", self.max_ngram_count),
            eos_id=int(self.eos_id),
        )
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    def source_limit(self, source_tokens):
        """Gives the most tokens a row with `source_tokens` source tokens may generate.

        `constraints.source_length_limits` is the in-graph form.

        Args:
            source_tokens: the row's source tokens (PAD not counted).

        Returns:
            A Python int: `max_length` without a `max_length_ratio`, else
            ceil(ratio x `source_tokens`) + `length_slack`, at most `max_length`.
        """
        if self.max_length_ratio is None:
            return self.max_length
        return min(math.ceil(self.max_length_ratio * source_tokens) + self.length_slack, self.max_length)


def search_limits(limits=None, max_length=None, **options):
    """Gives a search's `Limits`: `limits` as given, or made from `max_length` and the keyword `options`, not both.

    Args:
        limits: a `Limits`, or None to make one. Default None.
        max_length: the most tokens a row generates, when `limits` is None. Default None.
        **options: the other `Limits` fields (`max_length_ratio`, `length_slack`,
            `no_repeat_ngram_size`, `max_ngram_count`, `eos_id`); with `limits`,
            each must keep its default.

    Returns:
        The `Limits`.

    Raises:
        ValueError: neither `max_length` nor `limits` given, or both `limits`
            and limit arguments; or a bad limit (see `Limits`).
        TypeError: `limits` is not a `Limits`.
    """
    if limits is None:
        if max_length is None:
            raise ValueError("A search needs `max_length` or `limits`.")
        return Limits(max_length, **options)
    if not isinstance(limits, Limits):
        raise TypeError(f"`limits` must be a kseq.decoding.Limits; got {type(limits).__name__}.")
    defaults = Limits(1)
    given = sorted(name for name, value in options.items() if value != getattr(defaults, name))
    if max_length is not None or given:
        raise ValueError(f"Give `limits` or the limits as arguments, not both; got `limits` and "
                         f"{', '.join(f'`{name}`' for name in (['max_length'] if max_length is not None else []) + given)}.")
    return limits
