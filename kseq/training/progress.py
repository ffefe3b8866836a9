"""Where a run is: its global step, the batches trained, how far into the
data, and the cadence of its evaluations. Plain functions under every part
of kseq.training (the fit loop, resuming, averaging, options)."""

import dataclasses
import re

from kseq._compat import batches_applied


def global_step(model):
    """Gives the optimizer's step count, its updates: the x-axis of every curve kseq's callbacks write.

    Args:
        model: a keras model.

    Returns:
        The step, an int; 0 without an optimizer.
    """
    optimizer = getattr(model, "optimizer", None)
    return int(optimizer.iterations.numpy()) if optimizer is not None else 0


def batches_trained(model):
    """Counts the batches trained on; the data position follows it.

    That is the global step times the batches each update accumulates
    (`gradient_accumulation_steps`), plus those of an update in progress.

    Args:
        model: a keras model.

    Returns:
        The count, an int; 0 without an optimizer.
    """
    optimizer = getattr(model, "optimizer", None)
    return batches_applied(optimizer) if optimizer is not None else 0


# "auto" evaluations take at most this share of the time between them: on a
# slow CPU an evaluation takes the same seconds in a short budget as in a
# long one, and every second of it is a second less of training.
AUTO_EVALUATION_SHARE = 0.1


@dataclasses.dataclass(frozen=True)
class Cadence:
    """How often evaluation runs: every `steps` train steps, `minutes` of
    training or data epoch (`epoch`; one of the three).

    With `evaluation_share`, a period of minutes lasts at least the last
    evaluation's seconds over that share (so evaluations take at most
    that share of the time)."""

    steps: int = None
    minutes: float = None
    epoch: bool = False
    evaluation_share: float = None

    def __str__(self):
        if self.epoch:
            return "every data epoch"
        if self.steps:
            return f"every {self.steps} steps"
        longer = (f", longer where an evaluation would take over {self.evaluation_share:.0%} of the time"
                  if self.evaluation_share else "")
        return f"every {self.minutes:.3g} min{longer}"

    def period_seconds(self, evaluation_seconds=None):
        """The seconds of a period of minutes, given the last evaluation's seconds (None: none yet)."""
        seconds = 60.0 * self.minutes
        if self.evaluation_share and evaluation_seconds:
            seconds = max(seconds, evaluation_seconds / self.evaluation_share)
        return seconds


def parse_cadence(text, budget_minutes=None, periods=6, open_ended_minutes=10.0):
    """Parses `--eval-every` into a `Cadence`.

    Args:
        text: "500" (steps), "5m" or "5min" (minutes), "epoch" (at each
            data epoch's end), or "auto" (minutes, spaced so that
            evaluations take at most `AUTO_EVALUATION_SHARE` of the time).
        budget_minutes: the training budget, for "auto"; None (default) for none.
        periods: evaluations "auto" makes over the budget. Default 6.
        open_ended_minutes: minutes between "auto" evaluations without a
            budget. Default 10.

    Returns:
        The `Cadence`.

    Raises:
        ValueError: `text` is none of those forms, or not positive.
    """
    text = str(text).strip().lower()
    if text == "epoch":
        return Cadence(epoch=True)
    if text == "auto":
        return Cadence(minutes=budget_minutes / periods if budget_minutes else open_ended_minutes,
                       evaluation_share=AUTO_EVALUATION_SHARE)
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(m|min|minutes?)?", text)
    if not match or float(match.group(1)) <= 0 or (not match.group(2) and "." in match.group(1)):
        raise ValueError(
            f"`eval_every` must be a number of steps (e.g. 500), minutes (e.g. 5m), 'epoch' or 'auto'; got {text!r}."
        )
    if match.group(2):
        return Cadence(minutes=float(match.group(1)))
    return Cadence(steps=int(match.group(1)))


def data_epochs(model, position=None, steps_per_epoch=None):
    """Tells how far `model`'s training is into its data, in epochs.

    Args:
        model: the model in training.
        position: the `TrainingPosition` of the data; None (default) for none.
        steps_per_epoch: batches per data epoch, used without a `position`;
            None (default) where unknown.

    Returns:
        A float, or None when neither tells.
    """
    batches = batches_trained(model)
    if position is not None:
        return position.data_epochs(batches)
    return batches / steps_per_epoch if steps_per_epoch else None
