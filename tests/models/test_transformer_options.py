"""TransformerSeq2Seq's options for other architectures (Marian's): each does
what it says, round-trips through get_config and .keras files, and leaves
the default model as it was."""

import numpy as np
import pytest

import keras

from kseq.layers import SinusoidalPositionEncoding
from kseq.models import TransformerSeq2Seq

MARIAN_LIKE = dict(num_layers=2, d_model=16, num_heads=4, ff_dim=32, decoder_num_layers=1, decoder_num_heads=2,
                   decoder_ff_dim=24, activation="silu", layer_norm_epsilon=1e-6, scale_embeddings=False,
                   position="sinusoidal_halves", tie_output_embedding=True, max_length=32)


def test_the_halves_layout_puts_each_frequency_s_sine_first_and_its_cosine_at_half_the_width():
    encodings = SinusoidalPositionEncoding(layout="halves")(np.zeros((1, 5, 8), "float32"))[0].numpy()
    positions = np.arange(5)[:, None]
    frequencies = 10000.0 ** (-2 * np.arange(4) / 8)
    np.testing.assert_allclose(encodings[:, :4], np.sin(positions * frequencies), atol=1e-6)
    np.testing.assert_allclose(encodings[:, 4:], np.cos(positions * frequencies), atol=1e-6)
    interleaved = SinusoidalPositionEncoding()(np.zeros((1, 5, 8), "float32"))[0].numpy()
    np.testing.assert_allclose(interleaved[:, 0::2], encodings[:, :4], atol=1e-6)


def test_each_option_shapes_the_model_it_names():
    model = TransformerSeq2Seq(40, 30, **MARIAN_LIKE)
    model.build()
    assert len(model.encoder_blocks) == 2 and len(model.decoder_blocks) == 1
    assert model.decoder_blocks[0].num_heads == 2 and model.decoder_blocks[0].ff_dim == 24
    assert model.encoder_blocks[0].feed_forward.inner_dense.kernel.shape == (16, 32)
    assert model.decoder_blocks[0].activation is keras.activations.silu
    assert model.encoder_blocks[0].self_attention_norm.epsilon == 1e-6
    assert model.output_projection is None and model.output_bias.shape == (30,)  # tied to the target embedding
    assert not model.target_embedding.scale_embeddings
    logits = model({"source_ids": np.array([[5, 6, 0]]), "target_ids": np.array([[1, 7]])})
    assert logits.shape == (1, 2, 30)
    table = model.target_embedding.embeddings.numpy()
    table[9] = 0.0  # the output of id 9 is its embedding row (tied): zero, its logit is its bias alone
    model.target_embedding.embeddings.assign(table)
    bias = model.output_bias.numpy()[9]
    np.testing.assert_allclose(model({"source_ids": np.array([[5, 6, 0]]), "target_ids": np.array([[1, 7]])})
                               .numpy()[0, :, 9], [bias, bias], atol=1e-6)


def test_the_options_round_trip_through_get_config_and_a_keras_file(tmp_path):
    model = TransformerSeq2Seq(40, 30, **MARIAN_LIKE)
    inputs = {"source_ids": np.array([[5, 6, 0]]), "target_ids": np.array([[1, 7]])}
    expected = model(inputs).numpy()
    config = model.get_config()
    assert {key: config[key] for key in MARIAN_LIKE} == MARIAN_LIKE
    assert TransformerSeq2Seq.from_config(config).get_config() == config
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    np.testing.assert_allclose(loaded(inputs).numpy(), expected, atol=1e-6)


def test_a_default_model_keeps_today_s_architecture():
    config = TransformerSeq2Seq(40, 40).get_config()
    assert {key: config[key] for key in ("activation", "layer_norm_epsilon", "scale_embeddings", "decoder_num_layers",
                                         "decoder_num_heads", "decoder_ff_dim", "tie_output_embedding", "position")} \
        == {"activation": "relu", "layer_norm_epsilon": 1e-5, "scale_embeddings": True, "decoder_num_layers": None,
            "decoder_num_heads": None, "decoder_ff_dim": None, "tie_output_embedding": False,
            "position": "sinusoidal"}
    older = {key: value for key, value in config.items() if key not in ("activation", "decoder_num_layers")}
    assert TransformerSeq2Seq.from_config(older).get_config() == config  # a config from before these options


@pytest.mark.parametrize("arguments,message", [
    (dict(activation="tanh"), r"`activation` must be one of \['relu', 'gelu', 'silu', 'swish'\]; got 'tanh'"),
    (dict(decoder_num_heads=3), r"`d_model` \(16\) must be divisible by `decoder_num_heads` \(3\)"),
    (dict(decoder_num_layers=0), r"decoder_num_layers"),
    (dict(layer_norm_epsilon=0.0), r"layer_norm_epsilon"),
])
def test_a_bad_option_is_named(arguments, message):
    with pytest.raises(ValueError, match=message):
        TransformerSeq2Seq(40, 40, num_layers=1, d_model=16, num_heads=4, ff_dim=32, **arguments)
