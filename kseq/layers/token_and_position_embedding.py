"""Token embeddings plus position information, with PAD masking."""

import math

import keras
from keras import ops

from kseq.layers.masking import padding_mask
from kseq.layers.position_embedding import PositionEmbedding
from kseq.layers.sinusoidal_position_encoding import SinusoidalPositionEncoding
from kseq._validation import check_choice, check_positive_int

POSITION_TYPES = ("sinusoidal", "sinusoidal_halves", "learned")


@keras.saving.register_keras_serializable("kseq")
class TokenAndPositionEmbedding(keras.layers.Layer):
    """Embeds token ids and adds sinusoidal or learned position vectors.

    Args:
        vocab_size: number of token ids.
        embed_dim: D, the embedding width.
        max_length: the longest sequence (learned positions hold this many).
            Defaults to 512.
        position: "sinusoidal" (fixed, sines and cosines interleaved as in
            the paper), "sinusoidal_halves" (the same sines then the same
            cosines, Marian's layout: `SinusoidalPositionEncoding(layout="halves")`)
            or "learned".
        scale_embeddings: multiply token embeddings by sqrt(D) before adding
            positions, as in the paper. Defaults to True.
        mask_zero: mark PAD (id 0) as padding in the Keras mask. Defaults to True.
        embeddings_initializer: initializer of the token table. Defaults to
            N(0, D^-0.5) when scaling (unit variance after the sqrt(D) scale,
            and well-sized logits when the table is tied to the output layer),
            else "uniform".

    Call arguments:
        token_ids: (B, T) int ids.
        start_index: position of the first token, for step-by-step decoding.

    Returns:
        (B, T, D) embeddings, with a (B, T) Keras mask when `mask_zero`.

    Example:
    >>> layer = TokenAndPositionEmbedding(vocab_size=100, embed_dim=16)
    >>> tuple(layer(keras.ops.ones((2, 7), dtype="int32")).shape)
    (2, 7, 16)
    """

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int,
        max_length: int = 512,
        position: str = "sinusoidal",
        scale_embeddings: bool = True,
        mask_zero: bool = True,
        embeddings_initializer=None,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        self.embed_dim = check_positive_int("embed_dim", embed_dim)
        self.max_length = check_positive_int("max_length", max_length)
        self.position = check_choice("position", position, POSITION_TYPES)
        self.scale_embeddings = scale_embeddings
        self.mask_zero = mask_zero
        if embeddings_initializer is None:
            embeddings_initializer = (
                keras.initializers.RandomNormal(stddev=embed_dim**-0.5)
                if scale_embeddings
                else "uniform"
            )
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.token_embedding = keras.layers.Embedding(
            vocab_size,
            embed_dim,
            embeddings_initializer=self.embeddings_initializer,
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        if position in ("sinusoidal", "sinusoidal_halves"):
            self.position_embedding = SinusoidalPositionEncoding(
                layout="interleaved" if position == "sinusoidal" else "halves",
                dtype=self.dtype_policy, name="position_encoding"
            )
        else:
            self.position_embedding = PositionEmbedding(
                max_length, dtype=self.dtype_policy, name="position_embedding"
            )
        self.supports_masking = mask_zero

    def build(self, token_ids_shape):
        self.token_embedding.build(token_ids_shape)
        self.position_embedding.build(tuple(token_ids_shape) + (self.embed_dim,))
        self.built = True

    @property
    def embeddings(self):
        """The (vocab_size, D) token table, for tying an output projection."""
        return self.token_embedding.embeddings

    def call(self, token_ids, start_index=0):
        x = self.token_embedding(token_ids)
        if self.scale_embeddings:
            x = x * ops.cast(math.sqrt(self.embed_dim), x.dtype)
        return x + self.position_embedding(x, start_index=start_index)

    def compute_mask(self, token_ids, mask=None):
        return padding_mask(token_ids) if self.mask_zero else None

    def compute_output_shape(self, token_ids_shape):
        return tuple(token_ids_shape) + (self.embed_dim,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocab_size": self.vocab_size,
                "embed_dim": self.embed_dim,
                "max_length": self.max_length,
                "position": self.position,
                "scale_embeddings": self.scale_embeddings,
                "mask_zero": self.mask_zero,
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
            }
        )
        return config
