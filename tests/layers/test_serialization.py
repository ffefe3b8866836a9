"""Every public layer survives get_config/from_config and .keras save/load."""

import keras
import numpy as np
import pytest

from kseq import layers
from support import roundtrip

B = 2


def functional(layer, inputs, call):
    """Wraps `layer` in a functional model built by `call(layer, *inputs)`."""
    return keras.Model(inputs, call(layer, *inputs))


def float_input(*shape):
    return keras.Input(shape)


CASES = {
    "SinusoidalPositionEncoding": (
        lambda: layers.SinusoidalPositionEncoding(max_wavelength=500),
        [float_input(5, 8)], lambda l, x: l(x)),
    "PositionEmbedding": (
        lambda: layers.PositionEmbedding(max_length=9), [float_input(5, 8)], lambda l, x: l(x)),
    "LayerNorm": (lambda: layers.LayerNorm(epsilon=1e-5), [float_input(5, 8)], lambda l, x: l(x)),
    "TokenAndPositionEmbedding": (
        lambda: layers.TokenAndPositionEmbedding(20, 8, max_length=9, position="learned"),
        [keras.Input((5,), dtype="int32")], lambda l, x: l(x)),
    "LuongAttention": (
        lambda: layers.LuongAttention("concat", units=3),
        [float_input(3, 8), float_input(5, 8)], lambda l, q, v: l(q, v)),
    "BahdanauAttention": (
        lambda: layers.BahdanauAttention(4),
        [float_input(3, 8), float_input(5, 6)], lambda l, q, v: l(q, v)),
    "CachedMultiHeadAttention": (
        lambda: layers.CachedMultiHeadAttention(num_heads=2, key_dim=4),
        [float_input(3, 8), float_input(5, 8)], lambda l, q, v: l(q, v)),
    "PositionwiseFeedForward": (
        lambda: layers.PositionwiseFeedForward(16, activation="gelu"),
        [float_input(5, 8)], lambda l, x: l(x)),
    "TransformerEncoderBlock": (
        lambda: layers.TransformerEncoderBlock(2, 16, norm_first=True),
        [float_input(5, 8)], lambda l, x: l(x)),
    "TransformerDecoderBlock": (
        lambda: layers.TransformerDecoderBlock(2, 16),
        [float_input(3, 8), float_input(5, 8)], lambda l, x, m: l(x, m)),
    "RNNEncoder": (
        lambda: layers.RNNEncoder("lstm", 6, num_layers=2, bidirectional=True),
        [float_input(5, 4)], lambda l, x: l(x)),
    "RNNDecoder": (
        lambda: layers.RNNDecoder("lstm", 6, attention="bahdanau", peeky=True),
        [float_input(3, 4), float_input(6), float_input(6), float_input(5, 8), float_input(7)],
        lambda l, x, h, c, m, ctx: l(x, [[h, c]], memory=m, context=ctx)),
    "RNNDecoder:input_feeding": (
        lambda: layers.RNNDecoder("gru", 6, num_layers=2, attention="concat", input_feeding=True),
        [float_input(3, 4), float_input(6), float_input(6), float_input(5, 8)],
        lambda l, x, h1, h2, m: l(x, [[h1], [h2]], memory=m)),
    "ImageEncoder": (lambda: layers.ImageEncoder(filters=(4, 6)), [float_input(16, 16, 3)], lambda l, x: l(x)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_layer_round_trip(name, tmp_path):
    make, inputs, call = CASES[name]
    layer = make()
    config = layer.get_config()
    assert layer.__class__.from_config(config).get_config() == config
    model = functional(layer, inputs, call)
    rng = np.random.default_rng(0)
    data = [
        rng.integers(1, 20, (B, *i.shape[1:])).astype("int32") if i.dtype == "int32"
        else rng.normal(size=(B, *i.shape[1:])).astype("float32")
        for i in inputs
    ]
    loaded = roundtrip(model, tmp_path, data)
    assert any(type(l) is type(layer) for l in loaded.layers)


def test_every_public_layer_is_covered():
    assert set(layers.__all__) == {name.split(":")[0] for name in CASES}
