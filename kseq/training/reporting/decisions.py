"""What an "auto" option became, and why, as one value."""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Decision:
    """A choice a task made for the user (the metric, the learning rate,
    the model size, the decoding, XLA, the precision): printed, written to
    metrics.json and logged as an HParam in one way.

    Args:
        name: the setting decided (metrics.json's key).
        value: what was chosen.
        reason: why, in words (metrics.json's `<name>_reason`).
        details: further metrics.json entries that back the choice up.

    Example:
    >>> decision = Decision("beam_size", 4, "best chrF on 200 validation pairs")
    >>> print(decision)
    beam_size: 4 (best chrF on 200 validation pairs)
    >>> decision.metrics()
    {'beam_size': 4, 'beam_size_reason': 'best chrF on 200 validation pairs'}
    """

    name: str
    value: object
    reason: str
    details: dict = dataclasses.field(default_factory=dict)

    def __str__(self):
        return f"{self.name}: {self.value} ({self.reason})"

    def metrics(self):
        """{name: value, name_reason: reason, **details} for metrics.json."""
        return {self.name: self.value, f"{self.name}_reason": self.reason, **self.details}


def as_metrics(decisions):
    """The metrics.json entries of several decisions, in order."""
    merged = {}
    for decision in decisions:
        merged.update(decision.metrics())
    return merged


def as_hparams(decisions):
    """{name: value} of several decisions, for TensorBoard's HParams."""
    return {decision.name: decision.value for decision in decisions}
