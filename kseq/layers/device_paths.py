"""Which of the Transformer's alternative paths a layer builds: each a switch of its own.

Each path computes the function of the default path it stands in for, with
the same weights and configs, and runs on any device, so a model built with
one exports and runs with the other. They were written for a GPU, which pays
a kernel launch (and a pass over memory) for every op TensorFlow runs
without XLA, and for per-block XLA. None is on by default: a path becomes a
default only once a GPU has timed it faster than the path it replaces, in the
same run (`benchmarks/gpu_suite.sh decide`; figures in benchmarks/RESULTS.md,
"GPU").

A layer asks once, in `build()` (a loss in its constructor), and keeps the
answer: its graph never branches per call.

Choose paths with `FORCE` (True: all, False: none, or an iterable of names)
before the layers are built, or with the environment variable
`KSEQ_GPU_PATHS` before the process builds them: "1" (all), "0" (none), or
names joined by commas ("layer_norm,compiled_blocks").
"""

import os

FORCE = None
ENVIRONMENT_VARIABLE = "KSEQ_GPU_PATHS"

PATHS = {
    "layer_norm": "LayerNorm's statistics as one training-mode FusedBatchNormV3 op each way (rows as "
                  "channels), gamma and beta as plain ops",
    "step_dropout": "every dropout mask of a training step from one Philox key (StepDropout), where "
                    "keras derives a key at each Dropout call",
    "loss_backward": "the label-smoothed loss's backward multiply and subtraction as one inference-mode "
                     "FusedBatchNormV3 op",
    "compiled_blocks": "each Transformer block of a training step as one XLA-compiled function that takes "
                       "the block's weights: compiled once a stack, forward and backward, whatever the depth",
    "compiled_loss": "the label-smoothed loss as one XLA-compiled function, forward and backward",
    "bias_gradients": "bias, gamma and beta gradients as a product with a ones vector, where TensorFlow "
                      "runs BiasAddGrad (shared atomics in bfloat16) or column reductions",
    "attention_transposes": "attention scores from a matmul that reads the keys transposed (adj_y), "
                            "without a Transpose op each way",
    "additive_masks": "attention masks added to the scores as 0 / -1e9 (one add), where the default "
                      "selects twice (scores, then weights); a row with no key to attend gets uniform "
                      "weights, not zeros",
    "cast_once": "a fused projection's kernels and biases stacked in float32 and cast once, not one cast each",
    "no_asserts": "no Assert in a training step (a GPU waits for the host at each): ids out of range are "
                  "clipped, not reported; for data whose ids come from the model's own tokenizer",
}


def enabled_paths():
    """The names of the paths layers built now take.

    Returns:
        A frozenset of names of `PATHS`: from `FORCE` when set, else from
        `KSEQ_GPU_PATHS` when set, else none.

    Raises:
        ValueError: `KSEQ_GPU_PATHS` or `FORCE` names an unknown path.
    """
    if FORCE is not None:
        return _names(FORCE, "`kseq.layers.device_paths.FORCE`")
    value = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    return _names(value, f"`{ENVIRONMENT_VARIABLE}`") if value else frozenset()


def uses(name):
    """Whether layers built now take the path `name`.

    Args:
        name: a key of `PATHS`.

    Returns:
        bool.

    Raises:
        KeyError: `name` is not a path.
    """
    if name not in PATHS:
        raise KeyError(f"no device path {name!r}; the paths: {', '.join(PATHS)}")
    return name in enabled_paths()


def use_gpu_paths():
    """Whether any alternative path is on (the name before paths had switches of their own).

    Returns:
        bool.
    """
    return bool(enabled_paths())


def _names(value, source):
    if value is True or value == "1":
        return frozenset(PATHS)
    if value is False or value == "0":
        return frozenset()
    names = [n.strip() for n in value.split(",")] if isinstance(value, str) else list(value)
    unknown = [n for n in names if n not in PATHS]
    if unknown:
        raise ValueError(f"{source} must be '0', '1' or path names joined by commas, from "
                         f"{', '.join(PATHS)}; got unknown {', '.join(map(repr, unknown))}.")
    return frozenset(names)
