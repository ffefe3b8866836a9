"""Training, grouped by concept in sub-packages, each exporting its public
names (one import path each), depending one way (from the bottom):

- `progress`: the global step, data epochs, the evaluation cadence;
- `reporting`: TensorBoard HParams and graph, attention images, decisions;
- `objectives`: losses, metrics, FusedAdam, learning-rate schedules;
- `devices`: strategies and batch distribution, precision, XLA, the CPU runtime;
- `checkpoints`: the resumable backup, preemption, the phases a restart skips;
- `config`: a task's options (typed, from flags and `--config` files, the
  option groups by concern), `--init-from`, the model size from the data;
- `scoring`: test scores, the decoding choice, attention alignment, averaging;
- `loop`: `Fit`, the one fit driver, evaluation periods, callbacks, stopping;
- `pipelines`: a translation task's input pipelines under its strategy;
- `vocabulary`: a run's tokenizer;
- `task`: the steps every task shares (`start` -> `Run`: tokenizer, compile,
  fit, train once, metrics, export).
"""

from kseq import _backend  # noqa: F401  (first: the TensorFlow backend checked before keras loads)

from kseq.training import (
    checkpoints,
    config,
    devices,
    loop,
    objectives,
    pipelines,
    progress,
    reporting,
    scoring,
    task,
    vocabulary,
)

__all__ = [
    "checkpoints",
    "config",
    "devices",
    "loop",
    "objectives",
    "pipelines",
    "progress",
    "reporting",
    "scoring",
    "task",
    "vocabulary",
]
