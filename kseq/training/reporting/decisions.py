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
        """Gives the decision's entries for metrics.json.

        Returns:
            {name: value, name_reason: reason, **details}.
        """
        return {self.name: self.value, f"{self.name}_reason": self.reason, **self.details}


def as_metrics(decisions):
    """Merges the metrics.json entries of several decisions, in order.

    Args:
        decisions: `Decision`s.

    Returns:
        {entry: value}; a later decision's entry replaces an earlier one's.
    """
    merged = {}
    for decision in decisions:
        merged.update(decision.metrics())
    return merged


def as_hparams(decisions):
    """Lists several decisions' values, for TensorBoard's HParams.

    Args:
        decisions: `Decision`s.

    Returns:
        {name: value}.
    """
    return {decision.name: decision.value for decision in decisions}
