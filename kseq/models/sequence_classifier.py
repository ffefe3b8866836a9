"""Many-to-one: a sequence of tokens -> class logits."""

import keras
from keras import ops

from kseq.layers.masking import masked_softmax, padding_mask
from kseq._compat import is_empty_batch
from kseq.layers.recurrent import CELL_TYPES
from kseq.layers.rnn_encoder import RNNEncoder
from kseq.layers.token_and_position_embedding import TokenAndPositionEmbedding
from kseq.layers.transformer_encoder_block import TransformerEncoderBlock
from kseq.models.base import KseqModel, check_vocab_size
from kseq._validation import check_choice, check_positive_int, check_rate, check_token_ids

ENCODERS = ("rnn", "transformer")
POOLINGS = ("last", "mean", "max", "attention")


@keras.saving.register_keras_serializable("kseq")
class SequenceClassifier(KseqModel):
    """Encodes a padded batch of token ids and classifies each sequence.

    Padding never changes the result: the encoder masks it and every pooling
    ignores it.

    Args:
        vocab_size: V, the number of ids (0-3 are PAD, BOS, EOS, UNK).
        num_classes: C.
        encoder: "rnn" (kseq RNNEncoder) or "transformer" (token and
            sinusoidal position embedding, then TransformerEncoderBlocks).
        pooling: "last" (the RNN's final state: the last real token, and
            the first for the backward direction; RNN only), "mean" or "max"
            over real tokens, or "attention" (additive attention pooling,
            softmax(v . tanh(W h_s)) over real tokens; Yang et al., 2016).
        embed_dim: E, embedding width (the model width D for the
            Transformer). Defaults to 128.
        units: U, RNN hidden size per direction. Defaults to 128.
        cell: "rnn", "lstm" or "gru". Defaults to "lstm".
        num_layers: stacked RNN layers or Transformer blocks. Defaults to 1.
        bidirectional: bidirectional RNN. Defaults to False.
        num_heads, ff_dim: Transformer block sizes. Defaults to 4 and 256.
        dropout: rate on embeddings, between layers and before the output.
        max_length: longest input the Transformer accepts. Defaults to 512.

    Call arguments:
        token_ids: (B, S) int ids, right-padded with PAD (0).
        training: whether dropout is active.

    Returns:
        (B, C) logits.

    Example:
    >>> model = SequenceClassifier(100, 2, pooling="attention", bidirectional=True,
    ...                            embed_dim=8, units=8)
    >>> tuple(model(keras.ops.ones((3, 7), "int32")).shape)
    (3, 2)
    """

    config_names = ("vocab_size", "num_classes", "encoder", "pooling", "embed_dim", "units", "cell",
                    "num_layers", "bidirectional", "num_heads", "ff_dim", "dropout", "max_length")

    def __init__(
        self, vocab_size: int, num_classes: int, encoder: str = "rnn", pooling: str = "last", embed_dim: int = 128,
        units: int = 128,
        cell: str = "lstm", num_layers: int = 1, bidirectional: bool = False, num_heads: int = 4, ff_dim: int = 256,
        dropout: float = 0.0,
        max_length: int = 512, **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.vocab_size = check_vocab_size("vocab_size", vocab_size)
        self.num_classes = check_positive_int("num_classes", num_classes)
        if num_classes < 2:
            raise ValueError(f"`num_classes` must be >= 2; got {num_classes}.")
        self.encoder = check_choice("encoder", encoder, ENCODERS)
        self.pooling = check_choice("pooling", pooling, POOLINGS)
        if encoder == "transformer" and pooling == "last":
            raise ValueError(
                "`pooling='last'` takes an RNN's final state; with encoder='transformer' use "
                "'mean', 'max' or 'attention'."
            )
        self.embed_dim = check_positive_int("embed_dim", embed_dim)
        self.units = check_positive_int("units", units)
        self.cell = check_choice("cell", cell, CELL_TYPES)
        self.num_layers = check_positive_int("num_layers", num_layers)
        self.bidirectional = bool(bidirectional)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.ff_dim = check_positive_int("ff_dim", ff_dim)
        self.dropout = check_rate("dropout", dropout)
        self.max_length = check_positive_int("max_length", max_length)
        if encoder == "transformer" and embed_dim % num_heads:
            raise ValueError(
                f"`embed_dim` ({embed_dim}) must be divisible by `num_heads` ({num_heads})."
            )
        policy = self.dtype_policy
        if encoder == "rnn":
            self.embedding = keras.layers.Embedding(vocab_size, embed_dim, dtype=policy,
                                                    name="embedding")
            self.rnn = RNNEncoder(cell, units, num_layers, bidirectional, dropout, dtype=policy,
                                  name="rnn_encoder")
            self.blocks = []
        else:
            self.embedding = TokenAndPositionEmbedding(vocab_size, embed_dim, max_length,
                                                       dtype=policy, name="embedding")
            self.blocks = [
                TransformerEncoderBlock(num_heads, ff_dim, dropout=dropout, dtype=policy,
                                        name=f"encoder_block_{i}")
                for i in range(num_layers)
            ]
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=policy)
        if pooling == "attention":
            self.pool_projection = keras.layers.Dense(self.feature_dim, activation="tanh",
                                                      dtype=policy, name="pool_projection")
            self.pool_score = keras.layers.Dense(1, use_bias=False, dtype=policy,
                                                 name="pool_score")
        self.classifier = keras.layers.Dense(num_classes, dtype=policy, name="classifier")

    @property
    def feature_dim(self):
        """Width of the encoder's outputs."""
        if self.encoder == "transformer":
            return self.embed_dim
        return self.units * (2 if self.bidirectional else 1)

    @property
    def length_limit(self):
        """The Transformer encoder's position table; an RNN takes any length."""
        return self.max_length if self.encoder == "transformer" else None

    def build(self, inputs_shape=None):
        self.embedding.build((None, None))
        if self.encoder == "rnn":
            self.rnn.build((None, None, self.embed_dim))
        for block in self.blocks:
            block.build((None, None, self.embed_dim))
        if self.pooling == "attention":
            self.pool_projection.build((None, None, self.feature_dim))
            self.pool_score.build((None, None, self.feature_dim))
        self.classifier.build((None, self.feature_dim))
        self.built = True

    def call(self, token_ids, training=None):
        features, _ = self._encode_and_pool(token_ids, training)
        return self.classifier(self.dropout_layer(features, training=training))

    def pooling_weights(self, token_ids):
        """Gives the weights attention pooling puts on each token, for plots.

        Args:
            token_ids: (B, S) int ids, right-padded with PAD.

        Returns:
            (B, S) weights, zero on padding.

        Raises:
            ValueError: if the model's pooling is not "attention", or the ids are invalid.
        """
        if self.pooling != "attention":
            raise ValueError(f"pooling_weights needs pooling='attention'; got {self.pooling!r}.")
        self._ensure_built()
        return self._encode_and_pool(token_ids, training=False)[1]

    def _encode_and_pool(self, token_ids, training):
        """-> (features (B, F), attention pooling weights (B, S) or None)."""
        token_ids = check_token_ids(token_ids, "token_ids", self.vocab_size, self.length_limit)
        if self.encoder == "rnn" and is_empty_batch(token_ids):
            empty = ops.zeros((0, token_ids.shape[1]), self.compute_dtype)  # (0, S)
            features = ops.zeros((0, self.feature_dim), self.compute_dtype)
            return features, empty if self.pooling == "attention" else None
        mask = padding_mask(token_ids)  # (B, S)
        x = self.dropout_layer(self.embedding(token_ids), training=training)
        if self.encoder == "rnn":
            outputs, states = self.rnn(x, padding_mask=mask, training=training)
            if self.pooling == "last":
                return states[-1][0], None  # top layer's h
        else:
            outputs = x
            for block in self.blocks:
                outputs = block(outputs, padding_mask=mask, training=training)
        real = ops.cast(mask, outputs.dtype)[:, :, None]  # (B, S, 1)
        if self.pooling == "mean":
            return ops.sum(outputs * real, axis=1) / ops.maximum(ops.sum(real, axis=1), 1.0), None
        if self.pooling == "max":
            floor = ops.cast(-1e9, outputs.dtype)
            pooled = ops.max(ops.where(mask[:, :, None], outputs, floor), axis=1)
            return ops.where(ops.any(mask, axis=1)[:, None], pooled, 0.0), None
        scores = self.pool_score(self.pool_projection(outputs))[:, :, 0]  # (B, S)
        weights = masked_softmax(scores, mask)
        return ops.einsum("bs,bsf->bf", weights, outputs), weights
