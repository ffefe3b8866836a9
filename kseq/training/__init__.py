"""Training, grouped by concept in sub-packages:

- `objectives`: losses, metrics, FusedAdam, learning-rate schedules;
- `devices`: strategies and batch distribution, precision, XLA, the CPU runtime;
- `checkpoints`: the resumable backup, preemption, the phases a restart skips;
- `loop`: `Fit`, the one fit driver (its former name `EpochFit` still works),
  evaluation periods, callbacks, stopping;
- `scoring`: test scores, the decoding choice, attention alignment, averaging;
- `reporting`: TensorBoard HParams and graph, attention images, decisions;
- `config`: typed options from flags and `--config` files, `--init-from`,
  the model size from the data;
- `recipe`: the steps every task shares (strategy, compile, write metrics).

The names a task needs most are here too. Each module's old place
(`kseq.training.losses`, `kseq.training.options`, ...) still imports.
"""

import sys

from kseq.training import (
    checkpoints,
    config,
    devices,
    loop,
    objectives,
    recipe,
    reporting,
    scoring,
)
from kseq.training.checkpoints import Phases
from kseq.training.config import (
    option,
    options,  # the module tasks call `opts`
    parse,
)
from kseq.training.loop import EpochFit, Fit, GenerationMonitor, Trained, train_once
from kseq.training.objectives import (
    FusedAdam,
    MaskedAccuracy,
    MaskedSparseCategoricalCrossentropy,
)
from kseq.training.reporting import as_hparams, write_hparams

# Before the sub-packages every module sat in kseq.training: users' imports of
# those paths get the same module objects.
_MOVED = {
    name.rsplit(".", 1)[1]: module
    for name, module in list(sys.modules.items())
    if name.startswith(__name__ + ".") and name.count(".") == 3
    and name.split(".")[2] in ("checkpoints", "config", "devices", "loop", "objectives", "reporting", "scoring")
}
_MOVED["epoch_fit"] = loop.fit  # the module's name before `Fit`
for _name, _module in _MOVED.items():
    sys.modules.setdefault(f"{__name__}.{_name}", _module)
    globals().setdefault(_name, _module)

__all__ = [
    "EpochFit",
    "Fit",
    "FusedAdam",
    "GenerationMonitor",
    "MaskedAccuracy",
    "MaskedSparseCategoricalCrossentropy",
    "Phases",
    "Trained",
    "as_hparams",
    "checkpoints",
    "config",
    "devices",
    "loop",
    "objectives",
    "option",
    "options",
    "parse",
    "recipe",
    "reporting",
    "scoring",
    "train_once",
    "write_hparams",
]
