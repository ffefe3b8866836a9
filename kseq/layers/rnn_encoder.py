"""Stacked, optionally bidirectional, recurrent encoder."""

import keras
from keras import ops

from kseq.layers.recurrent import CELL_TYPES, call_recurrent, make_rnn_layer, num_states
from kseq._validation import check_choice, check_positive_int, check_rate


@keras.saving.register_keras_serializable("kseq")
class RNNEncoder(keras.layers.Layer):
    """A stack of keras SimpleRNN/LSTM/GRU layers over embedded tokens.

    Runs on keras' fused kernels (cuDNN on a GPU, see
    `kseq.layers.recurrent`). Padding is masked, so each row's final
    state is its state at its last real token (for the backward direction,
    at its first token), whatever the padding length.

    Args:
        cell: "rnn" (vanilla), "lstm" or "gru". Defaults to "lstm".
        units: hidden size per direction.
        num_layers: stacked layers. Defaults to 1.
        bidirectional: run each layer both ways and concatenate. Defaults to False.
        dropout: rate between stacked layers. Defaults to 0.

    Call arguments:
        inputs: (B, S, E) embedded tokens.
        padding_mask: optional (B, S) bool, True at real tokens. Falls back
            to the Keras mask of `inputs`.
        training: whether dropout is active.

    Returns:
        (outputs, states): outputs (B, S, U') with U' = units (x2 when
        bidirectional), and per layer a list of final states, [h, c] for
        LSTM and [h] otherwise, each (B, U').

    Example:
    >>> encoder = RNNEncoder(cell="gru", units=8, bidirectional=True)
    >>> outputs, states = encoder(keras.ops.ones((2, 5, 4)))
    >>> tuple(outputs.shape), tuple(states[0][0].shape)
    ((2, 5, 16), (2, 16))
    """

    def __init__(
        self, cell: str = "lstm", units: int = 256, num_layers: int = 1, bidirectional: bool = False,
        dropout: float = 0.0, **kwargs
    ) -> None:
        super().__init__(**kwargs)
        self.cell = check_choice("cell", cell, CELL_TYPES)
        self.units = check_positive_int("units", units)
        self.num_layers = check_positive_int("num_layers", num_layers)
        self.bidirectional = bool(bidirectional)
        self.dropout = check_rate("dropout", dropout)
        self.supports_masking = True
        # Made here, not in build: keras decides at compile time whether a
        # model can run under XLA (auto on a GPU) from the layers it finds,
        # and a cuDNN LSTM/GRU is what must stop it.
        self.rnn_layers = []
        for i in range(self.num_layers):
            layer = make_rnn_layer(self.cell, self.units, self.dtype_policy, f"rnn_{i}")
            if self.bidirectional:
                layer = keras.layers.Bidirectional(
                    layer, merge_mode="concat", dtype=self.dtype_policy, name=f"bidirectional_{i}"
                )
            self.rnn_layers.append(layer)
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)

    @property
    def output_dim(self):
        return self.units * (2 if self.bidirectional else 1)

    def build(self, inputs_shape):
        shape = tuple(inputs_shape)
        for layer in self.rnn_layers:
            layer.build(shape)
            shape = shape[:-1] + (self.output_dim,)
        self.built = True

    def call(self, inputs, padding_mask=None, training=None, mask=None):
        padding_mask = mask if padding_mask is None else padding_mask
        if padding_mask is not None:
            padding_mask = ops.cast(padding_mask, "bool")
        x, states = inputs, []
        count = num_states(self.cell)
        for i, layer in enumerate(self.rnn_layers):
            if i > 0:
                x = self.dropout_layer(x, training=training)
            x, *final = call_recurrent(layer, x, mask=padding_mask, training=training)
            if self.bidirectional:  # [forward states..., backward states...]
                final = [
                    ops.concatenate([final[j], final[count + j]], axis=-1)
                    for j in range(count)
                ]
            states.append(list(final))
        return x, states

    def compute_output_shape(self, inputs_shape):
        batch = inputs_shape[0]
        state = [(batch, self.output_dim)] * num_states(self.cell)
        return (
            tuple(inputs_shape[:-1]) + (self.output_dim,),
            [list(state) for _ in range(self.num_layers)],
        )

    def compute_mask(self, inputs, mask=None):
        return None

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "cell": self.cell,
                "units": self.units,
                "num_layers": self.num_layers,
                "bidirectional": self.bidirectional,
                "dropout": self.dropout,
            }
        )
        return config
