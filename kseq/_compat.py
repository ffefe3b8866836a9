"""Where kseq leans on private keras or TensorFlow behaviour, in one place.

Each function names the upstream behaviour it depends on and the versions
it was checked on (keras 3.15.1, TensorFlow 2.21.0); tests/test_compat.py
holds a test per entry that fails once upstream changes, so an upgrade says
which entry to revisit.
"""

import importlib

import keras


def keras_uses_cudnn(layer):
    """Whether keras runs this LSTM/GRU layer's sequences with cuDNN.

    keras 3.15 picks cuDNN by itself (`use_cudnn="auto"`) when a GPU is
    visible and the cell has cuDNN's activations, bias and (for GRU)
    `reset_after`; the decision lives in the private
    `keras.src.backend.tensorflow.rnn.cudnn_ok`, which this asks.
    """
    if not isinstance(layer, (keras.layers.LSTM, keras.layers.GRU)):
        return False
    if layer.use_cudnn is False or layer.cell.recurrent_dropout:
        return False
    cell = layer.cell
    reset_after = getattr(cell, "reset_after", None) if isinstance(layer, keras.layers.GRU) else None
    return bool(
        _keras_tensorflow_rnn().cudnn_ok(
            cell.activation, cell.recurrent_activation, layer.unroll, cell.use_bias, reset_after
        )
    )


def _keras_tensorflow_rnn():
    # The package's __init__ re-exports a function named `rnn` over the
    # module of the same name, so import the module by its full path.
    return importlib.import_module("keras.src.backend.tensorflow.rnn")


def sublayers(layer):
    """`layer` and every layer under it, depth first (keras' private
    `Layer._flatten_layers`, the walk its own `model_supports_jit` uses)."""
    return list(layer._flatten_layers(include_self=True, recursive=True))


class _EndOfEpoch:
    """A true `stop_training` that ends only the epoch in progress."""

    def __bool__(self):
        return True


def end_epoch_early(model):
    """Ends the epoch in progress of `model.fit` after this batch, keeping the
    run going: keras 3.15's fit loop leaves an epoch when `stop_training` is
    true after a batch, runs validation and `on_epoch_end`, and only then
    leaves the run if it is still true; `continue_after_epoch` (called in
    an `on_epoch_end`) clears this marker, never a real stop. With
    `steps_per_epoch` set, the next epoch continues the same data iterator.
    """
    if not model.stop_training:
        model.stop_training = _EndOfEpoch()


def continue_after_epoch(model):
    """Clears `end_epoch_early`'s marker (a real stop stays)."""
    if isinstance(model.stop_training, _EndOfEpoch):
        model.stop_training = False
