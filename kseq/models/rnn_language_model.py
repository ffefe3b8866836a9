"""Recurrent language model, trained with truncated backpropagation through time."""

import contextlib

import keras
import tensorflow as tf
from keras import ops

from kseq._compat import forget_traced_function, is_empty_batch
from kseq.layers.masking import padding_mask
from kseq.layers.recurrent import CELL_TYPES, call_recurrent, make_rnn_layer, num_states, run_cell
from kseq.models.base import KseqModel, check_vocab_size
from kseq.models.generator import Generator
from kseq.special_ids import EOS_ID
from kseq._validation import check_choice, check_positive_int, check_rate, check_token_ids


@keras.saving.register_keras_serializable("kseq")
class RNNLanguageModel(Generator, KseqModel):
    """Embedding -> stacked RNN -> affine -> softmax over the next token.

    With `carry_state=True` (the default), `fit` and `evaluate` train and
    score with truncated BPTT on batches from `kseq.data.stream_batches`:
    the recurrent state at the end of batch j starts batch j+1 (the forward
    pass reads each stream as one text) but no gradient flows back into
    batch j, since the state is kept in variables between batches. The
    carried state is zeroed at the start of every epoch and of every
    evaluation; under a tf.distribute strategy each replica carries the
    state of its own streams. With `carry_state=False` every batch starts
    from a zero state (independent chunks). Outside `fit`/`evaluate` (or the
    `streaming` context), calls start from a zero state.

    Args:
        vocab_size: V, the number of ids (0-3 are PAD, BOS, EOS, UNK).
        embed_dim: E, token embedding width. Defaults to 256.
        units: U, hidden size of each recurrent layer. Defaults to 256.
        cell: "rnn", "lstm" or "gru". Defaults to "lstm".
        num_layers: stacked recurrent layers. Defaults to 1.
        dropout: rate on the embeddings, between layers and before the
            output layer (Zaremba et al.). Defaults to 0.
        tie_weights: use the embedding matrix as the output layer (Press and
            Wolf; Inan et al.); needs `embed_dim == units`. Defaults to False.
        carry_state: carry the state across batches in `fit`/`evaluate`.

    Call arguments:
        token_ids: (B, T) int ids; PAD (0) positions are skipped.
        training: whether dropout is active.

    Returns:
        (B, T, V) logits of the next token at every position.

    Example:
    >>> model = RNNLanguageModel(50, embed_dim=16, units=16, tie_weights=True)
    >>> model.compile("adam", kseq.losses.MaskedSparseCategoricalCrossentropy())
    >>> stream = np.arange(4, 50).repeat(20)
    >>> data = kseq.data.stream_batches(stream, batch_size=4, chunk_length=10)
    >>> history = model.fit(data, epochs=1, verbose=0)
    >>> ids = model.generate([[5, 6, 7]], max_length=5, method="sample", seed=1)
    >>> tuple(ids.shape)[0]
    1

    References:
        Elman, 1990; Williams and Peng, 1990 (truncated BPTT); Mikolov et
        al., 2010; Zaremba, Sutskever and Vinyals, 2014.
    """

    config_names = ("vocab_size", "embed_dim", "units", "cell", "num_layers", "dropout",
                    "tie_weights", "carry_state")

    def __init__(
        self, vocab_size: int, embed_dim: int = 256, units: int = 256, cell: str = "lstm", num_layers: int = 1,
        dropout: float = 0.0,
        tie_weights: bool = False, carry_state: bool = True, **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.vocab_size = check_vocab_size("vocab_size", vocab_size)
        self.embed_dim = check_positive_int("embed_dim", embed_dim)
        self.units = check_positive_int("units", units)
        self.cell = check_choice("cell", cell, CELL_TYPES)
        self.num_layers = check_positive_int("num_layers", num_layers)
        self.dropout = check_rate("dropout", dropout)
        self.tie_weights = bool(tie_weights)
        self.carry_state = bool(carry_state)
        if self.tie_weights and embed_dim != units:
            raise ValueError(
                f"`tie_weights=True` needs `embed_dim` == `units` (the output layer is the "
                f"embedding matrix); got embed_dim={embed_dim} and units={units}."
            )
        self.embedding = keras.layers.Embedding(
            vocab_size, embed_dim, dtype=self.dtype_policy, name="embedding"
        )
        self.rnn_layers = [
            make_rnn_layer(cell, units, self.dtype_policy, f"rnn_{i}") for i in range(num_layers)
        ]
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self.output_projection = None if self.tie_weights else keras.layers.Dense(
            vocab_size, dtype=self.dtype_policy, name="output_projection"
        )
        self._streams = _Streams()

    output_vocab_name = "vocab_size"

    @property
    def output_vocab_size(self):
        return self.vocab_size

    def build(self, inputs_shape=None):
        self.embedding.build((None, None))
        width = self.embed_dim
        for layer in self.rnn_layers:
            layer.build((None, None, width))
            width = self.units
        if self.tie_weights:
            self.output_bias = self.add_weight(
                name="output_bias", shape=(self.vocab_size,), initializer="zeros"
            )
        else:
            self.output_projection.build((None, None, self.units))
        self.built = True

    def call(self, token_ids, training=None):
        token_ids = check_token_ids(token_ids, "token_ids", self.vocab_size)
        if is_empty_batch(token_ids):  # (0, T, V)
            return ops.zeros((0, token_ids.shape[1], self.vocab_size), self.compute_dtype)
        name = self._streams.active if self.carry_state else None
        states = self._streams.read(name) if name else None
        x = self.embedding(token_ids)
        logits, final = self._run(x, padding_mask(token_ids), states, training)
        if name:
            self._streams.write(name, final)
        return logits

    def _run(self, x, mask, states, training):
        """(B, T, E) embedded tokens -> (logits (B, T, V), final states)."""
        x = self.dropout_layer(x, training=training)
        finals = []
        for i, layer in enumerate(self.rnn_layers):
            initial = None if states is None else list(states[i])
            x, *final = call_recurrent(layer, x, mask, initial, training)
            finals.append(final)
            x = self.dropout_layer(x, training=training)
        return self._project(x), finals

    def _project(self, x):
        if self.tie_weights:
            return ops.matmul(x, ops.transpose(self.embedding.embeddings)) + self.output_bias
        return self.output_projection(x)

    # Truncated BPTT -------------------------------------------------------

    @contextlib.contextmanager
    def streaming(self, name, batch_size):
        """Inside, calls carry state from call to call in streams `name`.

        Args:
            name: which carried state ("train" and "eval" are used by `fit`
                and `evaluate`; any other name is the caller's).
            batch_size: B, the global number of streams; under a strategy
                with R replicas each carries B / R of them.
        """
        self._ensure_built()
        self._streams.make(name, batch_size, self)
        previous, self._streams.active = self._streams.active, name
        try:
            yield self
        finally:
            self._streams.active = previous

    def reset_streams(self, name=None):
        """Zeroes the carried state of one set of streams, or of all.

        Args:
            name: the streams, e.g. "train" or "eval". Defaults to None (all).
        """
        for stream_name, layers in self._streams.variables.items():
            if name in (None, stream_name):
                for variable in tf.nest.flatten(layers):
                    variable.assign(tf.zeros_like(variable))

    def carried_state(self, name):
        """Reads the carried state of a set of streams, e.g. to save it.

        Args:
            name: the streams, e.g. "train" or "eval".

        Returns:
            Per layer, per state tensor (h, c), a list of each replica's
            (B / R, U) numpy array.
        """
        strategy = self.distribute_strategy
        return [
            [[value.numpy() for value in strategy.experimental_local_results(variable)]
             for variable in layer]
            for layer in self._streams.variables[name]
        ]

    def set_carried_state(self, name, state):
        """Writes the carried state of a set of streams, e.g. to resume.

        Args:
            name: the streams, e.g. "train" or "eval".
            state: the state in the form `carried_state` returns.
        """
        strategy = self.distribute_strategy
        for layer_variables, layer_state in zip(self._streams.variables[name], state):
            for variable, values in zip(layer_variables, layer_state):
                for local, value in zip(strategy.experimental_local_results(variable), values):
                    local.assign(value)

    def fit(self, x=None, y=None, *args, callbacks=None, **kwargs):
        """Trains as keras' `fit`, zeroing the carried train state as each epoch begins.

        A callback with `resets_train_streams = True` can take the zeroing
        over (`kseq.training.loop.fit.CarriedStreams`, which resets where
        data epochs begin when fit's epochs are evaluation periods).

        Args:
            x: the training data, as keras' `fit` takes it. Defaults to None.
            y: targets, as keras' `fit` takes them. Defaults to None.
            *args: keras' other positional arguments.
            callbacks: keras callbacks. Defaults to None.
            **kwargs: keras' other `fit` arguments.

        Returns:
            keras' History.
        """
        if not self.carry_state:
            return super().fit(x, y, *args, callbacks=callbacks, **kwargs)
        callbacks = list(callbacks or [])
        if not any(getattr(callback, "resets_train_streams", False) for callback in callbacks):
            callbacks.insert(0, keras.callbacks.LambdaCallback(
                on_epoch_begin=lambda epoch, logs=None: self.reset_streams("train")))
        with self.streaming("train", _stream_count(x, self.distribute_strategy)):
            return super().fit(x, y, *args, callbacks=callbacks, **kwargs)

    def evaluate(self, x=None, y=None, *args, **kwargs):
        """Evaluates as keras' `evaluate`, on eval streams zeroed first.

        Args:
            x: the evaluation data, as keras' `evaluate` takes it. Defaults to None.
            y: targets, as keras' `evaluate` takes them. Defaults to None.
            *args: keras' other positional arguments.
            **kwargs: keras' other `evaluate` arguments.

        Returns:
            What keras' `evaluate` returns.
        """
        if not self.carry_state:
            return super().evaluate(x, y, *args, **kwargs)
        with self.streaming("eval", _stream_count(x, self.distribute_strategy)):
            self.reset_streams("eval")
            return super().evaluate(x, y, *args, **kwargs)

    # Generation -----------------------------------------------------------

    def _check_prompt(self, prompt_ids):
        return check_token_ids(prompt_ids, "prompt_ids", self.vocab_size)

    def begin_decoding(self, prompt_ids, max_length):
        """Reads each right-padded prompt row up to its last real token, which the first step reads.

        An empty row starts from EOS, the start of a document.

        Args:
            prompt_ids: (B, S) int prompt ids, right-padded with PAD.
            max_length: unused: the recurrent state has fixed shapes.

        Returns:
            (state, start_tokens): {"rnn": per layer [h(, c)]}, and (B,) each
            row's last real token.
        """
        mask = padding_mask(prompt_ids)
        lengths = tf.reduce_sum(tf.cast(mask, tf.int32), axis=1)
        before_last = tf.range(tf.shape(prompt_ids)[1])[None, :] < (lengths - 1)[:, None]
        _, states = self._run(self.embedding(prompt_ids), before_last, None, training=False)
        last = tf.gather(prompt_ids, tf.maximum(lengths - 1, 0), batch_dims=1)
        return {"rnn": states}, tf.where(lengths > 0, last, EOS_ID)

    def step_with_attention(self, token_ids, state, index):
        """Runs one step of the language model.

        Args:
            token_ids: (B,) the previous tokens.
            state: {"rnn": per layer [h(, c)]}.
            index: unused: the recurrent state knows the position.

        Returns:
            (logits, state, None): (B, V) next-token logits, the new state,
            and no attention.
        """
        x = self.embedding(token_ids)
        new_states = []
        for layer, layer_states in zip(self.rnn_layers, state["rnn"]):
            x, layer_states = run_cell(layer, x, layer_states)
            new_states.append(layer_states)
        return self._project(x), {"rnn": new_states}, None


class _Streams:
    """The carried states, as variables kept off the model's weights and
    checkpoints (a plain object: neither Keras nor TensorFlow tracks it)."""

    def __init__(self):
        self.variables = {}  # name -> per layer, per state tensor
        self.active = None  # the streams calls read and write, at trace time

    def make(self, name, batch_size, model):
        strategy = model.distribute_strategy
        replicas = strategy.num_replicas_in_sync
        batch_size = check_positive_int("batch_size", batch_size)
        if batch_size % replicas:
            raise ValueError(
                f"The {batch_size} streams of a batch must split evenly over the "
                f"{replicas} replicas; use a batch_size divisible by {replicas}."
            )
        rows = batch_size // replicas
        existing = self.variables.get(name)
        if existing and existing[0][0].shape[0] == rows:
            return
        # Each replica reads and writes its own copy (ON_READ), as it
        # carries its own streams.
        with strategy.scope():
            self.variables[name] = [
                [
                    tf.Variable(
                        tf.zeros((rows, model.units), model.compute_dtype), trainable=False,
                        synchronization=tf.VariableSynchronization.ON_READ,
                        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
                        name=f"{name}_state_{i}_{j}",
                    )
                    for j in range(num_states(model.cell))
                ]
                for i in range(model.num_layers)
            ]
        if existing:  # the function traced with the old variables must trace again
            forget_traced_function(model, {"train": "train", "eval": "test"}.get(name, "predict"))

    def read(self, name):
        return [[ops.convert_to_tensor(v) for v in layer] for layer in self.variables[name]]

    def write(self, name, states):
        for layer_variables, layer_states in zip(self.variables[name], states):
            for variable, value in zip(layer_variables, layer_states):
                variable.assign(tf.cast(value, variable.dtype))


def _stream_count(data, strategy):
    """The fixed number of streams B in a dataset's batches: over all
    replicas for a distributed dataset (whose elements are a replica's)."""
    distributed = isinstance(data, tf.distribute.DistributedDataset)
    if not (distributed or isinstance(data, tf.data.Dataset)):
        raise ValueError(
            "A language model with `carry_state=True` trains and evaluates on a "
            "tf.data.Dataset of stream batches (kseq.data.stream_batches); got "
            f"{type(data).__name__}. Use carry_state=False for independent sequences."
        )
    spec = tf.nest.flatten(data.element_spec, expand_composites=distributed)[0]
    batch = spec.shape[0] if spec.shape.rank else None
    if batch is None:
        raise ValueError(
            "Truncated BPTT needs the same number of streams in every batch (a static "
            "batch dimension); build the dataset with kseq.data.stream_batches."
        )
    return batch * strategy.num_replicas_in_sync if distributed else batch
