"""Training precision: float32, or keras' mixed policies, chosen by measurement.

Under "mixed_bfloat16" and "mixed_float16" variables stay float32 and
layers compute in 16 bits, while kseq keeps softmax (attention weights, the
loss) and LayerNorm in float32. "mixed_float16" needs loss scaling, which
keras' `Model.compile` adds (a `LossScaleOptimizer`) for a model built
under that policy.

On Ampere and later NVIDIA GPUs TensorFlow runs float32 matmuls and
convolutions as TF32 by default (10-bit mantissa, about 1e-3 relative
error per product): "float32" there means float32 storage with TF32 math
unless `tf.config.experimental.enable_tensor_float_32_execution(False)`
is called. kseq never changes that setting; `describe_precision` reports it.
"""

import dataclasses

import tensorflow as tf

from kseq._validation import check_choice

PRECISIONS = ("auto", "float32", "mixed_bfloat16", "mixed_float16")

# What "auto" picks per device class: the fastest train step measured there.
# The machines, commands and figures: benchmarks/RESULTS.md, "Precision and XLA".
MEASURED_FASTEST = {
    "cpu": (
        "float32",
        "the fastest train step measured on a CPU without bfloat16 units; benchmarks/RESULTS.md, "
        "Precision and XLA",
    ),
    "cpu-bf16": (
        "mixed_bfloat16",
        "the fastest train step measured on a CPU with bfloat16 units; benchmarks/RESULTS.md, "
        "Precision and XLA",
    ),
    "gpu": (
        "float32",
        "the fastest train step measured on an H100, where float32 matmuls run as TF32; "
        "benchmarks/RESULTS.md, Precision and XLA",
    ),
}


@dataclasses.dataclass(frozen=True)
class Precision:
    """A resolved precision: the keras dtype policy and why it was chosen."""

    policy: str  # "float32", "mixed_bfloat16" or "mixed_float16"
    requested: str
    reason: str

    def as_dict(self):
        return {"precision": self.policy, "precision_requested": self.requested,
                "precision_reason": self.reason, "tf32": tf32_enabled()}

    def as_decision(self):
        """The same entries as a `kseq.training.reporting.decisions.Decision`."""
        from kseq.training.reporting.decisions import Decision

        return Decision("precision", self.policy, self.reason,
                        {"precision_requested": self.requested, "tf32": tf32_enabled()})


def device_class():
    """"gpu" when TensorFlow sees a GPU, else "cpu". Asks for physical
    devices, which leaves TensorFlow's runtime (and its flags) unset."""
    return "gpu" if tf.config.list_physical_devices("GPU") else "cpu"


def cpu_has_bfloat16_units(cpuinfo="/proc/cpuinfo"):
    """Tells whether this (Linux, x86-64) CPU has bfloat16 dot-product instructions.

    Those are AVX512_BF16 or AMX-BF16, which oneDNN's bfloat16 matmuls run
    on; without them TensorFlow emulates bfloat16 through float32 and gains
    nothing.

    Args:
        cpuinfo: the file listing the CPU's flags. Default "/proc/cpuinfo".

    Returns:
        True where the flags name either; False where they do not or the
        file cannot be read.
    """
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("flags"):
                    return bool({"avx512_bf16", "amx_bf16"} & set(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return False


def precision_class():
    """The device class whose measurements "auto" precision uses: "gpu",
    "cpu-bf16" (a CPU with bfloat16 units) or "cpu"."""
    if device_class() == "gpu":
        return "gpu"
    return "cpu-bf16" if cpu_has_bfloat16_units() else "cpu"


def resolve_precision(requested="auto", device=None, bfloat16_cpu=True):
    """Resolves the precision asked for into a `Precision`.

    "auto" picks `MEASURED_FASTEST` for the device class (`precision_class()`
    unless given); any other value is taken as asked. On a CPU with bfloat16
    units, `bfloat16_cpu` says what was measured for the model: True, that
    it trains well under mixed_bfloat16; False, nothing (the tasks say
    which were); a sentence, why float32 trained it better. Without True
    such a CPU is treated as one without bfloat16 units.

    Args:
        requested: "auto" (default) or a policy name in `PRECISIONS`.
        device: "gpu", "cpu-bf16" or "cpu"; None (default): `precision_class()`.
        bfloat16_cpu: True (default), False, or a sentence (see above).

    Returns:
        `Precision`: the policy, what was requested and why.

    Raises:
        ValueError: `requested` is not in `PRECISIONS`.
    """
    check_choice("precision", requested, PRECISIONS)
    if requested != "auto":
        return Precision(requested, requested, "asked for")
    device = device or precision_class()
    if device == "cpu-bf16" and bfloat16_cpu is not True:
        policy, measured = MEASURED_FASTEST["cpu"]
        why = bfloat16_cpu or f"where this model was not measured: as on a CPU without bfloat16 units ({measured})"
        return Precision(policy, "auto", f"auto on cpu-bf16, {why}")
    policy, measured = MEASURED_FASTEST[device]
    return Precision(policy, "auto", f"auto on {device}: {measured}")


def tf32_enabled():
    """Whether float32 matmuls may run as TF32 (only matters on a GPU)."""
    return bool(tf.config.experimental.tensor_float_32_execution_enabled())


def describe_precision(precision):
    """Describes the precision in one line for a task's log.

    Args:
        precision: the resolved `Precision`.

    Returns:
        The line, with TF32 or loss scaling where they apply.
    """
    line = f"precision: {precision.policy} ({precision.reason})"
    if precision.policy == "float32" and device_class() == "gpu" and tf32_enabled():
        line += "; float32 matmuls run as TF32 on this GPU (TensorFlow's default)"
    if precision.policy == "mixed_float16":
        line += "; dynamic loss scaling"
    return line
