"""Models under keras' mixed_bfloat16 policy (the GPU/TPU speed setting),
checked on the CPU: float32 variables, finite training, the float32 loss,
outputs close to the float32 model with the same weights, decoding."""

import keras
import numpy as np
import pytest

from kseq.losses import MaskedSparseCategoricalCrossentropy
from support import config_id, random_batch, small_model

ENTRIES = [
    ("transformer", dict(norm_first=False)),
    ("transformer", dict(norm_first=True, share_embeddings=True)),
    ("rnn", dict(cell="lstm", attention="general")),
    ("rnn", dict(cell="gru", attention="bahdanau")),
]


@pytest.fixture
def mixed_policy():
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        yield
    finally:
        keras.config.set_dtype_policy("float32")


@pytest.mark.parametrize("entry", ENTRIES, ids=config_id)
def test_mixed_bfloat16_trains_and_matches_float32(entry, mixed_policy):
    batch = random_batch()
    mixed = small_model(*entry, dropout=0.0)
    logits = mixed(batch)
    assert all(v.dtype == "float32" for v in mixed.trainable_variables)
    keras.config.set_dtype_policy("float32")
    full = small_model(*entry, dropout=0.0)
    full(batch)
    full.set_weights(mixed.get_weights())
    reference = np.asarray(full(batch))
    # bfloat16 keeps 8 bits of mantissa: agreement to about 1e-2 of the scale.
    scale = np.abs(reference).max()
    np.testing.assert_allclose(np.asarray(logits, "float32"), reference, atol=0.03 * scale)

    keras.config.set_dtype_policy("mixed_bfloat16")
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)
    assert loss(batch["target_ids"], logits).dtype == "float32"
    mixed.compile(keras.optimizers.Adam(1e-2), loss)
    labels = np.roll(batch["target_ids"], -1, axis=1)
    history = mixed.fit(batch, labels, epochs=8, verbose=0)
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0], losses
    assert all(v.dtype == "float32" for v in mixed.trainable_variables)
    out = np.asarray(mixed.generate(batch["source_ids"], max_length=6))
    assert out.dtype == np.int32 and out.shape[0] == 3
