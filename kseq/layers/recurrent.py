"""Keras' recurrent layers, chosen by name, and the two ways kseq runs them.

On a GPU, keras' LSTM and GRU layers run whole sequences with one cuDNN op
(CudnnRNNV3). That op is fast, but XLA cannot compile it, it has no CPU
kernel (a SavedModel traced on a GPU would not serve on a CPU), and with a
mask it accepts only right-padded rows with at least one real step. So:

- teacher-forced passes (training, `call`) use `call_recurrent`: keras'
  fused kernels, cuDNN on a GPU, and keras' portable loop for a batch whose
  mask cuDNN would refuse (an all-PAD row, PAD inside a row);
- decoding and exports trace under `portable_recurrence`: keras' portable
  loop over the cell (a TensorFlow while-loop), which compiles with XLA and
  runs on any device; each decoding step calls the cells directly
  (`run_cell`). The weights are the same either way.
"""

import contextlib

import keras
import tensorflow as tf

from kseq._compat import cudnn_trains_in, keras_uses_cudnn, sublayers

CELL_TYPES = ("rnn", "lstm", "gru")

_LAYERS = {"rnn": keras.layers.SimpleRNN, "lstm": keras.layers.LSTM, "gru": keras.layers.GRU}


def num_states(cell):
    """Tells how many state tensors a cell carries: LSTM has (h, c), the others h.

    Args:
        cell: "rnn", "lstm" or "gru".

    Returns:
        int, 2 for "lstm" and 1 otherwise.
    """
    return 2 if cell == "lstm" else 1


def make_rnn_layer(cell, units, dtype=None, name=None):
    """Makes a sequence-returning, state-returning keras SimpleRNN/LSTM/GRU.

    Its `.cell` runs one step with the same weights (`run_cell`). Under a
    bfloat16 policy it never takes cuDNN (`kseq._compat.cudnn_trains_in`:
    NaN gradients); keras then also allows XLA for it.

    Args:
        cell: "rnn", "lstm" or "gru".
        units: H, the width of the hidden state.
        dtype: the layer's dtype or dtype policy. Defaults to None (keras' global policy).
        name: the layer's name. Defaults to None (keras picks one).

    Returns:
        A keras recurrent layer whose call returns (outputs (B, S, H), *states).
    """
    options = dict(return_sequences=True, return_state=True, dtype=dtype, name=name)
    layer = _LAYERS[cell](units, **options)
    if cell != "rnn" and not cudnn_trains_in(layer.compute_dtype):
        layer = _LAYERS[cell](units, use_cudnn=False, **options)
    return layer


def run_cell(layer, inputs, states, training=None):
    """Runs one step of a keras RNN layer's cell.

    Args:
        layer: a keras SimpleRNN/LSTM/GRU layer, e.g. from `make_rnn_layer`.
        inputs: (B, E) the step's inputs.
        states: the (B, H) state tensors, as many as `num_states` of the cell.
        training: whether dropout is active. Defaults to None (keras decides).

    Returns:
        (h, states): the (B, H) output and the list of new (B, H) states.
    """
    output, new_states = layer.cell(inputs, list(states), training=training)
    if not isinstance(new_states, (list, tuple)):
        new_states = [new_states]
    return output, list(new_states)


def call_recurrent(layer, inputs, mask=None, initial_state=None, training=None):
    """Calls a recurrent layer over whole sequences, safe on cuDNN for any mask.

    Same as `layer(inputs, mask=..., initial_state=..., training=...)`. Where
    keras would run the layer with cuDNN and a mask is given, a `tf.cond`
    picks cuDNN for masks it accepts and the portable loop for the others
    (keras 3 asserts instead, so one empty row would stop training).

    Args:
        layer: a keras recurrent layer, or a wrapper such as Bidirectional.
        inputs: (B, S, E) the sequences.
        mask: optional (B, S) bool, True at real steps. Defaults to None.
        initial_state: optional list of (B, H) states. Defaults to None (zeros).
        training: whether dropout is active. Defaults to None (keras decides).

    Returns:
        Whatever the layer returns, e.g. (outputs (B, S, H), *states).
    """

    def fused():
        return layer(inputs, mask=mask, initial_state=initial_state, training=training)

    if mask is None or not any(map(keras_uses_cudnn, _recurrent_layers(layer))):
        return fused()

    def portable():
        with portable_recurrence(layer):
            return fused()

    return tf.cond(cudnn_accepts(mask), fused, portable)


def cudnn_accepts(mask):
    """Tells whether cuDNN accepts a mask: every row right-padded, with a real step.

    That is what cuDNN's sequence lengths can express.

    Args:
        mask: (B, S) bool or 0/1, True at real steps.

    Returns:
        A scalar bool tensor.
    """
    mask = tf.cast(mask, tf.bool)
    lengths = tf.reduce_sum(tf.cast(mask, tf.int32), axis=1)
    right_padded = tf.equal(mask, tf.range(tf.shape(mask)[1])[None, :] < lengths[:, None])
    return tf.logical_and(tf.reduce_all(lengths > 0), tf.reduce_all(right_padded))


@contextlib.contextmanager
def portable_recurrence(*layers):
    """Inside, keras' LSTM/GRU layers under `layers` (layers or models)
    run keras' portable loop instead of cuDNN; functions traced inside keep
    it. Their `use_cudnn` is restored on exit."""
    recurrent = [rnn for layer in layers for rnn in _recurrent_layers(layer)]
    saved = [rnn.use_cudnn for rnn in recurrent]
    for rnn in recurrent:
        rnn.use_cudnn = False
    try:
        yield
    finally:
        for rnn, value in zip(recurrent, saved):
            rnn.use_cudnn = value


def _recurrent_layers(layer):
    """The keras LSTM/GRU layers in `layer` (itself included), e.g. both
    directions of a Bidirectional."""
    return [sub for sub in sublayers(layer) if isinstance(sub, (keras.layers.LSTM, keras.layers.GRU))]
