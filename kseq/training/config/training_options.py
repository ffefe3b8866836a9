"""The training option groups: gradient clipping, the optimiser and the
batches, the learning-rate schedule, how long training runs and how often
it evaluates and saves, and when it stops. Plain values: the fit loop (`kseq.training.loop`) reads them."""

import dataclasses

from kseq.training.config.options import AUTO, Auto, TaskOptions, option
from kseq.training.progress import parse_cadence

# The validation scores a run can stop on and choose its decoding by.
METRICS = ("bleu", "chrf", "exact_match")


@dataclasses.dataclass(frozen=True)
class ClippingOptions(TaskOptions):
    """Gradient clipping: one global norm over all the weights' gradients
    (keras' `global_clipnorm`), taken after the replicas' gradients are
    summed, so that it clips as one device would; the same in every task."""

    clipnorm: float = option(1.0, "clip the gradient to this global norm (all weights' gradients as one vector)")


@dataclasses.dataclass(frozen=True)
class TrainingOptions(ClippingOptions):
    """The vocabulary, the batches and Adam."""

    vocab_size: int = option(4000, "SentencePiece pieces", minimum=1)
    batch_size: int = option(32, "examples (or parallel streams) per batch", minimum=1)
    learning_rate: float = option(1e-3, "Adam's learning rate")


@dataclasses.dataclass(frozen=True)
class ScheduleOptions(TaskOptions):
    """The learning rate: the Transformer's schedule (or a constant), and the loss's smoothing."""

    warmup_steps: int = option(400, "the Transformer schedule's warm-up", minimum=1)
    learning_rate: float | None = option(None, "a constant rate instead of the schedule")
    lr_scale: float | Auto = option(AUTO, "times the schedule; auto: half for exact-match data")
    label_smoothing: float = option(0.1, "label smoothing of the loss")

    def problems(self):
        return super().problems() + [message for broken, message in (
            (self.lr_scale != AUTO and not self.lr_scale > 0, "--lr-scale must be auto or > 0"),
            (self.learning_rate is not None and not self.learning_rate > 0, "--learning-rate must be > 0"),
        ) if broken]


@dataclasses.dataclass(frozen=True)
class CadenceOptions(TaskOptions):
    """How long training runs, and how often it evaluates and saves."""

    epochs: int = option(10, "passes over the training data at most", minimum=1)
    max_minutes: float | None = option(None, "training budget in minutes (default: none)")
    eval_every: str = option("epoch", "evaluate at each data epoch's end (epoch), every N steps (500) or minutes "
                             "(5m), or auto: 6 times in --max-minutes, fewer where each would take over a "
                             "tenth of the time")
    save_every: str = option("epoch", "save at each evaluation only (epoch), or also every N steps (200)")
    log_every: int | Auto = option(AUTO, "TensorBoard's train curves (loss, learning rate, examples or tokens a "
                                   "second, gradient norm) every N steps; auto: 300 points or more in the run, at "
                                   "least one a progress line (30 s)", minimum=1)

    @property
    def cadence(self):
        """Gives `--eval-every` as a `kseq.training.progress.Cadence`."""
        return parse_cadence(self.eval_every, self.max_minutes)

    @property
    def save_steps(self):
        """Gives `--save-every` as `kseq.training.loop.Fit` takes it: "epoch" or steps."""
        save = self.save_every.strip().lower()
        return save if save == "epoch" else int(save)

    def problems(self):
        found = super().problems()
        try:
            self.cadence
        except ValueError as error:
            found.append(f"--eval-every: {error}")
        save = self.save_every.strip().lower()
        if save != "epoch" and not (save.isdigit() and int(save) > 0):
            found.append(f"--save-every must be 'epoch' or a positive number of steps; got {self.save_every!r}")
        return found


@dataclasses.dataclass(frozen=True)
class EvaluationOptions(CadenceOptions):
    """What each evaluation decodes: validation sentences, in a bounded time."""

    eval_seconds: float | None = option(None, "time bound of an evaluation's decoding (default: a tenth "
                                        "of a period of minutes, else 30 s)")
    eval_sentences: int = option(200, "validation pairs decoded at each evaluation", minimum=1)

    @property
    def decoding_seconds(self):
        """The time bound of an evaluation's decoding."""
        if self.eval_seconds is not None:
            return self.eval_seconds
        return 6.0 * self.cadence.minutes if self.cadence.minutes else 30.0


@dataclasses.dataclass(frozen=True)
class StoppingOptions(TaskOptions):
    """When training stops, and which weights it keeps."""

    metric: str = option(AUTO, "validation score; auto: exact match for short targets, else chrF",
                         choices=(AUTO, *METRICS))
    patience: int = option(3, "evaluations without improvement before stopping (0: never)", minimum=0)
    lr_decay: float = option(0.5, "rate factor after a fall back to the best weights (1: never)")
    average_snapshots: int = option(0, "average the last N snapshots where that scores better (0: off)",
                                    minimum=0)
    snapshot_every: int = option(100, "steps between snapshots", minimum=1)

    def problems(self):
        return super().problems() + ([] if 0 < self.lr_decay <= 1 else ["--lr-decay must be in (0, 1]"])
