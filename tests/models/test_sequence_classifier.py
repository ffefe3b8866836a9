"""SequenceClassifier: padding invariance, pooling, learning, round trip, bad input."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from kseq.models import SequenceClassifier
from kseq.training.objectives import FusedAdam

VOCAB = 30
CONFIGS = [
    dict(encoder="rnn", pooling="last", cell="lstm"),
    dict(encoder="rnn", pooling="last", cell="gru", bidirectional=True, num_layers=2),
    dict(encoder="rnn", pooling="attention", cell="rnn", bidirectional=True),
    dict(encoder="rnn", pooling="mean", cell="lstm"),
    dict(encoder="rnn", pooling="max", cell="gru"),
    dict(encoder="transformer", pooling="mean", num_layers=2),
    dict(encoder="transformer", pooling="attention"),
    dict(encoder="transformer", pooling="max"),
]


def small(config, **overrides):
    return SequenceClassifier(VOCAB, 3, embed_dim=8, units=8, num_heads=2, ff_dim=16,
                              **{**config, **overrides})


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(map(str, c.values())))
def test_padding_never_changes_the_output(config):
    model = small(config)
    ids = np.array([[5, 6, 7, 8, 9], [10, 11, 12, 0, 0], [13, 0, 0, 0, 0]])
    expected = model(ids)
    padded = model(np.pad(ids, [[0, 0], [0, 6]]))
    np.testing.assert_allclose(padded, expected, atol=1e-5)
    for row in range(3):  # alone, unpadded
        length = int((ids[row] != 0).sum())
        np.testing.assert_allclose(model(ids[row : row + 1, :length])[0], expected[row], atol=1e-5)


def test_attention_pooling_weights_sum_to_one_on_real_tokens():
    model = small(dict(pooling="attention", bidirectional=True))
    weights = model.pooling_weights(np.array([[5, 6, 7, 0], [8, 0, 0, 0]])).numpy()
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, atol=1e-6)
    assert weights[0, 3] == 0 and (weights[1, 1:] == 0).all()


def test_rnn_last_pooling_is_the_final_state():
    model = small(dict(pooling="last", cell="gru"))
    ids = np.array([[5, 6, 7, 0]])
    logits = model(ids)
    _, states = model.rnn(model.embedding(ids[:, :3]))
    np.testing.assert_allclose(logits, model.classifier(states[-1][0]), atol=1e-6)


@pytest.mark.parametrize("encoder", ["rnn", "transformer"])
def test_learns_which_token_a_sequence_holds(encoder):
    """Class = whether token 5 occurs anywhere (many-to-one, any position)."""
    rng = np.random.default_rng(0)
    ids = rng.integers(6, VOCAB, size=(600, 12))
    lengths = rng.integers(3, 13, size=600)
    labels = rng.integers(0, 2, size=600)
    for row in range(600):
        if labels[row]:
            ids[row, rng.integers(0, lengths[row])] = 5
        ids[row, lengths[row]:] = 0
    model = SequenceClassifier(VOCAB, 2, encoder=encoder, pooling="max" if encoder == "transformer"
                               else "last", bidirectional=True, embed_dim=16, units=16,
                               num_heads=2, ff_dim=32)
    model.compile(FusedAdam(1e-2),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    model.fit(ids[:500], labels[:500], epochs=15, batch_size=32, verbose=0)
    accuracy = model.evaluate(ids[500:], labels[500:], verbose=0, return_dict=True)["accuracy"]
    assert accuracy >= 0.95, accuracy


def test_under_mirrored_strategy_with_an_uneven_last_batch():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        model = small(dict(pooling="attention", bidirectional=True))
        model.compile(FusedAdam(), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    data = tf.data.Dataset.from_tensor_slices(
        (np.random.default_rng(0).integers(1, VOCAB, (11, 6)), np.arange(11) % 3)).batch(4)
    history = model.fit(data, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


@pytest.mark.parametrize("bad, message", [
    (dict(encoder="transformer", pooling="last"), "pooling='last'"),
    (dict(pooling="sum"), "pooling"),
    (dict(encoder="cnn"), "encoder"),
    (dict(encoder="transformer", pooling="mean", embed_dim=10, num_heads=4), "divisible"),
    (dict(num_classes=1), "num_classes"),
])
def test_bad_config(bad, message):
    arguments = dict(vocab_size=VOCAB, num_classes=2)
    arguments.update(bad)
    with pytest.raises(ValueError, match=message):
        SequenceClassifier(**arguments)


def test_bad_input():
    model = small(dict())
    with pytest.raises(ValueError, match="integer token ids"):
        model(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="rank 2"):
        model(np.ones((3,), np.int32))
    with pytest.raises(ValueError, match=r"ids in \[0, 30\)"):
        model(np.array([[1, 31]]))
    with pytest.raises(ValueError, match="pooling='attention'"):
        model.pooling_weights(np.array([[5]]))
    transformer = small(dict(encoder="transformer", pooling="mean"), max_length=4)
    with pytest.raises(ValueError, match="max_length"):
        transformer(np.ones((1, 5), np.int32))


@pytest.mark.parametrize("config", [CONFIGS[2], CONFIGS[6]], ids=["rnn", "transformer"])
def test_keras_round_trip(config, tmp_path):
    model = small(config)
    ids = np.array([[5, 6, 7, 0], [8, 9, 0, 0]])
    expected = model(ids)
    model.save(tmp_path / "classifier.keras")
    loaded = keras.saving.load_model(tmp_path / "classifier.keras")
    assert loaded.get_config() == model.get_config()
    np.testing.assert_allclose(loaded(ids), expected, atol=1e-6)
