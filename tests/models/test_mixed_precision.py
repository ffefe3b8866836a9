"""Models under keras' mixed policies (the GPU/TPU speed settings), checked
on the CPU: float32 variables, finite training, the float32 loss, softmax
in float32, outputs close to the float32 model with the same weights,
decoding, and the policy kept through a `.keras` round trip.
tests/test_gpu.py runs the same checks on a GPU for every model family."""

import keras
import numpy as np
import pytest

from kseq.training.objectives.losses import MaskedSparseCategoricalCrossentropy
from support import (
    FAMILIES, build_family, check_float32_softmax, check_mixed_training, config_id, random_batch,
    relative_tolerance, small_model,
)

ENTRIES = [
    ("transformer", dict(norm_first=False)),
    # 35 s on 2 cores; the post-norm Transformer above stays in the default suite.
    pytest.param(("transformer", dict(norm_first=True, share_embeddings=True)), marks=pytest.mark.slow,
                 id="transformer-norm_first=True-share_embeddings=True"),
    ("rnn", dict(cell="lstm", attention="general")),
    ("rnn", dict(cell="gru", attention="bahdanau")),
]


@pytest.mark.parametrize("entry", ENTRIES, ids=config_id)
def test_mixed_bfloat16_trains_and_matches_float32(entry):
    batch = random_batch()
    mixed = small_model(*entry, dropout=0.0, dtype="mixed_bfloat16")
    logits = mixed(batch)
    full = small_model(*entry, dropout=0.0)
    full(batch)
    full.set_weights(mixed.get_weights())
    reference = np.asarray(full(batch))
    scale = np.abs(reference).max()
    np.testing.assert_allclose(np.asarray(logits, "float32"), reference,
                               atol=relative_tolerance("bfloat16") * scale)
    labels = np.roll(batch["target_ids"], -1, axis=1)
    check_mixed_training(mixed, batch, labels, MaskedSparseCategoricalCrossentropy(label_smoothing=0.1))
    out = np.asarray(mixed.generate(batch["source_ids"], max_length=6))
    assert out.dtype == np.int32 and out.shape[0] == 3


def test_mixed_float16_trains_with_loss_scaling():
    check_mixed_training(*build_family("rnn", "mixed_float16"))


@pytest.mark.parametrize("family", FAMILIES)
def test_softmax_stays_float32_under_mixed_bfloat16(family):
    check_float32_softmax(*build_family(family, "mixed_bfloat16"))


@pytest.mark.parametrize("family", FAMILIES)
def test_dtype_policy_survives_a_keras_round_trip(family, tmp_path):
    model, inputs, _, _ = build_family(family, "mixed_bfloat16")
    expected = np.asarray(model(inputs), "float32")
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.dtype_policy.name == "mixed_bfloat16"
    actual = loaded(inputs)
    assert actual.dtype == "bfloat16"
    np.testing.assert_array_equal(np.asarray(actual, "float32"), expected)
