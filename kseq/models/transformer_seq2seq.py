"""The Transformer encoder-decoder."""

import keras
import tensorflow as tf
from keras import ops

from kseq.decoding.state import gather_beams, tile_beams
from kseq.layers.compiled_blocks import CompiledBlocks
from kseq.layers.dropout import StepDropout
from kseq.layers.masking import padding_mask
from kseq.layers.layer_norm import LayerNorm
from kseq.layers.token_and_position_embedding import TokenAndPositionEmbedding
from kseq.layers.transformer_decoder_block import TransformerDecoderBlock
from kseq.layers.transformer_encoder_block import TransformerEncoderBlock
from kseq.models.seq2seq import Seq2Seq
from kseq._validation import check_float, check_positive_int

# The feed-forward activations a TransformerSeq2Seq takes ("swish" is keras'
# name of silu too).
ACTIVATIONS = ("relu", "gelu", "silu", "swish")


@keras.saving.register_keras_serializable("kseq")
class TransformerSeq2Seq(Seq2Seq):
    """Encoder and decoder stacks of Transformer blocks.

    Args:
        source_vocab_size, target_vocab_size: id counts (ids 0-3 are special).
        num_layers: blocks in each stack. Defaults to 6.
        d_model: D, the model width. Defaults to 512.
        num_heads: H; must divide D. Defaults to 8.
        ff_dim: feed-forward inner width. Defaults to 2048.
        dropout: rate on embeddings and sublayer outputs. Defaults to 0.1.
        norm_first: False for post-norm (the paper), True for pre-norm (each
            stack then ends with a LayerNorm).
        max_length: the longest source, target or generation. Defaults to 512.
        position: "sinusoidal" or "learned" position encodings.
        share_embeddings: one embedding (tokens and positions) for source and
            target, with the output projection tied to it (needs equal
            vocabulary sizes).
        activation: the feed-forward activation, "relu" (the paper's,
            default), "gelu" (exact), "silu" or "swish" (Marian's, one
            function).
        layer_norm_epsilon: every LayerNorm's epsilon. Defaults to 1e-5.
        scale_embeddings: token embeddings times sqrt(D) before positions
            are added (the paper's, and Marian's). Defaults to True.
        decoder_num_layers, decoder_num_heads, decoder_ff_dim: the decoder
            stack's depth, heads and feed-forward width where they differ
            from the encoder's (`num_layers`, `num_heads`, `ff_dim`), as in a
            distilled Marian student. Default None: the encoder's.
        tie_output_embedding: without `share_embeddings`, the output
            projection is the target embedding's table (transposed) plus a
            bias, as Marian's separate vocabularies have it. Defaults to
            False: its own Dense layer. `share_embeddings` ties it always.
        compiled_blocks: in training, run each stack's blocks through one
            XLA-compiled function (`kseq.layers.compiled_blocks`), the rest
            of the train step uncompiled. What is measured: XLA compiles a
            stack's function once forward and once backward whatever the
            depth, where a whole step's compile time grows with it
            (benchmarks/xla_compile.py; figures in benchmarks/RESULTS.md, "GPU").
            What is not: a faster step. No GPU has timed it faster than
            the default, and on the CPUs measured it was not faster. Its
            dropout masks come from one key a step
            (`kseq.layers.dropout.StepDropout`): other draws than the
            default's, with the same keep probability. Weights and configs
            are the default's; evaluation, decoding and exports run the
            blocks as layers. `kseq-train --jit-compile blocks` sets it.
            Defaults to False.

    Call arguments:
        inputs: {"source_ids": (B, S) int, "target_ids": (B, T) int}.
        training: whether dropout is active.

    Returns:
        (B, T, target_vocab_size) logits.

    Decoding keeps, per decoder layer, a preallocated self-attention
    key/value cache and the source's cross-attention keys/values, so one
    step costs one token's work.

    With `compiled_blocks` a training step draws its dropout masks from one
    `StepDropout`, seeded by the embedding dropout's seed generator (the
    embeddings in stream 0, block i in its own), in place of keras' Dropout
    layers, which stay, unused, so that weights and configs are the same.

    Example:
    >>> model = TransformerSeq2Seq(100, 100, num_layers=2, d_model=32,
    ...                            num_heads=4, ff_dim=64)
    >>> ids = {"source_ids": keras.ops.ones((2, 5), "int32"),
    ...        "target_ids": keras.ops.ones((2, 6), "int32")}
    >>> tuple(model(ids).shape)
    (2, 6, 100)

    References:
        Vaswani et al., 2017, "Attention Is All You Need"; Press and Wolf,
        2017 (tied output embeddings); Xiong et al., 2020 (pre-norm).
    """

    config_names = Seq2Seq.config_names + (
        "num_layers", "d_model", "num_heads", "ff_dim", "dropout", "norm_first", "max_length",
        "position", "share_embeddings", "compiled_blocks", "activation", "layer_norm_epsilon",
        "scale_embeddings", "decoder_num_layers", "decoder_num_heads", "decoder_ff_dim",
        "tie_output_embedding",
    )

    def __init__(
        self,
        source_vocab_size: int,
        target_vocab_size: int,
        num_layers: int = 6,
        d_model: int = 512,
        num_heads: int = 8,
        ff_dim: int = 2048,
        dropout: float = 0.1,
        norm_first: bool = False,
        max_length: int = 512,
        position: str = "sinusoidal",
        share_embeddings: bool = False,
        compiled_blocks: bool = False,
        activation: str = "relu",
        layer_norm_epsilon: float = 1e-5,
        scale_embeddings: bool = True,
        decoder_num_layers: int | None = None,
        decoder_num_heads: int | None = None,
        decoder_ff_dim: int | None = None,
        tie_output_embedding: bool = False,
        **kwargs,
    ) -> None:
        super().__init__(source_vocab_size, target_vocab_size, **kwargs)
        self.num_layers = check_positive_int("num_layers", num_layers)
        self.d_model = check_positive_int("d_model", d_model)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.decoder_num_layers = _check_optional_int("decoder_num_layers", decoder_num_layers)
        self.decoder_num_heads = _check_optional_int("decoder_num_heads", decoder_num_heads)
        self.decoder_ff_dim = _check_optional_int("decoder_ff_dim", decoder_ff_dim)
        _check_shapes(d_model, {"num_heads": num_heads, "decoder_num_heads": self.decoder_num_heads or num_heads},
                      share_embeddings, source_vocab_size, target_vocab_size)
        self.ff_dim, self.dropout, self.norm_first = ff_dim, dropout, bool(norm_first)
        self.max_length = check_positive_int("max_length", max_length)
        self.position, self.share_embeddings = position, bool(share_embeddings)
        self.compiled_blocks = bool(compiled_blocks)
        self.activation = _check_activation(activation)
        self.layer_norm_epsilon = check_float("layer_norm_epsilon", layer_norm_epsilon, low=0, low_open=True)
        self.scale_embeddings = bool(scale_embeddings)
        self.tie_output_embedding = bool(tie_output_embedding)
        self.encoder_blocks, self.decoder_blocks = self._make_blocks()
        self.source_embedding = self._make_embedding(source_vocab_size, "source_embedding")
        self.target_embedding = (
            self.source_embedding
            if share_embeddings
            else self._make_embedding(target_vocab_size, "target_embedding")
        )
        self.embedding_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        # Pre-norm stacks end with a LayerNorm; post-norm blocks already do.
        self.encoder_norm = self._make_final_norm("encoder_norm")
        self.decoder_norm = self._make_final_norm("decoder_norm")
        self.output_projection = None
        if not (share_embeddings or tie_output_embedding):
            self.output_projection = keras.layers.Dense(
                target_vocab_size, dtype=self.dtype_policy, name="output_projection"
            )

    def _make_blocks(self):
        """(encoder blocks, decoder blocks), the decoder's of its own depth, heads and width where given."""
        block_args = dict(dropout=self.dropout, norm_first=self.norm_first, activation=self.activation,
                          layer_norm_epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy)
        encoder = [TransformerEncoderBlock(name=f"encoder_{i}", num_heads=self.num_heads, ff_dim=self.ff_dim,
                                           **block_args) for i in range(self.num_layers)]
        decoder = [TransformerDecoderBlock(name=f"decoder_{i}", num_heads=self.decoder_num_heads or self.num_heads,
                                           ff_dim=self.decoder_ff_dim or self.ff_dim, **block_args)
                   for i in range(self.decoder_num_layers or self.num_layers)]
        return encoder, decoder

    @property
    def length_limit(self):
        return self.max_length

    @classmethod
    def from_pretrained(cls, name_or_folder, dtype=None, dropout=None):
        """Loads a Marian checkpoint (OPUS-MT's, in the Hugging Face layout) as a TransformerSeq2Seq.

        `kseq.pretrained.load_marian` gives its two tokenizers too
        (`kseq.data.marian_tokenizer.MarianTokenizer`), which map Marian's
        ids onto kseq's.

        Args:
            name_or_folder: a folder holding config.json, model.safetensors
                (or pytorch_model.bin with PyTorch installed), source.spm,
                target.spm and vocab.json; or a Hub name such as
                "Helsinki-NLP/opus-mt-en-de" (needs `huggingface_hub` and a network).
            dtype: the dtype policy. Default None: keras' global one.
            dropout: the dropout rate for fine-tuning. Default None: the config's.

        Returns:
            The built model, the checkpoint's weights loaded.

        Raises:
            kseq.errors.UsageError: a missing or bad file, or another
                architecture (the field and its value named).
        """
        from kseq.pretrained import load_marian

        return load_marian(name_or_folder, dtype=dtype, dropout=dropout).model

    def _make_embedding(self, vocab_size, name):
        return TokenAndPositionEmbedding(
            vocab_size, self.d_model, self.max_length, self.position,
            scale_embeddings=self.scale_embeddings,
            mask_zero=False,  # masks are passed explicitly
            dtype=self.dtype_policy, name=name,
        )

    def _make_final_norm(self, name):
        if not self.norm_first:
            return None
        return LayerNorm(epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name)

    def build(self, inputs_shape=None):
        batch, shape = None, (None, None, self.d_model)
        self.source_embedding.build((batch, None))
        if not self.share_embeddings:
            self.target_embedding.build((batch, None))
        for block in self.encoder_blocks:
            block.build(shape)
        for block in self.decoder_blocks:
            block.build(shape, shape)
        for norm in (self.encoder_norm, self.decoder_norm):
            if norm is not None:
                norm.build(shape)
        if self.output_projection is not None:
            self.output_projection.build(shape)
        else:
            self.output_bias = self.add_weight(
                name="output_bias", shape=(self.target_vocab_size,), initializer="zeros"
            )
        # Chosen once: every trace builds the same graph.
        self._compiled = None
        if self.compiled_blocks:
            self._compiled = (CompiledBlocks(self.encoder_blocks[0]), CompiledBlocks(self.decoder_blocks[0]))
        self._uses_step_dropout = self._compiled is not None and self.dropout > 0
        self.built = True

    def _dropout_of_step(self, training):
        """A `StepDropout` for a training step with compiled blocks, else None
        (the blocks' keras Dropout layers then drop, or nothing does)."""
        if not (training and self._uses_step_dropout):
            return None
        return StepDropout(self.embedding_dropout.seed_generator.next())

    def _drop_embedding(self, x, training, step_dropout):
        if step_dropout is None:
            return self.embedding_dropout(x, training=training)
        return step_dropout(x, self.dropout)

    def _project(self, x):
        """(B, T, D) -> (B, T, V) logits, tied to the target embedding when
        shared or `tie_output_embedding`."""
        if self.output_projection is not None:
            return self.output_projection(x)
        table = ops.cast(self.target_embedding.embeddings, x.dtype)
        bias = ops.cast(self.output_bias, x.dtype)
        return ops.matmul(x, ops.transpose(table)) + bias

    def _run_block(self, stack, index, inputs, training, step_dropout):
        """Block `index` of `stack` ("encoder" or "decoder") on its positional
        `inputs`; compiled in training with `compiled_blocks`. Its
        dropout draws in stream 1 + index (encoder) or 1 + layers + index
        (decoder): stream 0 is the embeddings'."""
        blocks = self.encoder_blocks if stack == "encoder" else self.decoder_blocks
        stream = 1 + index + (self.num_layers if stack == "decoder" else 0)
        dropout = None if step_dropout is None else step_dropout.stream_of(stream)
        if self._compiled is not None and training is True:
            compiled = self._compiled[0 if stack == "encoder" else 1]
            return compiled(blocks[index], inputs, dropout, stream)
        return blocks[index](*inputs, training=training, step_dropout=dropout)

    def encode(self, source_ids, training=False):
        """Encodes sources through the encoder stack.

        Args:
            source_ids: (B, S) int ids, right-padded with PAD.
            training: whether dropout is active. Defaults to False.

        Returns:
            {"memory": (B, S, D) encoder outputs}.
        """
        self._ensure_built()
        return self._encode(source_ids, training, self._dropout_of_step(training))

    def _encode(self, source_ids, training, step_dropout):
        mask = padding_mask(source_ids)
        x = self._drop_embedding(self.source_embedding(source_ids), training, step_dropout)
        for index in range(self.num_layers):
            x = self._run_block("encoder", index, (x, mask), training, step_dropout)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return {"memory": x}

    def call(self, inputs, training=None):
        source_ids, target_ids = self._split_inputs(inputs)
        # One StepDropout for both stacks: the embeddings draw in its stream 0, each block in its own.
        step_dropout = self._dropout_of_step(training)
        memory = self._encode(source_ids, training, step_dropout)["memory"]
        source_mask, target_mask = padding_mask(source_ids), padding_mask(target_ids)
        x = self._drop_embedding(self.target_embedding(target_ids), training, step_dropout)
        for index in range(len(self.decoder_blocks)):
            x = self._run_block("decoder", index, (x, memory, target_mask, source_mask), training,
                                step_dropout)
        if self.decoder_norm is not None:
            x = self.decoder_norm(x)
        return self._project(x)

    def initial_state(self, encoder_outputs, source_padding_mask, max_length=None):
        """Makes the decoder state: per layer, a self-attention cache and the source's keys/values.

        The cache holds L = `max_length` positions (fixed shapes, as XLA
        needs); without `max_length` it grows a step at a time inside a
        tf.function (each step's cost then follows the positions so far) and
        holds the model's `max_length` when run eagerly.

        Args:
            encoder_outputs: `encode`'s outputs.
            source_padding_mask: (B, S) bool, True at real source tokens.
            max_length: L, the positions a cache holds. Defaults to None.

        Returns:
            {"source_mask": (B, S) bool, "layers": per decoder layer
            {"cache": (B, H, L, D/H) zeroed keys/values, "memory": the
            cross-attention keys/values}}.
        """
        memory = encoder_outputs["memory"]
        length = self.max_length if max_length is None and tf.executing_eagerly() else max_length
        return {
            "source_mask": ops.cast(source_padding_mask, "bool"),
            "layers": [block.initial_decoding_state(memory, length) for block in self.decoder_blocks],
        }

    def step_with_attention(self, token_ids, state, index):
        """Runs one decoding step through every decoder layer's cache.

        Args:
            token_ids: (B,) tokens at position `index`.
            state: the decoding state.
            index: the position of `token_ids`.

        Returns:
            (logits, state, attention): (B, V) next-token logits, the new
            state, and (B, S) the last layer's cross-attention averaged over heads.
        """
        x = self.target_embedding(ops.expand_dims(token_ids, 1), start_index=index)
        layers = []
        for block, layer_state in zip(self.decoder_blocks, state["layers"]):
            x, layer_state, weights = block.step(x, layer_state, index, state["source_mask"])
            layers.append(layer_state)
        if self.decoder_norm is not None:
            x = self.decoder_norm(x)
        return self._project(x)[:, 0], dict(state, layers=layers), ops.mean(weights[:, :, 0], axis=1)

    def tile_state(self, state, beam_size):
        """Tiles the self-attention caches only: the source mask and its keys/values stay one a row.

        `TransformerDecoderBlock.step` attends with a row's beams together.

        Args:
            state: the decoding state of B rows.
            beam_size: the beams per row.

        Returns:
            The state with caches of B * beam_size rows.
        """
        layers = [dict(layer, cache=tile_beams(layer["cache"], beam_size)) for layer in state["layers"]]
        return dict(state, layers=layers)

    def select_rows(self, state, rows):
        """Keeps the rows `rows` of the source mask and its keys/values (one a row).

        `reorder_state` picks the caches' beams.

        Args:
            state: the decoding state.
            rows: (A,) int32, the rows still searching.

        Returns:
            The state, source mask and keys/values cut to A rows.
        """
        layers = [dict(layer, memory=gather_beams(layer["memory"], rows)) for layer in state["layers"]]
        return dict(state, source_mask=tf.gather(state["source_mask"], rows), layers=layers)

    def reorder_state(self, state, indices):
        """Reorders the self-attention caches only: the source mask and its keys/values are shared.

        They are the same for every beam of a row.

        Args:
            state: the decoding state.
            indices: (R,) int32 rows to take.

        Returns:
            The state with its caches reordered.
        """
        layers = [
            dict(layer, cache=gather_beams(layer["cache"], indices)) for layer in state["layers"]
        ]
        return dict(state, layers=layers)


def _check_shapes(d_model, heads, share_embeddings, source_vocab_size, target_vocab_size):
    """Every head count divides `d_model`; shared embeddings need one vocabulary size."""
    for name, count in heads.items():
        if d_model % count:
            raise ValueError(f"`d_model` ({d_model}) must be divisible by `{name}` ({count}).")
    if share_embeddings and source_vocab_size != target_vocab_size:
        raise ValueError(
            "`share_embeddings=True` needs one vocabulary: got "
            f"source_vocab_size={source_vocab_size} and "
            f"target_vocab_size={target_vocab_size}."
        )


def _check_optional_int(name, value):
    return None if value is None else check_positive_int(name, value)


def _check_activation(activation):
    if activation not in ACTIVATIONS:
        raise ValueError(f"`activation` must be one of {list(ACTIVATIONS)}; got {activation!r}.")
    return activation
