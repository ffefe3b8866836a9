import keras
import numpy as np
import pytest

from kseq.layers import RNNEncoder
from support import assert_close, check_encoder_final_states


@pytest.mark.parametrize("cell", ["rnn", "lstm", "gru"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_final_state_is_the_state_at_the_last_real_token(cell, bidirectional):
    encoder = RNNEncoder(cell, units=5, num_layers=2, bidirectional=bidirectional, dropout=0.2)
    states = check_encoder_final_states(encoder, width=10 if bidirectional else 5)
    assert len(states) == 2 and len(states[0]) == (2 if cell == "lstm" else 1)


def test_mask_falls_back_to_the_keras_mask():
    ids = np.array([[5, 6, 0, 0]], "int32")
    embedding = keras.layers.Embedding(10, 4, mask_zero=True)
    encoder = RNNEncoder("gru", units=3)
    _, masked = encoder(embedding(ids))
    _, unpadded = encoder(embedding(ids[:, :2]))
    assert_close(masked[0][0], unpadded[0][0])


def test_unknown_cell_is_refused():
    with pytest.raises(ValueError, match="`cell` must be one of \\['rnn', 'lstm', 'gru'\\]"):
        RNNEncoder("transformer", units=4)
