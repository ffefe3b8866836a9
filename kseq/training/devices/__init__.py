"""Where training runs: tf.distribute strategies and how batches reach the
replicas, mixed precision, XLA, and the process-wide CPU runtime settings."""

from kseq.training.devices.distribution import (
    distribute_batches,
    distribute_worker_batches,
    make_strategy,
    share_per_worker,
    weights_fingerprint,
    worker_batches,
    workers,
)
from kseq.training.devices.precision import device_class, resolve_precision
from kseq.training.devices.runtime import tune_cpu_runtime
from kseq.training.devices.xla import (
    BLOCKS,
    check_replicas,
    decide_for_translation,
    decide_jit_compile,
)

__all__ = [
    "BLOCKS",
    "check_replicas",
    "decide_for_translation",
    "decide_jit_compile",
    "device_class",
    "distribute_batches",
    "distribute_worker_batches",
    "make_strategy",
    "resolve_precision",
    "share_per_worker",
    "tune_cpu_runtime",
    "weights_fingerprint",
    "worker_batches",
    "workers",
]
