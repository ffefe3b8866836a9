"""Process-wide TensorFlow settings for fast training on CPU cores."""

import os

import tensorflow as tf


def tune_cpu_runtime(threads=None):
    """Sets TensorFlow's CPU allocator and thread pools; call once at program start, before any op runs.

    Two TensorFlow defaults cost more than the work on small CPU batches
    (measured by benchmarks/cpu_runtime.py, figures in benchmarks/RESULTS.md):
    - the default CPU allocator returns every large tensor to the system, so
      each step faults fresh pages in again; TensorFlow's BFC allocator
      keeps and reuses them;
    - with thread pools left at "let TensorFlow choose", a step under
      MirroredStrategy used little more than one core; explicit pools of one
      thread per core use them all.

    Args:
        threads: threads of each pool; None (default): the cores this
            process may run on.

    Returns:
        True when the settings took; False (having done nothing) where
        TensorFlow has already started, as inside a test process.
    """
    if threads is None:
        affinity = getattr(os, "sched_getaffinity", None)
        threads = len(affinity(0)) if affinity else os.cpu_count()
    os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
    try:
        tf.config.threading.set_inter_op_parallelism_threads(threads)
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    except RuntimeError:  # the runtime is already initialised
        return False
    return True
