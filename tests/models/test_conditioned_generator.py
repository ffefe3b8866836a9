"""ConditionedGenerator: one condition (a class id or a feature vector) -> a sequence."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import kseq
from kseq.models import ConditionedGenerator
from kseq.training.objectives import FusedAdam
from support import assert_close, pad_right, uncached_greedy

VOCAB, CLASSES, FEATURES = 30, 3, 5
EOS = kseq.EOS_ID

CONFIGS = {
    "classes-lstm": dict(num_classes=CLASSES, cell="lstm"),
    "classes-gru-2-layers-peeky": dict(num_classes=CLASSES, cell="gru", num_layers=2, peeky=True),
    "vector-rnn-peeky": dict(condition_dim=FEATURES, cell="rnn", peeky=True),
    "vector-lstm-2-layers": dict(condition_dim=FEATURES, cell="lstm", num_layers=2),
}
EACH_CONFIG = pytest.mark.parametrize("name", list(CONFIGS))


def small_model(name, **overrides):
    config = dict(embed_dim=8, units=12, dropout=0.1, **CONFIGS[name])
    config.update(overrides)
    return ConditionedGenerator(VOCAB, **config)


def conditions(model, batch=3, seed=0):
    rng = np.random.default_rng(seed)
    if model.num_classes:
        return rng.integers(0, model.num_classes, batch).astype("int32")
    return rng.normal(size=(batch, model.condition_dim)).astype("float32")


def targets(batch=3, length=6, seed=0):
    """BOS-first target ids, row r with r PAD at its end."""
    ids = np.random.default_rng(seed).integers(4, VOCAB, (batch, length)).astype("int32")
    ids[:, 0] = kseq.BOS_ID
    for row in range(batch):
        ids[row, length - row:] = 0
    return ids


@EACH_CONFIG
def test_padding_never_changes_real_positions(name):
    model = small_model(name)
    condition, target_ids = conditions(model), targets()
    logits = np.asarray(model({"condition": condition, "target_ids": target_ids}))
    padded = np.asarray(model({"condition": condition, "target_ids": pad_right(target_ids, 3)}))
    real = target_ids != 0
    assert_close(padded[:, : target_ids.shape[1]][real], logits[real])
    # A row alone gives what it gives in its batch.
    alone = np.asarray(model({"condition": condition[2:], "target_ids": target_ids[2:, :4]}))
    assert_close(alone[0], logits[2, :4])
    # The condition matters: another one changes the logits.
    other = np.asarray(model({"condition": conditions(model, seed=5), "target_ids": target_ids}))
    assert not np.allclose(other, logits, atol=1e-3)


@EACH_CONFIG
def test_cached_steps_equal_the_teacher_forced_pass(name):
    model = small_model(name)
    condition, target_ids = conditions(model), targets()
    logits = np.asarray(model((condition, target_ids)))  # the pair form, as fit passes it
    state, start = model.begin_decoding(model.pack_condition(condition), max_length=8)
    np.testing.assert_array_equal(start, [kseq.BOS_ID] * 3)
    steps = []
    for index in range(target_ids.shape[1]):
        step_logits, state = model.step(tf.constant(target_ids[:, index]), state, index)
        steps.append(step_logits)
    real = target_ids != 0
    assert_close(np.stack(steps, 1)[real], logits[real], atol=2e-5)


def eos_prone(model, condition, max_length=8):
    """Moves the EOS bias until greedy outputs end at >= 2 different steps,
    some before `max_length` (so the searches' early ends are exercised)."""
    model.generate(condition, max_length=1)  # builds it
    bias = model.output_projection.bias
    start = bias.numpy()
    scale = [w.numpy() for w in model.weights]
    for weight, value in zip(model.weights, scale):
        if value.ndim >= 2:
            weight.assign(value * 3.0)  # logits that vary from step to step
    for amount in np.linspace(-2.0, 6.0, 33):
        bias.assign(start + amount * np.eye(VOCAB, dtype="float32")[EOS])
        ids = np.asarray(model.generate(condition, max_length=max_length))
        lengths = {int(np.argmax(row == EOS)) + 1 if EOS in row else max_length for row in ids}
        if len(lengths) >= 2 and min(lengths) < max_length:
            return model
    raise AssertionError("test setup: no EOS bias gives outputs of different lengths")



def test_greedy_is_the_naive_loop_and_beam_of_one():
    model = small_model("classes-gru-2-layers-peeky", dropout=0.0)
    condition = conditions(model, batch=6, seed=1)
    eos_prone(model, condition)
    greedy = np.asarray(model.generate(condition, max_length=8))
    expected = uncached_greedy(model, {"condition": condition}, 8)
    np.testing.assert_array_equal(greedy, expected[:, : greedy.shape[1]])
    assert not expected[:, greedy.shape[1]:].any()
    beam = model.generate(condition, max_length=8, method="beam", beam_size=1, length_penalty=0.0)
    np.testing.assert_array_equal(beam, greedy)
    # A wider beam finds outputs at least as likely as greedy's.
    _, greedy_scores = model.generate(condition, max_length=8, return_scores=True)
    _, beam_scores = model.generate(condition, max_length=8, method="beam", beam_size=4,
                                    length_penalty=0.0, return_scores=True)
    assert np.all(np.asarray(beam_scores) >= np.asarray(greedy_scores) - 1e-5)


def test_sampling_is_seeded_and_rows_differ():
    model = small_model("classes-lstm", dropout=0.0)
    condition = np.array([1] * 8, "int32")
    options = dict(max_length=6, method="sample", top_k=10, seed=3)
    first = np.asarray(model.generate(condition, **options))
    np.testing.assert_array_equal(first, model.generate(condition, **options))
    assert len({tuple(row) for row in first}) > 1, "one class, yet every row drew the same"
    # Greedy is deterministic per condition: rows of one class agree.
    greedy = np.asarray(model.generate(condition, max_length=6))
    assert len({tuple(row) for row in greedy}) == 1
    blocked = np.asarray(model.generate(condition, max_length=6, no_repeat_ngram_size=1))
    assert all(len(set(row[row > EOS])) == len(row[row > EOS]) for row in blocked)


@pytest.mark.parametrize("name", ["classes-gru-2-layers-peeky", "vector-lstm-2-layers"])
def test_keras_round_trip(name, tmp_path):
    model = small_model(name)
    condition, target_ids = conditions(model), targets()
    expected = model({"condition": condition, "target_ids": target_ids})
    model.save(tmp_path / "generator.keras")
    loaded = keras.saving.load_model(tmp_path / "generator.keras")
    assert isinstance(loaded, ConditionedGenerator)
    assert loaded.get_config() == model.get_config()
    assert_close(loaded({"condition": condition, "target_ids": target_ids}), expected, atol=1e-6)
    np.testing.assert_array_equal(loaded.generate(condition, max_length=5),
                                  model.generate(condition, max_length=5))


@pytest.mark.parametrize("config, message", [
    (dict(condition_dim=4, num_classes=2), "exactly one of `condition_dim`.*got both"),
    (dict(), "exactly one of `condition_dim`.*got neither"),
    (dict(num_classes=0), "`num_classes` must be >= 1"),
    (dict(condition_dim=2.5), "`condition_dim` must be an integer"),
    (dict(num_classes=2, cell="transformer"), "`cell` must be one of"),
    (dict(num_classes=2, dropout=1.0), "`dropout`"),
    (dict(num_classes=2, units=0), "`units` must be >= 1"),
])
def test_bad_config(config, message):
    with pytest.raises(ValueError, match=message):
        ConditionedGenerator(VOCAB, **config)
    with pytest.raises(ValueError, match="`vocab_size` must be >"):
        ConditionedGenerator(3, num_classes=2)


CLASS_MODEL = dict(num_classes=CLASSES)
VECTOR_MODEL = dict(condition_dim=FEATURES)


@pytest.mark.parametrize("config, condition, message", [
    (VECTOR_MODEL, np.ones((2, 4), "float32"), r"shape \(batch, 5\) \(condition_dim=5\); got 4 features"),
    (VECTOR_MODEL, np.ones(5, "float32"), r"shape \(batch, 5\); got shape \(5,\)"),
    (VECTOR_MODEL, np.ones((2, 5), "int32"), "float feature vectors.*got dtype int32.*num_classes"),
    (VECTOR_MODEL, [[0.5, 1.0], [0.5]], "rectangular"),
    (CLASS_MODEL, np.array([0, 3]), r"`condition` must hold ids in \[0, 3\); got ids from 0 to 3"),
    (CLASS_MODEL, np.array([-1, 1]), r"ids in \[0, 3\); got ids from -1 to 1"),
    (CLASS_MODEL, np.array([[0], [1]]), r"one class id in \[0, 3\) per example.*got shape \(2, 1\)"),
    (CLASS_MODEL, np.array([0.0, 1.0]), "class id.*got dtype float"),
    (CLASS_MODEL, tf.ragged.constant([[0], [1, 2]]), "dense tensor"),
])
def test_bad_condition_names_the_argument(config, condition, message):
    model = ConditionedGenerator(VOCAB, embed_dim=8, units=8, **config)
    target_ids = targets(batch=2)
    with pytest.raises(ValueError, match=message):
        model.generate(condition, max_length=4)
    with pytest.raises(ValueError, match=message):
        model({"condition": condition, "target_ids": target_ids})


def test_bad_call_inputs():
    model = ConditionedGenerator(VOCAB, num_classes=CLASSES, embed_dim=8, units=8)
    with pytest.raises(ValueError, match="keys 'condition' and 'target_ids'"):
        model({"source_ids": targets(2), "target_ids": targets(2)})
    with pytest.raises(ValueError, match="same batch size; got 3 and 2"):
        model({"condition": np.array([0, 1, 2]), "target_ids": targets(2)})
    with pytest.raises(ValueError, match=r"`target_ids` must hold ids in \[0, 30\)"):
        model({"condition": np.array([0, 1]), "target_ids": targets(2) + 30})
    # Inside a traced function (fit, search, an export) a class id out of
    # range fails at run time, in the same words.
    pack = tf.function(model.pack_condition)
    np.testing.assert_array_equal(pack(tf.constant([0, 2])), [[0], [2]])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"`condition` must hold ids in \[0, 3\)"):
        pack(tf.constant([0, 7]))


def test_learns_a_sequence_per_condition():
    """The sign of the first feature picks the sequence (5 6 7 8 or 9 8 7),
    through the initial state alone (no peeky input); the second feature
    is noise. (The task test learns from class ids.)"""
    sequences = [[5, 6, 7, 8, EOS], [9, 8, 7, EOS]]
    which = np.arange(64) % 2
    rng = np.random.default_rng(0)
    condition = np.stack([np.where(which == 1, 1.0, -1.0), rng.normal(size=64)], 1).astype("float32")
    labels = np.zeros((64, 5), "int32")
    for row, choice in enumerate(which):
        labels[row, : len(sequences[choice])] = sequences[choice]
    target_ids = np.concatenate([np.ones((64, 1), "int32"), labels[:, :-1]], 1)
    target_ids[labels == 0] = 0
    model = ConditionedGenerator(VOCAB, condition_dim=2, embed_dim=8, units=16, cell="gru")
    model.compile(FusedAdam(3e-2), kseq.losses.MaskedSparseCategoricalCrossentropy())
    model.fit({"condition": condition, "target_ids": target_ids}, labels, batch_size=16,
              epochs=20, verbose=0)
    generated = np.asarray(model.generate(condition[:4], max_length=6))
    expected = [sequences[choice] for choice in which[:4]]
    assert [row[: np.argmax(row == EOS) + 1].tolist() for row in generated] == expected


def test_fit_under_two_replicas_matches_one_device():
    """A tf.data set of ((class ids, target ids), labels) under a 2-replica
    MirroredStrategy trains the weights one device trains."""
    rng = np.random.default_rng(4)
    target_ids = targets(batch=8, length=7, seed=2)
    labels = np.roll(target_ids, -1, axis=1)
    labels[:, -1] = 0
    labels[(labels == 0) & (target_ids != 0)] = EOS
    condition = rng.integers(0, CLASSES, 8).astype("int32")
    data = tf.data.Dataset.from_tensor_slices(((condition, target_ids), labels)).batch(4)
    weights = {}
    for replicas in (1, 2):
        strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)])
        with strategy.scope():
            keras.utils.set_random_seed(7)
            model = small_model("classes-lstm", dropout=0.0, peeky=True)
            model.build()
            start = [w.numpy() for w in model.weights]
            model.compile(keras.optimizers.SGD(0.5), kseq.losses.MaskedSparseCategoricalCrossentropy())
        model.fit(data, epochs=1, verbose=0)
        weights[replicas] = [w.numpy() for w in model.weights]
    assert max(np.abs(a - b).max() for a, b in zip(weights[1], start)) > 1e-2, "it trained"
    for one, two in zip(weights[1], weights[2]):
        np.testing.assert_allclose(two, one, atol=2e-5)
