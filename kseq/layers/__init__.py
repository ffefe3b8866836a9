"""kseq layers: embeddings, attention, Transformer blocks, RNN encoder/decoder."""

from kseq import _backend  # noqa: F401  (first: the TensorFlow backend checked before keras loads)

from kseq.layers.bahdanau_attention import BahdanauAttention
from kseq.layers.cached_multi_head_attention import CachedMultiHeadAttention
from kseq.layers.feed_forward import PositionwiseFeedForward
from kseq.layers.image_encoder import ImageEncoder
from kseq.layers.layer_norm import LayerNorm
from kseq.layers.luong_attention import LuongAttention
from kseq.layers.position_embedding import PositionEmbedding
from kseq.layers.rnn_decoder import RNNDecoder
from kseq.layers.rnn_encoder import RNNEncoder
from kseq.layers.sinusoidal_position_encoding import SinusoidalPositionEncoding
from kseq.layers.token_and_position_embedding import TokenAndPositionEmbedding
from kseq.layers.transformer_decoder_block import TransformerDecoderBlock
from kseq.layers.transformer_encoder_block import TransformerEncoderBlock

__all__ = [
    "BahdanauAttention",
    "CachedMultiHeadAttention",
    "ImageEncoder",
    "LayerNorm",
    "LuongAttention",
    "PositionEmbedding",
    "PositionwiseFeedForward",
    "RNNDecoder",
    "RNNEncoder",
    "SinusoidalPositionEncoding",
    "TokenAndPositionEmbedding",
    "TransformerDecoderBlock",
    "TransformerEncoderBlock",
]
