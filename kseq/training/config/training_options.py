"""The training option groups: gradient clipping, the optimiser and the
batches, the learning-rate schedule, how long training runs and how often
it evaluates and saves, and when it stops. Plain values: the fit loop (`kseq.training.loop`) reads them."""

import dataclasses

from kseq.data.subword_tokenizer import BASE_PIECES
from kseq.training.config.options import AUTO, Auto, TaskOptions, option
from kseq.training.objectives.schedules import ANNEAL_SHAPES
from kseq.training.progress import parse_cadence

# The validation scores a run can stop on and choose its decoding by.
METRICS = ("bleu", "chrf", "exact_match")
# The fewest pieces a SentencePiece vocabulary of kseq's holds: its base
# pieces (special ids and bytes) and one character's. Data of more
# characters needs more (`kseq.training.vocabulary.trained_tokenizer`).
SMALLEST_VOCABULARY = BASE_PIECES + 1


def _eval_every_problem(text):
    """The message refusing `--eval-every TEXT`, else None."""
    try:
        parse_cadence(text)
    except ValueError as error:
        return f"--eval-every: {error}"
    return None


def _save_every_problem(text):
    """The message refusing `--save-every TEXT`, else None."""
    save = str(text).strip().lower()
    if save == "epoch" or (save.isdigit() and int(save) > 0):
        return None
    return f"--save-every must be 'epoch' or a positive number of steps; got {text!r}"


@dataclasses.dataclass(frozen=True)
class ClippingOptions(TaskOptions):
    """Gradient clipping: one global norm over all the weights' gradients
    (keras' `global_clipnorm`), taken after the replicas' gradients are
    summed, so that it clips as one device would; the same in every task."""

    clipnorm: float = option(1.0, "clip the gradient to this global norm (all weights' gradients as one vector; "
                             "0: no clipping)", minimum=0)


@dataclasses.dataclass(frozen=True)
class TrainingOptions(ClippingOptions):
    """The vocabulary, the batches and Adam."""

    vocab_size: int = option(4000, "SentencePiece pieces", minimum=SMALLEST_VOCABULARY)
    batch_size: int = option(32, "examples (or parallel streams) per batch", minimum=1)
    learning_rate: float = option(1e-3, "Adam's learning rate", above=0)


@dataclasses.dataclass(frozen=True)
class ScheduleOptions(TaskOptions):
    """The learning rate: the Transformer's schedule (or a constant), and the loss's smoothing."""

    warmup_steps: int = option(400, "the Transformer schedule's warm-up", minimum=1)
    learning_rate: float | None = option(None, "a constant rate instead of the schedule", above=0)
    lr_scale: float | Auto = option(AUTO, "times the schedule; auto: half for exact-match data", above=0)
    label_smoothing: float = option(0.1, "label smoothing of the loss", minimum=0, below=1)


@dataclasses.dataclass(frozen=True)
class CadenceOptions(TaskOptions):
    """How long training runs, and how often it evaluates and saves."""

    epochs: int = option(10, "passes over the training data at most", minimum=1)
    max_minutes: float | None = option(None, "training budget in minutes (default: none)", above=0)
    anneal: float = option(0.0, "anneal the learning rate to 0 over this last share of the steps, planned to end "
                           "with --max-minutes (from the measured speed) or --epochs; patience then starts the "
                           "anneal instead of stopping (0: off)", minimum=0, below=1)
    anneal_shape: str = option("linear", "the anneal's shape", choices=ANNEAL_SHAPES)
    eval_every: str = option("epoch", "evaluate at each data epoch's end (epoch), every N steps (500) or minutes "
                             "(5m), or auto: 6 times in --max-minutes, fewer where each would take over a "
                             "tenth of the time", check=_eval_every_problem)
    save_every: str = option("epoch", "save at each evaluation only (epoch), or also every N steps (200)",
                             check=_save_every_problem)
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


@dataclasses.dataclass(frozen=True)
class EvaluationOptions(CadenceOptions):
    """What each evaluation decodes: validation sentences, in a bounded time."""

    eval_seconds: float | None = option(None, "time bound of an evaluation's decoding (default: a tenth "
                                        "of a period of minutes, else 30 s)", above=0)
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
    lr_decay: float = option(0.5, "rate factor after a fall back to the best weights (1: never)", above=0,
                             maximum=1)
    average_snapshots: int = option(0, "average the last N snapshots where that scores better (0: off)",
                                    minimum=0)
    snapshot_every: int = option(100, "steps between snapshots", minimum=1)
