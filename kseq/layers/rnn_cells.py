"""Keras' own recurrent layers and cells, chosen by name."""

import keras

CELL_TYPES = ("rnn", "lstm", "gru")

_LAYERS = {"rnn": keras.layers.SimpleRNN, "lstm": keras.layers.LSTM, "gru": keras.layers.GRU}


def num_states(cell):
    """How many state tensors a cell carries: LSTM has (h, c), the others h."""
    return 2 if cell == "lstm" else 1


def make_rnn_layer(cell, units, dtype=None, name=None):
    """A sequence-returning, state-returning keras SimpleRNN/LSTM/GRU.

    These use keras' fused kernels (cuDNN on GPU); their `.cell` runs one
    step with the same weights, which the decoders use for decoding.
    """
    return _LAYERS[cell](
        units, return_sequences=True, return_state=True, dtype=dtype, name=name
    )


def run_cell(layer, inputs, states, training=None):
    """One step of a keras RNN layer's cell: (B, E), [states] -> (h, [states])."""
    output, new_states = layer.cell(inputs, list(states), training=training)
    if not isinstance(new_states, (list, tuple)):
        new_states = [new_states]
    return output, list(new_states)


def is_empty_batch(x):
    """True when `x` has a static batch of 0 rows, which keras 3.15's
    recurrent cells cannot run: its TensorFlow `ops.add` takes the (0, N)
    recurrent term for a bias ("Biases must be 1D: [0, N]"). Models return
    their (0, ...) output directly instead."""
    return x.shape[0] == 0
