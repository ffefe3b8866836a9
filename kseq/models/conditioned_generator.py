"""One-to-many: a token sequence generated from one fixed input (a class or a vector)."""

import keras
import tensorflow as tf
from keras import ops

from kseq._compat import is_empty_batch
from kseq.decoding.state import gather_beams
from kseq.layers.recurrent import num_states
from kseq.layers.rnn_decoder import RNNDecoder
from kseq.models.base import KseqModel, check_vocab_size
from kseq.models.generator import Generator
from kseq.special_ids import BOS_ID
from kseq._validation import as_id_array, check_positive_int, check_token_ids


@keras.saving.register_keras_serializable("kseq")
class ConditionedGenerator(Generator, KseqModel):
    """A recurrent decoder whose initial state comes from a condition:
    image-captioning style generation (one input, many outputs).

    The condition is a float feature vector (`condition_dim=N`, e.g. image
    features) or a class id (`num_classes=K`, looked up in a learned
    embedding of width `embed_dim`). Its vector z sets every layer's initial
    state through a learned projection, tanh(W z + b) (one for h and, for
    an LSTM, one for c); with `peeky=True` z is also concatenated to every
    step's input and to the output features (the peeky decoder of
    kseq.layers.RNNDecoder). Training is teacher-forced: `target_ids`
    starts with BOS and the labels are the targets shifted left, ending
    with EOS.

    `generate(condition, ...)` takes the conditions (B, N) float or (B,)
    int and decodes with any kseq search (greedy, beam, sample). Through
    the decoder protocol (`begin_decoding`, `search`) the condition travels
    as (B, S) int32 ids, which `pack_condition` makes.

    Args:
        vocab_size: V, output token ids (0-3 are PAD, BOS, EOS, UNK).
        condition_dim: N, the width of a float condition vector; or None.
        num_classes: K, the number of class ids of a class condition; or
            None. Give exactly one of `condition_dim` and `num_classes`.
        embed_dim: E, token (and class) embedding width. Defaults to 256.
        units: U, hidden size of every recurrent layer. Defaults to 256.
        cell: "rnn", "lstm" or "gru". Defaults to "lstm".
        num_layers: stacked recurrent layers. Defaults to 1.
        peeky: feed z to every step and to the output layer. Defaults to
            False.
        dropout: rate on the token embeddings and between stacked layers.
            Defaults to 0.

    Call arguments:
        inputs: {"condition": (B, N) float or (B,) int class ids,
            "target_ids": (B, T) int}, or the pair (condition, target_ids).
        training: whether dropout is active.

    Returns:
        (B, T, V) logits of the next token at every position.

    Example:
    >>> model = ConditionedGenerator(20, num_classes=3, embed_dim=8, units=8)
    >>> logits = model({"condition": np.array([0, 2]),
    ...                 "target_ids": np.array([[1, 5, 6], [1, 7, 0]])})
    >>> tuple(logits.shape)
    (2, 3, 20)
    >>> tuple(model.generate(np.array([1, 2, 0]), max_length=4).shape)[0]
    3

    References:
        Vinyals et al., 2015 ("Show and Tell"); Karpathy and Fei-Fei, 2015;
        Xu et al., 2015 (initial state from a projection of the features);
        Cho et al., 2014 (the context fed to every step, "peeky").
    """

    config_names = ("vocab_size", "condition_dim", "num_classes", "embed_dim", "units", "cell",
                    "num_layers", "peeky", "dropout")
    output_vocab_name = "vocab_size"
    input_name = "condition"

    def __init__(
        self, vocab_size: int, condition_dim: int | None = None, num_classes: int | None = None, embed_dim: int = 256,
        units: int = 256,
        cell: str = "lstm", num_layers: int = 1, peeky: bool = False, dropout: float = 0.0, **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if (condition_dim is None) == (num_classes is None):
            got = "both" if condition_dim is not None else "neither"
            raise ValueError(
                "Give exactly one of `condition_dim` (a float feature vector per example) "
                f"and `num_classes` (a class id per example); got {got}."
            )
        self.vocab_size = check_vocab_size("vocab_size", vocab_size)
        self.condition_dim = None if condition_dim is None else check_positive_int(
            "condition_dim", condition_dim)
        self.num_classes = None if num_classes is None else check_positive_int(
            "num_classes", num_classes)
        self.embed_dim = check_positive_int("embed_dim", embed_dim)
        policy = self.dtype_policy
        # The decoder checks cell, units, num_layers and dropout by name.
        self.decoder = RNNDecoder(cell=cell, units=units, num_layers=num_layers, peeky=peeky,
                                  dropout=dropout, dtype=policy, name="decoder")
        self.units, self.cell, self.num_layers = self.decoder.units, cell, self.decoder.num_layers
        self.peeky, self.dropout = self.decoder.peeky, self.decoder.dropout
        self.class_embedding = None if self.num_classes is None else keras.layers.Embedding(
            self.num_classes, embed_dim, dtype=policy, name="class_embedding")
        self.embedding = keras.layers.Embedding(vocab_size, embed_dim, dtype=policy,
                                                name="embedding")
        self.embedding_dropout = keras.layers.Dropout(dropout, dtype=policy)
        self.bridges = [
            [keras.layers.Dense(units, activation="tanh", dtype=policy, name=f"bridge_{i}_{j}")
             for j in range(num_states(cell))]
            for i in range(num_layers)
        ]
        self.output_projection = keras.layers.Dense(vocab_size, dtype=policy,
                                                    name="output_projection")

    @property
    def output_vocab_size(self):
        return self.vocab_size

    @property
    def condition_width(self):
        """The width of z: `condition_dim`, or `embed_dim` for class ids."""
        return self.condition_dim or self.embed_dim

    def build(self, inputs_shape=None):
        if self.class_embedding is not None:
            self.class_embedding.build((None,))
        self.embedding.build((None, None))
        for layer_bridges in self.bridges:
            for bridge in layer_bridges:
                bridge.build((None, self.condition_width))
        self.decoder.build(
            (None, None, self.embed_dim),
            context_shape=(None, self.condition_width) if self.peeky else None,
        )
        self.output_projection.build((None, None, self.decoder.output_dim))
        self.built = True

    def __call__(self, inputs, *args, **kwargs):
        if isinstance(inputs, tuple) and len(inputs) == 2:  # what fit passes for (x1, x2) data
            inputs = {"condition": inputs[0], "target_ids": inputs[1]}
        return super().__call__(inputs, *args, **kwargs)

    def call(self, inputs, training=None):
        condition, target_ids = self._split_inputs(inputs)
        if is_empty_batch(target_ids):  # (0, T, V)
            return ops.zeros((0, target_ids.shape[1], self.vocab_size), self.compute_dtype)
        z = self._condition_vector(condition)
        x = self.embedding_dropout(self.embedding(target_ids), training=training)
        features = self.decoder(x, initial_state=self._initial_states(z),
                                context=z if self.peeky else None, training=training)
        return self.output_projection(features)

    # The condition ----------------------------------------------------------

    def check_condition(self, condition, name="condition"):
        """Checks a batch of conditions: class ids or feature vectors, as the model takes.

        Shapes and dtypes raise at once; class ids outside [0, K) too when
        eager, as a runtime assertion with the same message inside a traced
        function.

        Args:
            condition: (B,) int class ids (a model with `num_classes`) or
                (B, N) float vectors (a model with `condition_dim` N).
            name: the argument's name, for messages. Defaults to "condition".

        Returns:
            (B,) int32 class ids or (B, N) float32 vectors.

        Raises:
            ValueError: if `condition` is ragged or sparse, or of the wrong
                dtype, rank, width or class range.
        """
        if isinstance(condition, (tf.RaggedTensor, tf.SparseTensor)):
            raise ValueError(f"`{name}` must be a dense tensor; got a {type(condition).__name__}.")
        condition = as_id_array(condition, name)
        if not hasattr(condition, "dtype"):
            raise ValueError(f"`{name}` must be an array or tensor; got {type(condition).__name__}.")
        dtype, shape = keras.backend.standardize_dtype(condition.dtype), tuple(condition.shape)
        if self.num_classes is not None:
            expected = f"one class id in [0, {self.num_classes}) per example, shape (batch,)"
            if "int" not in dtype:
                raise ValueError(f"`{name}` must hold {expected}; got dtype {dtype}.")
            if len(shape) != 1:
                raise ValueError(f"`{name}` must hold {expected}; got shape {shape}.")
            # check_token_ids' range check, on the ids as one column.
            return check_token_ids(ops.expand_dims(condition, 1), name, self.num_classes)[:, 0]
        expected = f"float feature vectors of shape (batch, {self.condition_dim})"
        if not dtype.startswith(("float", "bfloat")):
            raise ValueError(
                f"`{name}` must hold {expected}; got dtype {dtype} (a model of class ids "
                "takes `num_classes`)."
            )
        if len(shape) != 2:
            raise ValueError(f"`{name}` must hold {expected}; got shape {shape}.")
        if shape[1] is not None and shape[1] != self.condition_dim:
            raise ValueError(
                f"`{name}` must hold {expected} (condition_dim={self.condition_dim}); got "
                f"{shape[1]} features."
            )
        return ops.cast(condition, "float32")

    def pack_condition(self, condition, name="condition"):
        """Packs conditions as the (B, S) int32 ids that `begin_decoding` (hence `search`) reads.

        Class ids become one column (B, 1), float vectors travel bit for bit
        (their float32 bits read as int32, (B, N)): generation is traced once
        for (B, S) int32 inputs, whatever the condition.

        Args:
            condition: class ids or feature vectors, as `check_condition` takes.
            name: the argument's name, for messages. Defaults to "condition".

        Returns:
            (B, 1) or (B, N) int32 ids.

        Raises:
            ValueError: as `check_condition`.
        """
        condition = self.check_condition(condition, name)
        if self.num_classes is not None:
            return condition[:, None]
        return tf.bitcast(condition, tf.int32)

    def _unpack_condition(self, ids):
        if self.num_classes is not None:
            return ids[:, 0]
        return tf.bitcast(ids, tf.float32)

    def _condition_vector(self, condition):
        """Checked conditions -> z (B, condition_width)."""
        if self.num_classes is not None:
            return self.class_embedding(condition)
        return ops.cast(condition, self.compute_dtype)

    def _initial_states(self, z):
        """Per layer [h(, c)], each (B, U) = tanh(W z + b)."""
        return [[bridge(z) for bridge in layer_bridges] for layer_bridges in self.bridges]

    def _split_inputs(self, inputs):
        """Checks {"condition", "target_ids"}; returns (condition, target ids)."""
        if not isinstance(inputs, dict) or set(inputs) != {"condition", "target_ids"}:
            got = sorted(inputs) if isinstance(inputs, dict) else type(inputs).__name__
            raise ValueError(
                "Model inputs must be a dict with keys 'condition' and 'target_ids' (B, T) "
                f"(or the pair (condition, target_ids)); got {got}."
            )
        condition = self.check_condition(inputs["condition"])
        target_ids = check_token_ids(inputs["target_ids"], "target_ids", self.vocab_size)
        batches = condition.shape[0], target_ids.shape[0]
        if None not in batches and batches[0] != batches[1]:
            raise ValueError(
                f"`condition` and `target_ids` must have the same batch size; got {batches[0]} "
                f"and {batches[1]}."
            )
        return condition, target_ids

    # The decoder protocol (kseq.decoding.Decoder) ---------------------------

    def _check_prompt(self, condition):
        return self.pack_condition(condition)

    def begin_decoding(self, condition_ids, max_length):
        """Starts decoding from packed conditions: the decoder state and BOS for every row.

        Args:
            condition_ids: (B, S) packed conditions, from `pack_condition`.
            max_length: unused: the recurrent state has fixed shapes.

        Returns:
            (state, start_tokens): {"rnn": per layer [h(, c)], "context": z
            when peeky}, and (B,) int32 BOS ids.
        """
        z = self._condition_vector(self._unpack_condition(condition_ids))
        state = self.decoder.initial_decoding_state(
            self._initial_states(z), context=z if self.peeky else None
        )
        return state, tf.fill(tf.shape(condition_ids)[:1], BOS_ID)

    def step_with_attention(self, token_ids, state, index):
        """Runs one decoding step of the recurrent decoder.

        Args:
            token_ids: (B,) the previous tokens.
            state: the decoding state.
            index: unused: the recurrent state knows the position.

        Returns:
            (logits, state, None): (B, V) next-token logits, the new state, and
            no attention.
        """
        features, state, _ = self.decoder.step(self.embedding(token_ids), state)
        return self.output_projection(features), state, None

    def reorder_state(self, state, indices):
        """Reorders the recurrent states only: z is the same for every beam of a row.

        Args:
            state: the decoding state.
            indices: (R,) int32 rows to take.

        Returns:
            The state with its "rnn" states reordered.
        """
        return dict(state, rnn=gather_beams(state["rnn"], indices))
