"""XLA for training: when it pays, what really ran, and a compile cache.

XLA compiles a train step once per batch shape. That costs seconds on a
CPU and minutes for a large model on a GPU, so a run under XLA batches into
a few fixed shapes (`kseq.data.bucketing.xla_boundaries`, remainders padded
rather than dropped) and keeps compiled programs in TensorFlow's persistent
cache, so a resumed or repeated run loads them instead of compiling again.
"""

import dataclasses
import os

import keras
import tensorflow as tf

from kseq._compat import align_function_names
from kseq._validation import check_choice
from kseq.data.bucketing import xla_boundaries
from kseq.data.pypi_data import cache_root
from kseq.training.devices.precision import device_class

# "blocks": the train step uncompiled, a TransformerSeq2Seq's blocks through
# one XLA function a stack (`TransformerSeq2Seq(compiled_blocks=True)`).
BLOCKS = "blocks"
JIT_CHOICES = ("auto", "on", "off", BLOCKS)


@dataclasses.dataclass(frozen=True)
class XlaCost:
    """What XLA was measured to cost and give on a device class."""

    speedup: float  # train-step time without XLA / with it
    compile_seconds: float  # per batch shape, beyond tracing (which both pay)
    measured: str


# Measured per device class; "auto" turns XLA on only where the saving over
# the run's budget exceeds the compile time of its shapes. The machines,
# commands and figures: benchmarks/RESULTS.md, "Precision and XLA".
MEASURED = {
    "cpu": XlaCost(
        0.98, 6.0,
        "the translation quick preset on a 2-core CPU: 0.98x the tokens/s, about 6 s to compile a shape; "
        "benchmarks/RESULTS.md, Precision and XLA",
    ),
    "gpu": XlaCost(
        0.57, 80.0,
        "the base Transformer on one H100: 386 ms a step with XLA against 220 ms without, "
        "over a minute to compile a shape; benchmarks/RESULTS.md, Precision and XLA",
    ),
}


@dataclasses.dataclass(frozen=True)
class JitDecision:
    """XLA for a train step: what was asked for, whether keras compiles the
    whole step (`use`), and why."""

    requested: str
    use: bool
    reason: str

    @property
    def compiled_blocks(self):
        """Whether the model's Transformer blocks are compiled instead (`--jit-compile blocks`)."""
        return self.requested == BLOCKS


def decide_jit_compile(requested, num_shapes, budget_minutes=None, device=None, measured=None):
    """Whether to compile the train step with XLA.

    Args:
        requested: "on", "off", "auto" or "blocks" (the step not compiled,
            the Transformer's blocks compiled; the task builds its model so).
        num_shapes: the distinct batch shapes the run will train on.
        budget_minutes: the run's training budget; None for an open-ended
            run (then only the speed-up counts).
        device: "cpu" or "gpu" (default: what TensorFlow sees).
        measured: {device: XlaCost} (default: `MEASURED`).
    """
    check_choice("jit_compile", requested, JIT_CHOICES)
    if requested == BLOCKS:
        return JitDecision(BLOCKS, False, "asked for: the train step without XLA, each Transformer stack's "
                                          "blocks through one XLA-compiled function")
    if requested != "auto":
        return JitDecision(requested, requested == "on", "asked for")
    device = device or device_class()
    cost = (measured or MEASURED)[device]
    if cost.speedup <= 1.0:
        return JitDecision("auto", False, f"auto on {device}: no faster there ({cost.measured})")
    if budget_minutes is None:
        return JitDecision("auto", True, f"auto on {device}: open-ended run ({cost.measured})")
    saved = 60.0 * budget_minutes * (1.0 - 1.0 / cost.speedup)
    spent = cost.compile_seconds * num_shapes
    use = saved > spent
    return JitDecision(
        "auto", use,
        f"auto on {device}: {num_shapes} shapes x {cost.compile_seconds:.0f} s to compile "
        f"{'<' if use else '>='} {saved:.0f} s saved over {budget_minutes:g} min ({cost.measured})",
    )


def decide_for_translation(requested, max_length, budget_minutes, arch):
    """Decides XLA for the translation task's train step.

    That is `decide_jit_compile` over the run's few XLA batch shapes
    (`kseq.data.bucketing.xla_boundaries`); on a GPU "auto" leaves the
    recurrent models off XLA (keras runs LSTM/GRU with cuDNN there, which
    XLA cannot compile).

    Args:
        requested: `--jit-compile`: "auto", "on" or "off".
        max_length: `--max-length`, which sets the batch shapes.
        budget_minutes: `--max-minutes`, or None for an open-ended run.
        arch: "transformer" or "rnn".

    Returns:
        `JitDecision`.
    """
    decision = decide_jit_compile(requested, len(xla_boundaries(max_length)), budget_minutes)
    if decision.use and arch == "rnn" and requested == "auto" and device_class() == "gpu":
        return JitDecision("auto", False, "auto on gpu: keras runs LSTM/GRU with cuDNN, which XLA cannot compile")
    return decision


def check_replicas(decision, strategy):
    """Checks an XLA decision against the strategy's replicas.

    XLA cannot train several replicas on the CPU devices of one process (a
    variable one CPU device holds cannot be read by another under XLA):
    there "auto" turns XLA off, and "on" exits with a message that says
    what to change.

    Args:
        decision: the `JitDecision`.
        strategy: the tf.distribute strategy.

    Returns:
        `decision`, or one turning "auto" off.

    Raises:
        SystemExit: "on" asked for with several CPU replicas in one process.
    """
    local = strategy.extended.worker_devices if strategy.num_replicas_in_sync > 1 else ()
    replicas_on_cpus = sum("CPU" in device for device in local)
    if not decision.use or replicas_on_cpus <= 1:
        return decision
    if decision.requested == "on":
        raise SystemExit(
            f"--jit-compile on cannot train {replicas_on_cpus} replicas on CPU devices of one "
            "process (XLA cannot read a variable another CPU device holds); use "
            "--strategy default or --jit-compile off."
        )
    return JitDecision("auto", False, f"auto: {replicas_on_cpus} CPU replicas in one process")


def keras_jit_status(model, decision):
    """Tells whether keras really runs XLA after `compile`.

    keras turns XLA off for models with layers that cannot be compiled
    (cuDNN LSTM/GRU on a GPU).

    Args:
        model: the compiled model.
        decision: the `JitDecision` it was compiled with.

    Returns:
        (whether the train step uses XLA, the reason).
    """
    ran = bool(model.jit_compile)
    if decision.use and not ran:
        return False, (
            f"{decision.reason}; keras declined XLA for this model (it holds layers XLA "
            "cannot compile, such as cuDNN LSTM/GRU on a GPU): training without XLA"
        )
    return ran, decision.reason


def jit_decision(model, decision):
    """Records XLA for `model`'s train step as keras will run it (`keras_jit_status`).

    Args:
        model: the compiled model.
        decision: the `JitDecision` it was compiled with.

    Returns:
        A `kseq.training.reporting.decisions.Decision` "jit_compile" that
        also records what was asked for: True or False, or "blocks" where
        the model compiles its Transformer blocks.
    """
    from kseq.training.reporting.decisions import Decision

    requested = {"jit_compile_requested": decision.requested}
    if not decision.compiled_blocks:
        return Decision("jit_compile", *keras_jit_status(model, decision), requested)
    if getattr(model, "compiled_blocks", False):
        return Decision("jit_compile", BLOCKS, decision.reason, requested)
    return Decision("jit_compile", False, f"{decision.reason}; this model compiles no blocks: training without XLA",
                    requested)


def enable_persistent_cache(directory=None):
    """Points TensorFlow's XLA compilation cache at `directory`.

    Call before TensorFlow sets up its devices (before a strategy, a
    device query or any op): TensorFlow 2.21 reads TF_XLA_FLAGS then, and
    ignores later changes. Programs are keyed by their HLO and signature, so
    a run that rebuilds the same model and shapes loads them instead of
    compiling. Setting it costs nothing where nothing is compiled.

    Args:
        directory: the cache folder; None keeps one already named in
            TF_XLA_FLAGS, else uses `default_cache_directory()`.

    Returns:
        The directory in use.
    """
    flag = "--tf_xla_persistent_cache_directory="
    flags = os.environ.get("TF_XLA_FLAGS", "").split()
    named = [f for f in flags if f.startswith(flag)]
    if directory is None and named:
        return named[-1][len(flag):]
    directory = directory or default_cache_directory()
    os.makedirs(directory, exist_ok=True)
    os.environ["TF_XLA_FLAGS"] = " ".join([f for f in flags if not f.startswith(flag)] + [flag + directory])
    return directory


def default_cache_directory():
    """Gives the XLA cache's default folder, one for each TensorFlow version.

    Returns:
        `$KSEQ_CACHE_DIR/xla/tf-<version>` ($KSEQ_CACHE_DIR defaults to ~/.cache/kseq).
    """
    return os.path.join(cache_root(), "xla", f"tf-{tf.__version__}")


class StableFunctionNames(keras.callbacks.Callback):
    """Aligns TensorFlow's function names before `fit` first traces its
    train step and its test step (`kseq._compat.align_function_names`), so
    that a resumed run finds its compiled programs in the persistent cache
    as a repeated run does. Put it last in the callback list: nothing may
    trace between it and the step."""

    def __init__(self):
        super().__init__()
        self._aligned = set()

    def _align_once(self, what):
        if what not in self._aligned:
            self._aligned.add(what)
            align_function_names()

    def on_train_batch_begin(self, batch, logs=None):
        self._align_once("train")

    def on_test_begin(self, logs=None):
        self._align_once("test")
