"""Whether the Transformer's layers build their GPU paths or their CPU-tuned ones.

A layer asks once, in `build()`, and keeps the answer: its graph never
branches per call on the device. The CPU paths are many small
multi-threaded ops (each a cheap task for a CPU's thread pool); a GPU pays a
kernel launch for every op, so its paths use fewer, fused ones (LayerNorm as
FusedBatchNormV3, dropout from one key a step). Both compute the same
function and run on either device, so a model built on one device exports
and runs on the other.

Tests and benchmarks force a path: set `FORCE` (True: GPU paths, False: CPU
paths) before the layers are built, or the environment variable
`KSEQ_GPU_PATHS` ("1" or "0") before the process builds them. Otherwise the
GPU paths are taken where TensorFlow sees a GPU.
"""

import os

import tensorflow as tf

FORCE = None
ENVIRONMENT_VARIABLE = "KSEQ_GPU_PATHS"


def use_gpu_paths():
    """Whether layers built now take their GPU paths.

    Returns:
        `FORCE` when set, else "1"/"0" from `KSEQ_GPU_PATHS` when set, else
        whether TensorFlow has a logical GPU.

    Raises:
        ValueError: `KSEQ_GPU_PATHS` holds something other than "0" or "1".
    """
    if FORCE is not None:
        return bool(FORCE)
    value = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if value:
        if value not in ("0", "1"):
            raise ValueError(f"`{ENVIRONMENT_VARIABLE}` must be '0' or '1'; got {value!r}.")
        return value == "1"
    return bool(tf.config.list_logical_devices("GPU"))
