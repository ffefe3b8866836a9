"""Recurrent decoder: plain, peeky, Luong or Bahdanau attention."""

import keras
import tensorflow as tf
from keras import ops

from kseq.layers.bahdanau_attention import BahdanauAttention
from kseq.layers.luong_attention import LUONG_SCORES, LuongAttention
from kseq.layers.recurrent import CELL_TYPES, make_rnn_layer, run_cell
from kseq._validation import check_choice, check_positive_int, check_rate

ATTENTION_TYPES = (None,) + LUONG_SCORES + ("bahdanau",)


@keras.saving.register_keras_serializable("kseq")
class RNNDecoder(keras.layers.Layer):
    """A stacked recurrent decoder over embedded target tokens.

    - attention=None: the plain context-vector decoder; the encoder's final
      state (passed as `initial_state`) is all it knows of the source.
    - "dot" | "general" | "concat": Luong attention. The top layer's states
      s_t attend over the memory; the output features are the attentional
      state tanh(W_c [c_t; s_t]). The stack runs on keras' fused RNN kernels.
    - "bahdanau": the previous top state s_{t-1} attends over the memory and
      the context c_t is fed into the decoder's input at every step (input
      feeding); features are tanh(W_c [c_t; s_t]). Runs step by step.
    - peeky=True: the encoder's context vector is concatenated to every
      step's input and to the output features.

    Args:
        cell: "rnn", "lstm" or "gru". Defaults to "lstm".
        units: hidden size U of every layer.
        num_layers: stacked layers. Defaults to 1.
        attention: None, "dot", "general", "concat" or "bahdanau".
        peeky: feed the context vector to every step and the output.
        dropout: rate between stacked layers. Defaults to 0.

    Call arguments:
        inputs: (B, T, E) embedded target tokens (teacher forcing).
        initial_state: per layer a list of (B, U) states ([h, c] for LSTM).
        memory: (B, S, M) encoder outputs (needed with attention).
        memory_mask: (B, S) bool, True at real source tokens.
        context: (B, C) context vector (needed when peeky).
        training: whether dropout is active.

    Returns:
        (B, T, F) features for the output projection, F = `output_dim`.

    Decoding: `initial_decoding_state` packs states and source into one
    dict; `step` advances it by one token and gives the same features as
    `call` at that position.

    Example:
    >>> decoder = RNNDecoder(cell="gru", units=8, attention="general")
    >>> h = keras.ops.zeros((2, 8))
    >>> tuple(decoder(keras.ops.ones((2, 3, 4)), [[h]], memory=keras.ops.ones((2, 5, 8))).shape)
    (2, 3, 8)

    References:
        Sutskever, Vinyals and Le, 2014; Cho et al., 2014 (context vector);
        Luong, Pham and Manning, 2015; Bahdanau, Cho and Bengio, 2015.
    """

    def __init__(
        self,
        cell="lstm",
        units=256,
        num_layers=1,
        attention=None,
        peeky=False,
        dropout=0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.cell = check_choice("cell", cell, CELL_TYPES)
        self.units = check_positive_int("units", units)
        self.num_layers = check_positive_int("num_layers", num_layers)
        self.attention = check_choice("attention", attention, ATTENTION_TYPES)
        self.peeky = bool(peeky)
        self.dropout = check_rate("dropout", dropout)
        self._context_dim = 0

    @property
    def output_dim(self):
        return self.units + (self._context_dim if self.peeky else 0)

    def build(self, inputs_shape, initial_state_shape=None, memory_shape=None, context_shape=None):
        batch, length = inputs_shape[0], inputs_shape[1]
        if self.attention is not None and memory_shape is None:
            raise ValueError(f"RNNDecoder(attention={self.attention!r}) needs `memory`.")
        if self.peeky and context_shape is None:
            raise ValueError("RNNDecoder(peeky=True) needs `context`.")
        self._context_dim = context_shape[-1] if self.peeky else 0
        memory_dim = self._build_attention(batch, length, memory_shape)
        step_dim = inputs_shape[-1] + self._context_dim
        if self.attention == "bahdanau":
            step_dim += memory_dim
        self.rnn_layers = []
        for i in range(self.num_layers):
            layer = make_rnn_layer(self.cell, self.units, self.dtype_policy, f"rnn_{i}")
            layer.build((batch, length, step_dim if i == 0 else self.units))
            self.rnn_layers.append(layer)
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self.built = True

    def _build_attention(self, batch, length, memory_shape):
        """Builds attention, W_c and, for "dot" over a wider memory, a projection."""
        if self.attention is None:
            return 0
        memory_dim = memory_shape[-1]
        self.memory_projection = None
        if self.attention == "dot" and memory_dim != self.units:
            # Dot scores need equal widths (e.g. under a bidirectional encoder).
            self.memory_projection = keras.layers.Dense(
                self.units, use_bias=False, dtype=self.dtype_policy, name="memory_projection"
            )
            self.memory_projection.build(memory_shape)
            memory_dim = self.units
        if self.attention == "bahdanau":
            self.attention_layer = BahdanauAttention(
                self.units, dtype=self.dtype_policy, name="attention"
            )
        else:
            self.attention_layer = LuongAttention(
                self.attention, dtype=self.dtype_policy, name="attention"
            )
        self.attention_layer.build(
            (batch, length, self.units), tuple(memory_shape[:-1]) + (memory_dim,)
        )
        self.combine = keras.layers.Dense(
            self.units, activation="tanh", use_bias=False, dtype=self.dtype_policy, name="combine"
        )
        self.combine.build((batch, length, memory_dim + self.units))
        return memory_dim

    def initial_decoding_state(self, initial_state, memory=None, memory_mask=None, context=None):
        """Packs what decoding needs into one dict of batch-major tensors.

        Source-only work (memory projection, attention keys) happens here,
        once per source rather than once per step.
        """
        state = {"rnn": [list(layer_state) for layer_state in initial_state]}
        if self.attention is not None:
            if self.memory_projection is not None:
                memory = self.memory_projection(memory)
            if memory_mask is None:
                memory_mask = ops.ones(ops.shape(memory)[:2], "bool")
            state["memory"] = memory
            state["keys"] = self.attention_layer.prepare_memory(memory)
            state["memory_mask"] = ops.cast(memory_mask, "bool")
        if self.peeky:
            state["context"] = context
        return state

    def _attend(self, query, state):
        """(B, U) query -> (B, M) context, (B, S) weights."""
        context, weights = self.attention_layer.attend(
            ops.expand_dims(query, 1), state["keys"], state["memory"], state["memory_mask"]
        )
        return context[:, 0], weights[:, 0]

    def _with_context(self, x, state):
        return ops.concatenate([x, state["context"]], axis=-1) if self.peeky else x

    def step(self, inputs, state, training=False):
        """One decoding step.

        Args:
            inputs: (B, E) embedded previous tokens.
            state: dict from `initial_decoding_state` or a previous `step`.

        Returns:
            (features (B, F), new state, attention weights (B, S) or None).
        """
        x, context, weights, new_state = self._recur(inputs, state, training)
        return self._features(x, context, state), new_state, weights

    def _recur(self, inputs, state, training):
        """The recurrent part of a step: (top state (B, U), context (B, M)
        or None, weights (B, S) or None, new state)."""
        x, context, weights = self._with_context(inputs, state), None, None
        if self.attention == "bahdanau":
            context, weights = self._attend(state["rnn"][-1][0], state)
            x = ops.concatenate([x, context], axis=-1)
        new_rnn_states = []
        for i, layer in enumerate(self.rnn_layers):
            if i > 0:
                x = self.dropout_layer(x, training=training)
            x, layer_state = run_cell(layer, x, state["rnn"][i], training=training)
            new_rnn_states.append(layer_state)
        if self.attention in LUONG_SCORES:
            context, weights = self._attend(x, state)
        return x, context, weights, dict(state, rnn=new_rnn_states)

    def _features(self, x, context, state):
        """Output features (B, F) or (B, T, F) from top states and contexts."""
        if self.attention is not None:
            x = self.combine(ops.concatenate([context, x], axis=-1))
        if not self.peeky:
            return x
        if len(x.shape) == 3:
            return ops.concatenate([x, _repeat_over_time(state["context"], ops.shape(x)[1])], axis=-1)
        return self._with_context(x, state)

    def call(self, inputs, initial_state, memory=None, memory_mask=None, context=None, training=None):
        state = self.initial_decoding_state(initial_state, memory, memory_mask, context)
        if self.attention == "bahdanau":
            return self._decode_stepwise(inputs, state, training)
        x = inputs
        if self.peeky:
            x = ops.concatenate([x, _repeat_over_time(context, ops.shape(x)[1])], axis=-1)
        for i, layer in enumerate(self.rnn_layers):
            if i > 0:
                x = self.dropout_layer(x, training=training)
            x = layer(x, initial_state=state["rnn"][i], training=training)[0]
        attended = None
        if self.attention is not None:
            attended, _ = self.attention_layer.attend(
                x, state["keys"], state["memory"], state["memory_mask"]
            )
        return self._features(x, attended, state)

    def _decode_stepwise(self, inputs, state, training):
        """Teacher-forced Bahdanau decoding: the recurrence scanned over time,
        the output features (W_c [c_t; s_t]) afterwards in one matmul."""
        batch = ops.shape(inputs)[0]

        # Only the recurrent states are carried: tf.scan stacks its carry at
        # every step, and the source memory is constant.
        def body(carry, x_t):
            top, context, _, new_state = self._recur(x_t, dict(state, rnn=carry[0]), training=training)
            return new_state["rnn"], top, context

        init = (
            state["rnn"],
            ops.zeros((batch, self.units), self.compute_dtype),
            ops.zeros((batch, ops.shape(state["memory"])[-1]), self.compute_dtype),
        )
        _, tops, contexts = tf.scan(body, ops.transpose(inputs, (1, 0, 2)), initializer=init)
        tops, contexts = (ops.transpose(t, (1, 0, 2)) for t in (tops, contexts))
        return self._features(tops, contexts, state)

    def compute_output_shape(self, inputs_shape, *args, **kwargs):
        return tuple(inputs_shape[:-1]) + (self.output_dim,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "cell": self.cell,
                "units": self.units,
                "num_layers": self.num_layers,
                "attention": self.attention,
                "peeky": self.peeky,
                "dropout": self.dropout,
            }
        )
        return config


def _repeat_over_time(vector, length):
    """(B, C) -> (B, T, C)."""
    return ops.repeat(ops.expand_dims(vector, 1), length, axis=1)
