"""Recurrent decoder: plain, peeky, Luong (optionally input-fed) or Bahdanau attention."""

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from kseq.layers.bahdanau_attention import BahdanauAttention
from kseq.layers.luong_attention import LUONG_SCORES, LuongAttention
from kseq.layers.recurrent import CELL_TYPES, make_rnn_layer, run_cell
from kseq._shapes import dynamic_shape
from kseq._validation import check_choice, check_positive_int, check_rate

ATTENTION_TYPES = (None,) + LUONG_SCORES + ("bahdanau",)


@keras.saving.register_keras_serializable("kseq")
class RNNDecoder(keras.layers.Layer):
    """A stacked recurrent decoder over embedded target tokens.

    - attention=None: the plain context-vector decoder; the encoder's final
      state (passed as `initial_state`) is all it knows of the source.
    - "dot" | "general" | "concat": Luong attention. The top layer's states
      s_t attend over the memory; the output features are the attentional
      state tanh(W_c [c_t; s_t]). The stack runs on keras' fused RNN kernels,
      unless input_feeding=True: then the attentional state of step t is
      concatenated to the input of step t+1 (zeros at t = 0), which makes
      the teacher-forced pass run step by step.
    - "bahdanau": the previous top state s_{t-1} attends over the memory and
      the context c_t is fed into the decoder's input at every step (input
      feeding); features are tanh(W_c [c_t; s_t]). Runs step by step.
    - peeky=True: the encoder's context vector is concatenated to every
      step's input and to the output features.

    Args:
        cell: "rnn", "lstm" or "gru". Defaults to "lstm".
        units: hidden size U of every layer. Defaults to 256.
        num_layers: stacked layers. Defaults to 1.
        attention: None, "dot", "general", "concat" or "bahdanau". Defaults to None.
        peeky: feed the context vector to every step and the output. Defaults to False.
        dropout: rate between stacked layers. Defaults to 0.
        input_feeding: with a Luong attention, feed each step's attentional
            state to the next step's input (Luong et al., 2015, section
            3.3). Defaults to False.

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
        cell: str = "lstm",
        units: int = 256,
        num_layers: int = 1,
        attention: str | None = None,
        peeky: bool = False,
        dropout: float = 0.0,
        input_feeding: bool = False,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.cell = check_choice("cell", cell, CELL_TYPES)
        self.units = check_positive_int("units", units)
        self.num_layers = check_positive_int("num_layers", num_layers)
        self.attention = check_choice("attention", attention, ATTENTION_TYPES)
        self.peeky = bool(peeky)
        self.dropout = check_rate("dropout", dropout)
        self.input_feeding = check_input_feeding(input_feeding, attention)
        self._context_dim = 0
        # Made here, not in build: see RNNEncoder (keras' XLA choice).
        self.rnn_layers = [
            make_rnn_layer(self.cell, self.units, self.dtype_policy, f"rnn_{i}") for i in range(self.num_layers)
        ]
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)

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
        if self.input_feeding:
            step_dim += self.units
        for i, layer in enumerate(self.rnn_layers):
            layer.build((batch, length, step_dim if i == 0 else self.units))
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

        Args:
            initial_state: per layer a list of (B, U) states ([h, c] for LSTM).
            memory: (B, S, M) encoder outputs; needed with attention. Defaults to None.
            memory_mask: (B, S) bool, True at real source tokens. Defaults to
                None (every position real).
            context: (B, C) context vector; needed when peeky. Defaults to None.

        Returns:
            A dict with "rnn" (the states), and where they apply "memory",
            "keys", "memory_mask" (attention), "context" (peeky) and "feed"
            ((B, U) zeros, input feeding).
        """
        state = {"rnn": [list(layer_state) for layer_state in initial_state]}
        if self.attention is not None:
            if self.memory_projection is not None:
                memory = self.memory_projection(memory)
            if memory_mask is None:
                memory_mask = ops.ones(dynamic_shape(memory)[:2], "bool")
            state["memory"] = memory
            state["keys"] = self.attention_layer.prepare_memory(memory)
            state["memory_mask"] = ops.cast(memory_mask, "bool")
        if self.peeky:
            state["context"] = context
        if self.input_feeding:  # h~_{-1}: nothing attended yet
            batch = dynamic_shape(state["rnn"][0][0])[0]
            state["feed"] = ops.zeros((batch, self.units), self.compute_dtype)
        return state

    def varying_state(self, state):
        """Picks the part of a decoding state that each step changes: what a beam search reorders.

        The rest, the source, is constant.

        Args:
            state: dict from `initial_decoding_state` or `step`.

        Returns:
            A dict with the state's "rnn" and, with input feeding, "feed".
        """
        return {key: state[key] for key in ("rnn", "feed") if key in state}

    def _attend(self, query, state):
        """(B, U) query -> (B, M) context, (B, S) weights."""
        context, weights = self.attention_layer.attend(
            ops.expand_dims(query, 1), state["keys"], state["memory"], state["memory_mask"]
        )
        return context[:, 0], weights[:, 0]

    def _with_context(self, x, state):
        return ops.concatenate([x, state["context"]], axis=-1) if self.peeky else x

    def _step_input(self, inputs, state):
        """(B, E) -> the first layer's input: [x_t; context; h~_{t-1}]."""
        x = self._with_context(inputs, state)
        return ops.concatenate([x, state["feed"]], axis=-1) if self.input_feeding else x

    def step(self, inputs, state, training=False):
        """One decoding step.

        Args:
            inputs: (B, E) embedded previous tokens.
            state: dict from `initial_decoding_state` or a previous `step`.

        Returns:
            (features (B, F), new state, attention weights (B, S) or None).
        """
        x, context, weights, new_state = self._recur(inputs, state, training)
        attentional = new_state["feed"] if self.input_feeding else self._attentional(x, context)
        return self._peek(attentional, state), new_state, weights

    def _recur(self, inputs, state, training):
        """The recurrent part of a step: (top state (B, U), context (B, M)
        or None, weights (B, S) or None, new state)."""
        x, context, weights = self._step_input(inputs, state), None, None
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
        new_state = dict(state, rnn=new_rnn_states)
        if self.input_feeding:
            new_state["feed"] = self._attentional(x, context)
        return x, context, weights, new_state

    def _features(self, x, context, state):
        """Output features (B, F) or (B, T, F) from top states and contexts."""
        return self._peek(self._attentional(x, context), state)

    def _attentional(self, x, context):
        """tanh(W_c [c_t; s_t]) with attention, else the top states."""
        if self.attention is None:
            return x
        return self.combine(ops.concatenate([context, x], axis=-1))

    def _peek(self, x, state):
        """Appends the peeky context vector to (B, F) or (B, T, F) features."""
        if not self.peeky:
            return x
        if len(x.shape) == 3:
            return ops.concatenate([x, _repeat_over_time(state["context"], dynamic_shape(x)[1])], axis=-1)
        return self._with_context(x, state)

    def call(self, inputs, initial_state, memory=None, memory_mask=None, context=None, training=None):
        state = self.initial_decoding_state(initial_state, memory, memory_mask, context)
        if self.attention == "bahdanau" or self.input_feeding:
            return self._decode_stepwise(inputs, state, training)
        x = inputs
        if self.peeky:
            x = ops.concatenate([x, _repeat_over_time(context, dynamic_shape(x)[1])], axis=-1)
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
        """Teacher-forced decoding through the cells, one step at a time.

        Bahdanau's context and the input-fed h~_t enter the input of the
        next step, so keras' fused kernels, which need every step's input
        up front, cannot run the sequence. tf.scan is a while loop over
        `_recur`, the very step that decoding runs: it compiles with XLA and
        replicates under tf.distribute like any other op.
        """
        batch = dynamic_shape(inputs)[0]

        # Only the varying state is carried: tf.scan stacks its carry at every
        # step, and the source memory is constant. With input feeding the
        # stacked h~_t are the features; Bahdanau's W_c [c_t; s_t] runs
        # after the loop, one matmul for all steps.
        def body(previous, x_t):
            carry, _ = previous
            top, context, _, new_state = self._recur(x_t, dict(state, **carry), training=training)
            return self.varying_state(new_state), () if self.input_feeding else (top, context)

        outputs = () if self.input_feeding else (
            ops.zeros((batch, self.units), self.compute_dtype),
            ops.zeros((batch, dynamic_shape(state["memory"])[-1]), self.compute_dtype),
        )
        carried, outputs = tf.scan(
            body, ops.transpose(inputs, (1, 0, 2)), initializer=(self.varying_state(state), outputs)
        )
        if self.input_feeding:
            return self._peek(_batch_major(carried["feed"]), state)
        tops, contexts = (_batch_major(t) for t in outputs)
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
                "input_feeding": self.input_feeding,
            }
        )
        return config


def check_input_feeding(input_feeding, attention):
    """Checks that input feeding is a bool, and asked for only with a Luong attention.

    Input feeding needs a Luong attention: its attentional state is what is
    fed. (Bahdanau's decoder already feeds its context at every step.)

    Args:
        input_feeding: the `input_feeding` option, True or False.
        attention: the `attention` option: None, "dot", "general", "concat" or "bahdanau".

    Returns:
        `input_feeding` as a bool.

    Raises:
        ValueError: if `input_feeding` is not a bool, or is True without a Luong attention.
    """
    if not isinstance(input_feeding, (bool, np.bool_)):
        raise ValueError(f"`input_feeding` must be True or False; got {input_feeding!r}.")
    if input_feeding and attention not in LUONG_SCORES:
        raise ValueError(
            "`input_feeding=True` needs a Luong attention, `attention` one of "
            f"{list(LUONG_SCORES)}; got attention={attention!r}."
        )
    return bool(input_feeding)


def _batch_major(sequence):
    """(T, B, F) -> (B, T, F)."""
    return ops.transpose(sequence, (1, 0, 2))


def _repeat_over_time(vector, length):
    """(B, C) -> (B, T, C)."""
    return ops.repeat(ops.expand_dims(vector, 1), length, axis=1)
