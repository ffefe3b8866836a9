import keras_hub
import numpy as np
import pytest

from kseq.layers import TransformerDecoderBlock, TransformerEncoderBlock
from support import assert_close

HUB_NAMES = [
    ("self_attention_layer_norm", "self_attention_norm"),
    ("cross_attention_layer_norm", "cross_attention_norm"),
    ("self_attention_layer", "self_attention"),
    ("feedforward_intermediate_dense", "feed_forward/inner"),
    ("feedforward_output_dense", "feed_forward/outer"),
    ("feedforward_layer_norm", "feed_forward_norm"),
]


def copy_from_hub(ours, hub):
    """Gives `ours` the weights of the keras-hub layer, matched by name."""
    def key(path):
        path = path.split("/", 1)[1]
        for hub_name, our_name in HUB_NAMES:
            path = path.replace(hub_name, our_name)
        return path

    hub_weights = {key(w.path): w for w in hub.weights}
    assert len(hub_weights) == len(ours.weights)
    for weight in ours.weights:
        weight.assign(hub_weights[key(weight.path)])


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    memory = rng.normal(size=(2, 6, 8)).astype("float32")
    x_mask = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], bool)
    memory_mask = np.array([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]], bool)
    return x, memory, x_mask, memory_mask


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_block_matches_keras_hub(norm_first, data):
    x, _, mask, _ = data
    ours = TransformerEncoderBlock(num_heads=2, ff_dim=16, norm_first=norm_first)
    hub = keras_hub.layers.TransformerEncoder(16, 2, normalize_first=norm_first)
    ours(x)
    hub(x)
    copy_from_hub(ours, hub)
    out = np.asarray(ours(x, padding_mask=mask))
    assert_close(out, hub(x, padding_mask=mask))


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_matches_keras_hub(norm_first, data):
    x, memory, x_mask, memory_mask = data
    ours = TransformerDecoderBlock(num_heads=2, ff_dim=16, norm_first=norm_first)
    hub = keras_hub.layers.TransformerDecoder(16, 2, normalize_first=norm_first)
    ours(x, memory)
    hub(x, memory)
    copy_from_hub(ours, hub)
    expected = hub(x, memory, decoder_padding_mask=x_mask, encoder_padding_mask=memory_mask)
    out = ours(x, memory, padding_mask=x_mask, encoder_padding_mask=memory_mask)
    real = x_mask  # keras-hub's rows at padded queries differ; they are padding
    assert_close(np.asarray(out)[real], np.asarray(expected)[real])


@pytest.mark.parametrize("norm_first", [False, True])
def test_blocks_ignore_padding(norm_first, data):
    x, memory, x_mask, memory_mask = data
    encoder = TransformerEncoderBlock(num_heads=2, ff_dim=16, norm_first=norm_first)
    decoder = TransformerDecoderBlock(num_heads=2, ff_dim=16, norm_first=norm_first)
    pad = lambda a, n: np.concatenate([a, np.zeros_like(a[:, :n])], 1)  # noqa: E731
    noise = lambda a, n: np.concatenate([a, 9 * np.ones_like(a[:, :n])], 1)  # noqa: E731
    enc = encoder(x, padding_mask=x_mask)
    enc_padded = encoder(noise(x, 3), padding_mask=pad(x_mask, 3))
    assert_close(np.asarray(enc_padded)[:, :5][x_mask], np.asarray(enc)[x_mask])
    dec = decoder(x, memory, x_mask, memory_mask)
    dec_padded = decoder(noise(x, 2), noise(memory, 4), pad(x_mask, 2), pad(memory_mask, 4))
    assert_close(np.asarray(dec_padded)[:, :5][x_mask], np.asarray(dec)[x_mask])


def test_decoder_block_is_causal_with_dropout_layers(data):
    x, memory, _, _ = data
    block = TransformerDecoderBlock(num_heads=2, ff_dim=16, dropout=0.3)
    out = np.asarray(block(x, memory))
    changed = x.copy()
    changed[:, 3:] += 5.0
    out_changed = np.asarray(block(changed, memory))
    assert_close(out_changed[:, :3], out[:, :3])
    assert not np.allclose(out_changed[:, 3:], out[:, 3:])


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_step_and_scores_paths_equal_call(norm_first, data):
    x, memory, _, memory_mask = data
    block = TransformerDecoderBlock(num_heads=2, ff_dim=16, norm_first=norm_first)
    expected = block(x, memory, encoder_padding_mask=memory_mask)
    state = block.initial_decoding_state(memory, max_length=8)
    steps, step_scores = [], []
    for t in range(5):
        out, state, weights = block.step(x[:, t : t + 1], state, t, memory_mask)
        steps.append(out)
        step_scores.append(weights)
    outputs, scores = np.concatenate(steps, 1), np.concatenate(step_scores, 2)
    assert_close(outputs, expected)
    assert scores.shape == (2, 2, 5, 6)
    assert np.all(scores[0, :, :, 3:] == 0)
    assert_close(scores.sum(-1), np.ones((2, 2, 5)))


def test_width_must_divide_into_heads():
    with pytest.raises(ValueError, match="divisible by `num_heads`=3"):
        TransformerEncoderBlock(num_heads=3, ff_dim=16)(np.zeros((1, 2, 8)))
    with pytest.raises(ValueError, match="`dropout` must be a float"):
        TransformerDecoderBlock(num_heads=2, ff_dim=16, dropout=1.5)
