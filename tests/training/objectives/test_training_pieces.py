import keras
import numpy as np
import pytest
import tensorflow as tf

from kseq.training.objectives.losses import MaskedSparseCategoricalCrossentropy
from kseq.training.objectives.metrics import MaskedAccuracy, Perplexity
from kseq.training.objectives.schedules import Annealed, Scaled, TransformerSchedule, annealed_schedule
from support import assert_close


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


@pytest.fixture
def batch():
    rng = np.random.default_rng(0)
    labels = np.array([[5, 6, 2, 0], [7, 2, 0, 0]], "int32")
    logits = rng.normal(size=(2, 4, 9)).astype("float32")
    return labels, logits


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_loss_is_the_mean_over_real_tokens(batch, smoothing):
    labels, logits = batch
    logp = log_softmax(logits)
    target = np.eye(9)[labels] * (1 - smoothing) + smoothing / 9
    per_token = -(target * logp).sum(-1)
    real = labels != 0
    expected = per_token[real].mean()
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=smoothing)
    assert_close(loss(labels, logits), expected)
    # PAD logits can be anything: the loss does not change.
    noisy = logits.copy()
    noisy[~real] = 1e4
    assert_close(loss(labels, noisy), expected)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_loss_gradient_is_softmax_minus_target_over_real_tokens(batch, smoothing):
    labels, logits = batch
    logits = tf.constant(logits)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        value = MaskedSparseCategoricalCrossentropy(label_smoothing=smoothing)(labels, logits)
    target = np.eye(9)[labels] * (1 - smoothing) + smoothing / 9
    real = (labels != 0)[..., None]
    expected = (np.exp(log_softmax(logits.numpy())) - target) * real / real.sum()
    assert_close(tape.gradient(value, logits), expected)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_loss_is_finite_on_large_bfloat16_logits_of_any_rank(jit_compile):
    # Logits of +-3e4 overflow exp() unless the maximum comes off first.
    rng = np.random.default_rng(1)
    logits = (rng.normal(size=(6, 9)) * 1e4).astype("float32")
    labels = np.array([5, 6, 2, 0, 8, 1], "int32")
    rounded = np.asarray(tf.cast(tf.cast(logits, tf.bfloat16), tf.float32))

    @tf.function(jit_compile=jit_compile)
    def value_and_gradient(logits):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            value = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)(labels, logits)
        return value, tape.gradient(value, logits)

    value, gradient = value_and_gradient(tf.cast(logits, tf.bfloat16))
    target = np.eye(9)[labels] * 0.9 + 0.1 / 9
    real = labels != 0
    logp = log_softmax(rounded.astype("float64"))
    np.testing.assert_allclose(float(value), -(target * logp).sum(-1)[real].mean(), rtol=1e-2)
    expected = (np.exp(logp) - target) * real[:, None] / real.sum()
    assert gradient.dtype == tf.bfloat16
    assert_close(tf.cast(gradient, tf.float32), expected, atol=1e-2)


@pytest.mark.parametrize("bad_id", [9, -1])
def test_loss_names_labels_outside_the_vocabulary(batch, bad_id):
    labels, logits = batch
    labels = labels.copy()
    labels[0, 0] = bad_id
    with pytest.raises(tf.errors.InvalidArgumentError, match="`y_true` holds ids outside"):
        MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)(labels, logits)


def test_loss_matches_keras_without_smoothing(batch):
    labels, logits = batch
    reference = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0)
    assert_close(MaskedSparseCategoricalCrossentropy()(labels, logits), reference(labels, logits))


def test_loss_sample_weights_and_empty_batch(batch):
    labels, logits = batch
    loss = MaskedSparseCategoricalCrossentropy()
    weighted = loss(labels, logits, sample_weight=np.array([1.0, 0.0]))
    assert_close(weighted, loss(labels[:1], logits[:1]))
    assert float(loss(np.zeros((2, 4), "int32"), logits)) == 0.0


def test_a_classifiers_loss_counts_every_class_id_and_weighs_rows():
    """pad_id=None: (B,) class ids, 0 among them, against (B, C) logits:
    keras' sparse cross-entropy, with (B,) sample weights too."""
    rng = np.random.default_rng(1)
    labels, logits = np.array([0, 3, 0, 1], "int32"), rng.normal(size=(4, 5)).astype("float32")
    weights = np.array([1.0, 0.0, 2.0, 1.0], "float32")
    loss, reference = MaskedSparseCategoricalCrossentropy(pad_id=None), keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction="sum")
    assert_close(loss(labels, logits), reference(labels, logits) / 4)
    assert_close(loss(labels, logits, sample_weight=weights), reference(labels, logits, weights) / weights.sum())
    assert float(loss(labels[:0], logits[:0])) == 0.0


def test_loss_round_trip_and_bad_smoothing():
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)
    clone = keras.losses.deserialize(keras.losses.serialize(loss))
    assert clone.get_config() == loss.get_config()
    with pytest.raises(ValueError, match="`label_smoothing`"):
        MaskedSparseCategoricalCrossentropy(label_smoothing=1.0)


def test_masked_accuracy_and_perplexity(batch):
    labels, logits = batch
    real = labels != 0
    accuracy = MaskedAccuracy()
    accuracy.update_state(labels, logits)
    assert_close(accuracy.result(), (logits.argmax(-1) == labels)[real].mean())
    perplexity = Perplexity()
    perplexity.update_state(labels, logits)
    nll = -np.take_along_axis(log_softmax(logits), labels[..., None], -1)[..., 0]
    assert_close(perplexity.result(), np.exp(nll[real].mean()), atol=1e-4)
    perplexity.reset_state()
    perplexity.update_state(labels, np.zeros_like(logits))
    assert_close(perplexity.result(), 9.0, atol=1e-4)
    for metric in (accuracy, perplexity):
        clone = metric.__class__.from_config(metric.get_config())
        assert clone.name == metric.name


def test_transformer_schedule_formula():
    schedule = TransformerSchedule(d_model=512, warmup_steps=4000)
    for step in [1, 100, 4000, 10000]:
        expected = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
        assert_close(schedule(step - 1), expected, atol=1e-9)
    clone = TransformerSchedule.from_config(schedule.get_config())
    assert_close(clone(10), schedule(10))
    optimizer = keras.optimizers.Adam(schedule)
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert isinstance(restored.learning_rate, TransformerSchedule) or isinstance(
        restored._learning_rate, TransformerSchedule
    )
    with pytest.raises(ValueError, match="`d_model` and `warmup_steps` must be positive"):
        TransformerSchedule(0)


def test_annealed_schedule_falls_to_zero_over_its_share_of_the_steps():
    """1 until the last `share` of `total_steps`, then linearly (or along
    half a cosine) to 0; a factor of 1 while the steps are not known, so
    the rate is the schedule's bit for bit; `Scaled`'s factor (the
    fall-back's lower rate) multiplies on top."""
    base = Scaled(TransformerSchedule(d_model=64, warmup_steps=10))
    annealed = Annealed(base, share=0.25)
    for step in (0, 9, 500):
        assert float(annealed(step)) == float(base(step)), "no plan yet: the schedule's own rate"
    annealed.total_steps.assign(200.0)
    factors = [float(annealed(step)) / float(base(step)) for step in (149, 150, 175, 199)]
    assert factors == pytest.approx([1.0, 1.0, 0.5, 1 / 50]) and float(annealed(200)) == 0.0
    _ = base.factor.assign(0.5)
    assert float(annealed(175)) == pytest.approx(0.25 * float(TransformerSchedule(64, 10)(175)))
    cosine = Annealed(0.01, 0.5, "cosine", total_steps=100)
    assert [float(cosine(step)) for step in (50, 75, 100)] == pytest.approx([0.01, 0.005, 0.0], abs=1e-9)
    assert annealed.warmup_steps == 10 and cosine.warmup_steps == 0
    clone = Annealed.from_config(annealed.get_config())
    assert float(clone.total_steps.numpy()) == 200.0 and clone.share == 0.25
    assert float(clone(175)) == pytest.approx(float(TransformerSchedule(64, 10)(175)) * 0.5 * 0.5)
    assert annealed_schedule(keras.optimizers.Adam(annealed)) is annealed
    assert annealed_schedule(keras.optimizers.Adam(base)) is None and annealed_schedule(keras.optimizers.Adam()) is None
    with pytest.raises(ValueError, match="`share` must be in"):
        Annealed(0.01, 1.0)
    with pytest.raises(ValueError, match="`shape` must be one of"):
        Annealed(0.01, 0.2, "step")


def test_loss_normalises_by_tokens_across_replicas():
    """Two replicas with different token counts: the replicas' losses add
    up to the global mean over real tokens, not the mean of two means."""
    cpus = tf.config.list_logical_devices("CPU")
    assert len(cpus) == 2, "conftest configures two logical CPUs"
    strategy = tf.distribute.MirroredStrategy([d.name for d in cpus[:2]])
    labels = np.array([[5, 2, 0, 0], [5, 6, 7, 2]], "int32")
    logits = np.random.default_rng(0).normal(size=(2, 4, 9)).astype("float32")
    loss = MaskedSparseCategoricalCrossentropy()

    def replica_fn(y, p):
        return loss(y, p)

    dataset = tf.data.Dataset.from_tensor_slices((labels, logits)).batch(2)
    y, p = next(iter(strategy.experimental_distribute_dataset(dataset)))
    # In a tf.function, as `fit` runs it. Run eagerly, this test made a later
    # MirroredStrategy in the same process fail (a collective shape mismatch).
    per_replica = tf.function(lambda y, p: strategy.run(replica_fn, args=(y, p)))(y, p)
    total = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
    assert_close(total, loss(labels, logits))
