"""kseq: sequence models for Keras 3 on TensorFlow.

RNN encoders and decoders (vanilla RNN, LSTM, GRU), Luong and Bahdanau
attention, the Transformer, decoding and SavedModel export.

Subpackages: `kseq.layers`, `kseq.models`, `kseq.decoding` (searches and the
decoder protocol), `kseq.data` (tokenizers, pipelines, data sets),
`kseq.training` (losses, metrics, schedules, callbacks, resuming,
distribution, precision, XLA, evaluation, task plumbing) and `kseq.export`.
"""

import os

# kseq builds on tf.data, tf.function and SavedModel: it needs the TensorFlow
# backend, so choose it unless the user already picked one.
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# TensorFlow's C++ start-up lines (oneDNN, CUDA probing, CPU features) would
# bury the commands' and tasks' own output; setting TF_CPP_MIN_LOG_LEVEL
# before importing kseq brings them back. absl logs the first of them before
# it honours the level, so the import's stderr is filtered here.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from kseq._quiet_start import quiet_tensorflow_start  # noqa: E402

with quiet_tensorflow_start():
    import keras  # noqa: E402

if keras.backend.backend() != "tensorflow":
    raise ImportError(
        "kseq needs the Keras TensorFlow backend; KERAS_BACKEND is "
        f"{keras.backend.backend()!r}. Set KERAS_BACKEND=tensorflow."
    )

from kseq.special_ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID  # noqa: E402
from kseq import data, decoding, export, layers, models, training  # noqa: E402,I001

# The training pieces users reach for most, also as kseq.losses, kseq.metrics, ...
from kseq.training.loop import callbacks  # noqa: E402
from kseq.training.objectives import losses, metrics, optimizers, schedules  # noqa: E402

__version__ = "0.2.0"

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
