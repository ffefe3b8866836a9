import math

import numpy as np
import pytest
from keras import ops

from kseq.layers import PositionEmbedding, SinusoidalPositionEncoding, TokenAndPositionEmbedding
from support import assert_close


def paper_formula(length, depth, start=0):
    """PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i+1] = cos(p / 10000^(2i/D))."""
    table = np.zeros((length, depth))
    for p in range(start, start + length):
        for i in range(0, depth, 2):
            angle = p / 10000 ** (i / depth)
            table[p - start, i] = math.sin(angle)
            if i + 1 < depth:
                table[p - start, i + 1] = math.cos(angle)
    return table


@pytest.mark.parametrize("depth", [8, 7, 64])
def test_sinusoidal_matches_the_paper(depth):
    encoding = SinusoidalPositionEncoding()(np.zeros((2, 50, depth), "float32"))
    assert encoding.dtype == "float32"
    assert_close(encoding[0], paper_formula(50, depth), atol=2e-5)
    assert_close(encoding[1], encoding[0], atol=0)


def test_sinusoidal_is_not_added_and_offsets_by_start_index():
    layer = SinusoidalPositionEncoding()
    assert_close(layer(np.ones((1, 4, 6))), layer(np.zeros((1, 4, 6))), atol=0)
    assert_close(layer(np.zeros((1, 3, 6)), start_index=5)[0], paper_formula(3, 6, start=5))


def test_learned_positions_slice_by_start_index_and_refuse_overflow():
    layer = PositionEmbedding(max_length=10)
    full = layer(np.zeros((2, 10, 4)))
    assert_close(layer(np.zeros((2, 3, 4)), start_index=4), full[:, 4:7], atol=0)
    with pytest.raises(ValueError, match="10 positions"):
        layer(np.zeros((1, 11, 4)))


@pytest.mark.parametrize("position", ["sinusoidal", "learned"])
def test_token_and_position_embedding(position):
    layer = TokenAndPositionEmbedding(20, 8, max_length=16, position=position)
    ids = np.array([[5, 6, 7, 0], [9, 0, 0, 0]], "int32")
    out = layer(ids)
    tokens = ops.take(layer.embeddings, ids, axis=0) * math.sqrt(8)
    assert_close(out, tokens + layer.position_embedding(tokens))
    assert np.array_equal(layer.compute_mask(ids), ids != 0)
    # Step-by-step positions agree with the full sequence.
    assert_close(layer(ids[:, 2:3], start_index=2), out[:, 2:3])


def test_token_embedding_without_scaling_or_mask():
    layer = TokenAndPositionEmbedding(20, 8, scale_embeddings=False, mask_zero=False)
    ids = np.array([[5, 0]], "int32")
    out = layer(ids)
    assert layer.compute_mask(ids) is None
    assert_close(out - layer.position_embedding(out), ops.take(layer.embeddings, ids, axis=0))


def test_bad_position_arguments():
    with pytest.raises(ValueError, match="`position` must be one of"):
        TokenAndPositionEmbedding(20, 8, position="rotary")
    with pytest.raises(ValueError, match="`vocab_size`"):
        TokenAndPositionEmbedding(0, 8)
    with pytest.raises(ValueError, match="`max_length`"):
        PositionEmbedding(max_length=0)
