"""What train steps add up between two points of the train curves: the
loss, the examples or tokens trained on, the gradient norms."""

import numpy as np

from kseq._compat import loss_tracker
from kseq.training.devices.distribution import workers
from kseq.training.objectives.metrics import MaskedTokenMean


class TrainTotals:
    """What train steps add up since a `fit` began: the loss's weighted sum
    and weight (keras' logged loss is their ratio), the units trained on and
    the gradient norms' sum.

    keras zeroes its running means at each evaluation period; `end_period`
    keeps their totals first. The units are the examples (the loss's
    weight: the batches' rows), or the real label tokens a `MaskedTokenMean`
    metric counts. Each process reads its own replicas only, with no
    collective: under several workers the loss is the chief's replicas' and
    the units are theirs times the workers.

    Args:
        model: the compiled model, in `fit`, its metrics zeroed.
        units: "examples" or "tokens".

    Raises (at the first `read` after a step):
        ValueError: "tokens" without a `MaskedTokenMean` metric.
    """

    def __init__(self, model, units="examples"):
        tracker = loss_tracker(model)
        self.model, self.units, self.strategy = model, units, model.distribute_strategy
        self.loss = [tracker.total, tracker.count]
        self.tokens = None  # found after a step: without a strategy keras builds its metrics in the first trace
        self.workers = workers(self.strategy)
        optimizer = getattr(model.optimizer, "inner_optimizer", model.optimizer)
        self.norms = getattr(optimizer, "gradient_norm_sum", None)
        self.norms_before = self._first_replica(self.norms) if self.norms is not None else 0.0
        self.kept = np.zeros(3)

    def read(self):
        """Gives (loss sum, loss weight, units, norm sum) since the fit began."""
        loss_sum, weight, tokens = self.kept + self._period_sums()
        units = (tokens if self.units == "tokens" else weight) * self.workers
        norms = self._first_replica(self.norms) - self.norms_before if self.norms is not None else 0.0
        return loss_sum, weight, units, norms

    def end_period(self):
        """Keeps the period's totals, before keras zeroes them."""
        self.kept = self.kept + self._period_sums()

    def _period_sums(self):
        """(loss sum, loss weight, tokens) of the period so far, zeros before its first step."""
        loss_sum, weight = (self._local_sum(variable) for variable in self.loss)
        if self.units == "tokens" and self.tokens is None and weight > 0:
            self.tokens = token_count(self.model)
        return np.array([loss_sum, weight, self._local_sum(self.tokens) if self.tokens is not None else 0.0])

    def _local_sum(self, variable):
        return sum(float(part.numpy()) for part in self.strategy.experimental_local_results(
            getattr(variable, "value", variable)))

    def _first_replica(self, variable):
        return float(self.strategy.experimental_local_results(variable)[0].numpy())


def token_count(model):
    """Gives the real-token count of the first `MaskedTokenMean` metric `model` was compiled with.

    Args:
        model: a compiled model whose compiled metrics are built.

    Returns:
        The metric's `count` variable.

    Raises:
        ValueError: there is none.
    """
    for metric in model.metrics:
        for inner in getattr(metric, "metrics", [metric]):
            if isinstance(inner, MaskedTokenMean):
                return inner.count
    raise ValueError("tokens a second need a kseq.metrics.MaskedTokenMean metric (MaskedAccuracy or Perplexity) "
                     "compiled with the model; count examples instead.")
