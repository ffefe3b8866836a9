"""Recurrent encoder-decoder, with or without attention."""

import keras
from keras import ops

from kseq.decoding.state import gather_beams
from kseq.layers.masking import padding_mask, reverse_real_steps
from kseq._compat import is_empty_batch
from kseq.layers.recurrent import num_states
from kseq.layers.rnn_decoder import RNNDecoder
from kseq.layers.rnn_encoder import RNNEncoder
from kseq.models.seq2seq import Seq2Seq
from kseq._validation import check_float, check_positive_int


@keras.saving.register_keras_serializable("kseq")
class RNNSeq2Seq(Seq2Seq):
    """Sequence to sequence with recurrent networks.

    The encoder's final states initialise the decoder (through a linear
    bridge when the encoder is bidirectional). Training is teacher-forced:
    `target_ids` starts with BOS and the labels are the targets shifted left.

    Args:
        source_vocab_size, target_vocab_size: id counts (ids 0-3 are special).
        embed_dim: E, token embedding width. Defaults to 256.
        units: U, hidden size of every recurrent layer. Defaults to 256.
        cell: "rnn", "lstm" or "gru". Defaults to "lstm".
        num_layers: layers of encoder and decoder. Defaults to 1.
        bidirectional: bidirectional encoder. Defaults to False.
        attention: None (context vector only), "dot", "general", "concat"
            (Luong) or "bahdanau".
        peeky: feed the encoder's context vector (its top final state) to
            every decoder step and to the output layer.
        reverse_source: reverse each source's real tokens (not its padding)
            before encoding, as in Sutskever et al. Attention weights are
            still reported against the original source order.
        dropout: rate on embeddings and between stacked layers.
        input_feeding: with a Luong attention ("dot", "general" or
            "concat"), concatenate the attentional vector
            h~_t = tanh(W_c [c_t; s_t]) of step t to the target embedding
            read at step t+1 (zeros at the first step), so that the decoder
            knows what it attended to before (Luong, Pham and Manning, 2015,
            section 3.3). The teacher-forced decoder then runs step by step
            instead of on keras' fused kernels. Defaults to False.
        embedding_stddev: embeddings start from N(0, stddev^2), or from
            keras' U(-0.05, 0.05) with None. Defaults to 1.0: keras' small
            inputs keep the recurrent layers on the unigram loss for
            hundreds of steps (benchmarks/results-rnn-first-steps-*.md).

    Call arguments:
        inputs: {"source_ids": (B, S) int, "target_ids": (B, T) int}.
        training: whether dropout is active.

    Returns:
        (B, T, target_vocab_size) logits.

    Example:
    >>> model = RNNSeq2Seq(30, 30, embed_dim=16, units=32, attention="general")
    >>> model.compile("adam", kseq.losses.MaskedSparseCategoricalCrossentropy())
    >>> ids = {"source_ids": keras.ops.ones((2, 5), "int32"),
    ...        "target_ids": keras.ops.ones((2, 6), "int32")}
    >>> tuple(model(ids).shape)
    (2, 6, 30)

    References:
        Sutskever, Vinyals and Le, 2014; Cho et al., 2014; Bahdanau, Cho and
        Bengio, 2015; Luong, Pham and Manning, 2015.
    """

    config_names = Seq2Seq.config_names + (
        "embed_dim", "units", "cell", "num_layers", "bidirectional", "attention", "peeky",
        "reverse_source", "dropout", "input_feeding", "embedding_stddev",
    )

    def __init__(
        self,
        source_vocab_size: int,
        target_vocab_size: int,
        embed_dim: int = 256,
        units: int = 256,
        cell: str = "lstm",
        num_layers: int = 1,
        bidirectional: bool = False,
        attention: str | None = None,
        peeky: bool = False,
        reverse_source: bool = False,
        dropout: float = 0.0,
        input_feeding: bool = False,
        embedding_stddev: float = 1.0,
        **kwargs,
    ) -> None:
        super().__init__(source_vocab_size, target_vocab_size, **kwargs)
        self.embed_dim = check_positive_int("embed_dim", embed_dim)
        self.encoder = RNNEncoder(
            cell, units, num_layers, bidirectional, dropout, dtype=self.dtype_policy, name="encoder"
        )
        self.decoder = RNNDecoder(
            cell, units, num_layers, attention, peeky, dropout, input_feeding,
            dtype=self.dtype_policy, name="decoder",
        )
        self.units, self.cell, self.num_layers = units, cell, num_layers
        self.bidirectional, self.attention, self.peeky = bool(bidirectional), attention, bool(peeky)
        self.reverse_source = bool(reverse_source)
        self.dropout = dropout
        self.input_feeding = self.decoder.input_feeding
        self.embedding_stddev = (None if embedding_stddev is None
                                 else check_float("embedding_stddev", embedding_stddev, low=0, low_open=True))
        self.source_embedding, self.target_embedding = (
            keras.layers.Embedding(size, embed_dim, embeddings_initializer=self._embedding_init(),
                                   dtype=self.dtype_policy, name=name)
            for size, name in ((source_vocab_size, "source_embedding"), (target_vocab_size, "target_embedding"))
        )
        self.embedding_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self.output_projection = keras.layers.Dense(
            target_vocab_size, dtype=self.dtype_policy, name="output_projection"
        )
        # Bidirectional encoder states are 2U wide; the decoder's are U.
        self.bridges = [
            [
                keras.layers.Dense(units, dtype=self.dtype_policy, name=f"bridge_{i}_{j}")
                for j in range(num_states(cell))
            ]
            for i in range(num_layers if self.bidirectional else 0)
        ]

    def _embedding_init(self):
        if self.embedding_stddev is None:
            return "uniform"
        return keras.initializers.RandomNormal(stddev=self.embedding_stddev)

    def build(self, inputs_shape=None):
        batch = None
        self.source_embedding.build((batch, None))
        self.target_embedding.build((batch, None))
        self.encoder.build((batch, None, self.embed_dim))
        memory_shape = (batch, None, self.encoder.output_dim)
        for layer_bridges in self.bridges:
            for bridge in layer_bridges:
                bridge.build((batch, self.encoder.output_dim))
        self.decoder.build(
            (batch, None, self.embed_dim),
            memory_shape=memory_shape if self.attention is not None else None,
            context_shape=(batch, self.encoder.output_dim) if self.peeky else None,
        )
        self.output_projection.build((batch, None, self.decoder.output_dim))
        self.built = True

    def encode(self, source_ids, training=False):
        """Encodes sources: the memory attention reads and the final states.

        Args:
            source_ids: (B, S) int ids, right-padded with PAD.
            training: whether dropout is active. Defaults to False.

        Returns:
            {"memory": (B, S, U') outputs in source order, "states": per layer
            [h(, c)]}.
        """
        self._ensure_built()
        mask = padding_mask(source_ids)
        if self.reverse_source:
            source_ids = reverse_real_steps(source_ids, mask)
        x = self.embedding_dropout(self.source_embedding(source_ids), training=training)
        memory, states = self.encoder(x, padding_mask=mask, training=training)
        if self.reverse_source:  # memory[s] belongs to source token s again
            memory = reverse_real_steps(memory, mask)
        return {"memory": memory, "states": states}

    def _decoder_args(self, encoder_outputs, source_padding_mask):
        """Encoder outputs -> the decoder's initial_state/memory/context."""
        states = encoder_outputs["states"]
        if self.bidirectional:
            states = [
                [bridge(state) for bridge, state in zip(layer_bridges, layer_states)]
                for layer_bridges, layer_states in zip(self.bridges, states)
            ]
        return {
            "initial_state": states,
            "memory": encoder_outputs["memory"] if self.attention else None,
            "memory_mask": source_padding_mask,
            "context": encoder_outputs["states"][-1][0] if self.peeky else None,
        }

    def initial_state(self, encoder_outputs, source_padding_mask, max_length=None):
        """Makes the decoder state: bridged encoder states, plus the source for attention.

        Args:
            encoder_outputs: `encode`'s outputs.
            source_padding_mask: (B, S) bool, True at real source tokens.
            max_length: unused: the recurrent state has fixed shapes. Defaults to None.

        Returns:
            The decoder's state (`RNNDecoder.initial_decoding_state`).
        """
        return self.decoder.initial_decoding_state(
            **self._decoder_args(encoder_outputs, source_padding_mask)
        )

    def step_with_attention(self, token_ids, state, index):
        """Runs one decoding step, with its attention over the source.

        Args:
            token_ids: (B,) the previous tokens.
            state: the decoding state.
            index: unused: the recurrent state knows the position.

        Returns:
            (logits, state, attention): (B, V) next-token logits, the new
            state, and (B, S) attention, or None without attention.
        """
        features, state, weights = self.decoder.step(self.target_embedding(token_ids), state)
        return self.output_projection(features), state, weights

    @property
    def has_attention(self):
        return self.attention is not None

    def reorder_state(self, state, indices):
        """Reorders what the steps change (recurrent states, the input-fed vector) only.

        The source memory and context are the same for every beam of a row.

        Args:
            state: the decoding state.
            indices: (R,) int32 rows to take.

        Returns:
            The state with its varying part reordered.
        """
        return dict(state, **gather_beams(self.decoder.varying_state(state), indices))

    def _decoder_inputs(self, source_ids, target_ids, training):
        encoded = self.encode(source_ids, training)
        embedded = self.embedding_dropout(self.target_embedding(target_ids), training=training)
        return embedded, self._decoder_args(encoded, padding_mask(source_ids))

    def call(self, inputs, training=None):
        source_ids, target_ids = self._split_inputs(inputs)
        if is_empty_batch(source_ids):  # (0, T, V)
            return ops.zeros((0, target_ids.shape[1], self.target_vocab_size), self.compute_dtype)
        embedded, decoder_args = self._decoder_inputs(source_ids, target_ids, training)
        features = self.decoder(embedded, training=training, **decoder_args)
        return self.output_projection(features)
