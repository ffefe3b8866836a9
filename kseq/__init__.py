"""kseq: sequence models for Keras 3 on TensorFlow.

RNN encoders and decoders (vanilla RNN, LSTM, GRU), Luong and Bahdanau
attention, the Transformer, decoding and SavedModel export.

Subpackages: `kseq.layers`, `kseq.models`, `kseq.decoding` (searches and the
decoder protocol), `kseq.data` (tokenizers, pipelines, data sets),
`kseq.training` (losses, metrics, schedules, callbacks, resuming,
distribution, precision, XLA, evaluation, task plumbing) and `kseq.export`.
"""

import importlib
import importlib.util
import os
import sys

# kseq builds on tf.data, tf.function and SavedModel: it needs the TensorFlow
# backend, so choose it unless the user already picked one. The check that
# the user's choice is TensorFlow is kseq._backend's, where keras first loads.
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from kseq.special_ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID  # noqa: E402

__version__ = "0.2.0"

# The training pieces users reach for most, as kseq.losses, kseq.metrics, ...
_SHORTCUTS = {
    "callbacks": "kseq.training.loop.callbacks",
    "losses": "kseq.training.objectives.losses",
    "metrics": "kseq.training.objectives.metrics",
    "optimizers": "kseq.training.objectives.optimizers",
    "schedules": "kseq.training.objectives.schedules",
}

__all__ = [
    "PAD_ID",
    "BOS_ID",
    "EOS_ID",
    "UNK_ID",
    "callbacks",
    "data",
    "decoding",
    "export",
    "layers",
    "losses",
    "metrics",
    "models",
    "optimizers",
    "schedules",
    "training",
    "__version__",
]


def __getattr__(name):
    """Imports a subpackage (or a shortcut's module) when it is first asked
    for, as `kseq.models`: `import kseq` alone loads neither keras nor
    TensorFlow, so the commands start TensorFlow themselves, quietly
    (kseq.cli.quiet_start), and `--help` answers at once."""
    target = _SHORTCUTS.get(name, f"kseq.{name}")
    if name.startswith("__") or not name.isidentifier() or importlib.util.find_spec(target) is None:
        raise AttributeError(f"module 'kseq' has no attribute {name!r}")
    module = importlib.import_module(target)
    globals()[name] = module
    return module


def __dir__():
    return sorted(set(globals()) | set(__all__))


# Where keras is loaded already (`import keras` before `import kseq`, as
# sorted imports put it), kseq's Keras classes cost little more to import
# now, and keras.saving.load_model then finds them in a .keras file, as it
# did when `import kseq` loaded everything. Without keras loaded, a .keras
# file of a kseq model needs `kseq.models` (or any of its classes) first.
if "keras" in sys.modules:
    for _package in ("layers", "models", "training"):
        __getattr__(_package)
