"""Learning-rate schedules."""

import math

import keras
from keras import ops

from kseq.training.reporting.decisions import Decision

# --lr-scale auto for exact-match data (benchmarks/user_tasks.py dates, 30,000
# pairs): at the full rate the validation exact match fell 95.5 ->
# 67.5% after the warm-up peak and the test reached 96.8%; at half, 98.9%
# in the same budget.
EXACT_MATCH_LR_SCALE = 0.5
# The RNN translator's constant Adam rate: 3e-3 left the unigram plateau
# sooner than 1e-3 (benchmarks/rnn_first_steps.py).
RNN_LEARNING_RATE = 3e-3


@keras.saving.register_keras_serializable("kseq")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lr = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5).

    Linear warm-up for `warmup_steps`, then decay with the inverse square
    root of the step. `step` counts from 1 (the optimizer's iteration + 1),
    so the first update does not get a zero rate.

    Args:
        d_model: the model width D.
        warmup_steps: warm-up length. Defaults to 4000 (the paper).
        scale: a constant multiplier. Defaults to 1.

    Example:
    >>> schedule = TransformerSchedule(d_model=512, warmup_steps=4000)
    >>> round(float(schedule(3999)), 6)  # the peak, at step 4000
    0.000699

    References:
        Vaswani et al., 2017, "Attention Is All You Need", section 5.3.
    """

    def __init__(self, d_model: int, warmup_steps: int = 4000, scale: float = 1.0) -> None:
        if d_model <= 0 or warmup_steps <= 0:
            raise ValueError(
                "`d_model` and `warmup_steps` must be positive; got "
                f"d_model={d_model}, warmup_steps={warmup_steps}."
            )
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        decay = ops.minimum(ops.power(step, -0.5), step * self.warmup_steps**-1.5)
        return self.scale * self.d_model**-0.5 * decay

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}


@keras.saving.register_keras_serializable("kseq")
class Scaled(keras.optimizers.schedules.LearningRateSchedule):
    """A learning-rate schedule times a variable factor that callbacks may lower.

    The rate is `schedule(step) * factor`; callbacks lower `factor` while
    training runs (e.g. `kseq.training.loop.stopping.KeepBest` on a fall);
    the traced train step reads the variable, so no retrace.

    Args:
        schedule: a schedule (a function of the step), or a constant rate.
        factor: the factor's first value. Default 1.0.

    Example:
    >>> scaled = Scaled(TransformerSchedule(d_model=64, warmup_steps=10))
    >>> _ = scaled.factor.assign(0.5)
    >>> round(float(scaled(9)) / float(TransformerSchedule(64, 10)(9)), 3)
    0.5
    """

    def __init__(self, schedule, factor: float = 1.0) -> None:
        self.schedule = schedule
        self.factor = keras.Variable(factor, trainable=False, dtype="float32", name="lr_factor")

    def __call__(self, step):
        rate = self.schedule(step) if callable(self.schedule) else self.schedule
        return ops.cast(rate, "float32") * self.factor

    def get_config(self):
        schedule = self.schedule
        if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
            schedule = keras.saving.serialize_keras_object(schedule)
        return {"schedule": schedule, "factor": float(self.factor.numpy())}

    @classmethod
    def from_config(cls, config):
        schedule = config["schedule"]
        if isinstance(schedule, dict):
            schedule = keras.saving.deserialize_keras_object(schedule)
        return cls(schedule, config["factor"])


ANNEAL_SHAPES = ("linear", "cosine")


@keras.saving.register_keras_serializable("kseq")
class Annealed(keras.optimizers.schedules.LearningRateSchedule):
    """A learning-rate schedule annealed to 0 over the last `share` of the training's steps.

    The rate is `schedule(step)` times a factor that is 1 until step
    `(1 - share) * total_steps`, then falls to 0 at `total_steps`: linearly,
    or along half a cosine. The last update (step `total_steps - 1`, the
    optimizer counting from 0) still moves the weights, by 1/(share x
    total_steps) of the rate under "linear". `total_steps` is a variable:
    `kseq.training.loop.anneal.BudgetAnneal` sets it to the steps an
    `--epochs` run makes, or to an estimate of those a time budget allows,
    and the traced train step reads it, so a new estimate needs no retrace.
    At 0 (not known yet) the factor is 1.

    Args:
        schedule: a schedule (a function of the step), or a constant rate.
        share: the anneal's part of the steps, in (0, 1).
        shape: "linear" (default) or "cosine".
        total_steps: the steps of the whole training; 0 (default): not known yet.

    Example:
    >>> annealed = Annealed(0.01, share=0.5, total_steps=100)
    >>> [round(float(annealed(step)), 4) for step in (0, 50, 75, 99)]
    [0.01, 0.01, 0.005, 0.0002]

    References:
        Li, Yumer and Ramanan, 2020, "Budgeted Training: Rethinking Deep
        Neural Network Training Under Resource Constraints" (a rate that
        reaches 0 when the budget ends).
    """

    def __init__(self, schedule, share: float, shape: str = "linear", total_steps: int = 0) -> None:
        if not 0 < share < 1:
            raise ValueError(f"`share` must be in (0, 1); got {share!r}.")
        if shape not in ANNEAL_SHAPES:
            raise ValueError(f"`shape` must be one of {ANNEAL_SHAPES}; got {shape!r}.")
        self.schedule, self.share, self.shape = schedule, float(share), shape
        self.total_steps = keras.Variable(float(total_steps), trainable=False, dtype="float32",
                                          name="anneal_total_steps")

    def factor(self, step):
        """The anneal's factor at `step` (0-based), under the current `total_steps`."""
        total = self.total_steps
        left = (total - ops.cast(step, "float32")) / ops.maximum(self.share * total, 1.0)
        left = ops.clip(left, 0.0, 1.0)  # 1 before the anneal, 0 from `total_steps` on
        if self.shape == "cosine":
            left = 0.5 - 0.5 * ops.cos(math.pi * left)
        return ops.where(total > 0, left, 1.0)

    def __call__(self, step):
        rate = self.schedule(step) if callable(self.schedule) else self.schedule
        return ops.cast(rate, "float32") * self.factor(step)

    @property
    def warmup_steps(self):
        """The warm-up of the schedule inside (e.g. a `Scaled` `TransformerSchedule`'s); 0 for none."""
        inner = self.schedule
        while inner is not None and not hasattr(inner, "warmup_steps"):
            inner = getattr(inner, "schedule", None)
        return getattr(inner, "warmup_steps", 0)

    def get_config(self):
        schedule = self.schedule
        if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
            schedule = keras.saving.serialize_keras_object(schedule)
        return {"schedule": schedule, "share": self.share, "shape": self.shape,
                "total_steps": float(self.total_steps.numpy())}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config["schedule"], dict):
            config["schedule"] = keras.saving.deserialize_keras_object(config["schedule"])
        return cls(**config)


def annealed_schedule(optimizer):
    """Finds the `Annealed` schedule an optimizer's learning rate goes through.

    Args:
        optimizer: a keras optimizer.

    Returns:
        The `Annealed` (itself, or inside the optimizer's schedule, e.g.
        under a `Scaled`), or None.
    """
    # keras 3 keeps the schedule an optimizer was made with in `_learning_rate`
    # (its public `learning_rate` is the current value); checked on keras 3.15.1.
    schedule = getattr(optimizer, "_learning_rate", None)
    while schedule is not None and not isinstance(schedule, Annealed):
        schedule = getattr(schedule, "schedule", None)
    return schedule


def translation_learning_rate(arch, d_model, warmup_steps, metric, scale="auto", rate=None):
    """Makes a translation task's learning rate and records its scale.

    A `Scaled` schedule (which `KeepBest` lowers after a fall): the
    Transformer's schedule for `arch` "transformer", else `RNN_LEARNING_RATE`,
    times `scale` ("auto": `EXACT_MATCH_LR_SCALE` for exact-match data, else
    1). A constant `rate` given replaces both.

    Args:
        arch: "transformer" or "rnn".
        d_model: D, the Transformer's width.
        warmup_steps: the Transformer schedule's warm-up steps.
        metric: the run's metric; "exact_match" data gets a larger rate under "auto".
        scale: "auto" (default) or a number multiplying the rate.
        rate: a constant rate (`--learning-rate`); None (default) for the schedule.

    Returns:
        (a `Scaled` schedule, a `Decision` "lr_scale").

    Example:
    >>> schedule, decision = translation_learning_rate("rnn", 256, 400, "exact_match")
    >>> round(float(schedule(0)), 6), decision.reason
    (0.0015, 'auto: exact_match data')
    """
    reason = "asked for"
    if scale == "auto":
        scale = EXACT_MATCH_LR_SCALE if metric == "exact_match" else 1.0
        reason = f"auto: {metric} data"
    if rate is not None:
        return Scaled(rate), Decision("lr_scale", scale, "--learning-rate given")
    if arch == "transformer":
        return Scaled(TransformerSchedule(d_model, warmup_steps, scale)), Decision("lr_scale", scale, reason)
    return Scaled(RNN_LEARNING_RATE * scale), Decision("lr_scale", scale, reason)


# Fine-tuning a pretrained translator (`kseq-train translate --pretrained`):
# a constant rate after a short linear warm-up. The rate is far below the
# Transformer schedule's peak for an OPUS-MT width (7e-4 for D=512 and 4,000
# warm-up steps), which would overwrite what the pretrained weights know; the
# warm-up lets Adam's moment estimates settle before full-size steps.
FINE_TUNING_RATE = 5e-5
FINE_TUNING_WARMUP = 100


@keras.saving.register_keras_serializable("kseq")
class WarmupConstant(keras.optimizers.schedules.LearningRateSchedule):
    """lr = rate * min(1, (step + 1) / warmup_steps): a linear warm-up, then constant.

    Args:
        rate: the rate after the warm-up.
        warmup_steps: the steps of the warm-up. Defaults to 100.

    Example:
    >>> schedule = WarmupConstant(1e-4, warmup_steps=10)
    >>> [round(float(schedule(step)), 6) for step in (0, 4, 9, 50)]
    [1e-05, 5e-05, 0.0001, 0.0001]
    """

    def __init__(self, rate: float, warmup_steps: int = FINE_TUNING_WARMUP) -> None:
        self.rate, self.warmup_steps = float(rate), int(warmup_steps)

    def __call__(self, step):
        progress = (ops.cast(step, "float32") + 1.0) / float(max(self.warmup_steps, 1))
        return self.rate * ops.minimum(1.0, progress)

    def get_config(self):
        return {"rate": self.rate, "warmup_steps": self.warmup_steps}


def fine_tuning_learning_rate(rate=None, warmup_steps=None):
    """Makes the learning rate for fine-tuning a pretrained translator, and its `Decision`.

    Args:
        rate: `--learning-rate`, the rate after the warm-up; None (default): `FINE_TUNING_RATE`.
        warmup_steps: `--warmup-steps`; None (default): `FINE_TUNING_WARMUP`.

    Returns:
        (a `Scaled(WarmupConstant)` schedule, which `KeepBest` lowers after a
        fall; a `Decision` "learning_rate" saying why).

    Example:
    >>> schedule, decision = fine_tuning_learning_rate()
    >>> decision.value
    {'rate': 5e-05, 'warmup_steps': 100}
    """
    chosen = {"rate": FINE_TUNING_RATE if rate is None else float(rate),
              "warmup_steps": FINE_TUNING_WARMUP if warmup_steps is None else int(warmup_steps)}
    reasons = []
    if rate is None:
        reasons.append(f"fine-tuning: {FINE_TUNING_RATE:g}, far below the Transformer schedule's peak for a "
                       "pretrained model's width (7e-4 for D=512), which would overwrite what it knows")
    if warmup_steps is None:
        reasons.append(f"a {FINE_TUNING_WARMUP}-step warm-up lets Adam's moments settle first")
    reason = "; ".join(reasons) or "--learning-rate and --warmup-steps given"
    return Scaled(WarmupConstant(**chosen)), Decision("learning_rate", chosen, reason)
