"""StepCurves: the train curves every few steps, read back with
TensorBoard's own reader: window means that add up to keras' period
means, the schedule's rate, the cadence "auto" decides, and a killed run
resumed without a repeated step; TrainTotals' counts under two replicas."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from kseq._compat import accumulate_after_all_reduce, clip_after_all_reduce
from kseq.data.epoch_order import epoch_ordered_batches
from kseq.training.loop.fit import Fit
from kseq.training.loop.periods import StepTensorBoard
from kseq.training.loop.step_curves import AUTO_POINTS, StepCurves, auto_log_every, round_down
from kseq.training.loop.train_totals import TrainTotals
from kseq.training.objectives import FusedAdam
from kseq.training.objectives.losses import MaskedSparseCategoricalCrossentropy
from kseq.training.objectives.metrics import MaskedAccuracy
from support import KillAt

X = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
Y = X @ np.array([[1.0], [-2.0], [0.5], [3.0]], "float32")
RATE = keras.optimizers.schedules.ExponentialDecay(0.05, decay_steps=1, decay_rate=0.9)


def curve(folder, run, tag):
    """[(step, value)] of a curve, every point (TensorBoard's reader keeps 10 unless told)."""
    if not os.path.isdir(os.path.join(folder, run)):
        return []
    events = EventAccumulator(os.path.join(folder, run), size_guidance={"tensors": 0}).Reload()
    if tag not in events.Tags()["tensors"]:
        return []
    return [(event.step, float(tf.make_ndarray(event.tensor_proto))) for event in events.Tensors(tag)]


def fitted(folder, every="auto", kill=None, decided=None, accumulate=1, validate=True):
    """A regression fitted by `Fit` for 3 epochs of 8 batches of 8 rows,
    evaluated every 3 steps and saved every 2, with the train curves;
    resumes what a killed one left. -> (the fit's metrics, the curves' callback)."""
    keras.utils.set_random_seed(0)
    fit = Fit(str(folder), eval_every="3", save_every=2)
    train = epoch_ordered_batches((X, Y), fit.position, lambda d: d.batch(8), seed=5, epochs=3)
    valid = tf.data.Dataset.from_tensor_slices((X[:16], Y[:16] + 1.0)).batch(8) if validate else None
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(1)])
    adam = FusedAdam(RATE, global_clipnorm=1.0)
    model.compile(accumulate_after_all_reduce(adam, accumulate) if accumulate > 1 else clip_after_all_reduce(adam),
                  "mse")
    board = StepTensorBoard(str(folder), write_graph=False)
    curves = StepCurves(board, every, fit.expected_steps, on_decided=decided)
    logging = [curves, *([kill] if kill else []), board]
    return fit.fit(model, train, valid, 3, logging=logging, verbose=False), curves


def test_auto_gives_a_short_run_its_points_and_a_long_one_a_point_every_progress_line():
    short = auto_log_every(2.5, expected_steps=300, timed_steps=20)  # a 2-minute run on a CPU
    assert short.value == 1 and f"{AUTO_POINTS} points or more over the ~300 steps" in short.reason
    assert auto_log_every(2.5, expected_steps=900).value == 2, "a 6-minute run: 450 points"
    day = auto_log_every(40.0, expected_steps=40 * 86400, timed_steps=50)
    assert day.value == 1000 and "every 30 s" in day.reason and "40 steps/s (the median of 50 steps)" in day.reason
    assert auto_log_every(40.0).value == 1000, "no length known: the progress lines' cadence"
    assert auto_log_every(None, expected_steps=30000).value == 100
    assert auto_log_every(None).value == 1
    assert [round_down(v) for v in (0.2, 1, 1.9, 2, 4.99, 5, 9.99, 10, 250, 7000)] == [
        1, 1, 1, 2, 2, 5, 5, 10, 200, 5000]


@pytest.mark.parametrize("validate", [True, False], ids=["validated", "no-validation"])
def test_curves_every_step_hold_the_loss_rate_norm_and_speed_at_the_global_step(tmp_path, capsys, validate):
    decided = []
    metrics, curves = fitted(tmp_path, decided=decided.append, validate=validate)
    assert metrics["steps"] == 24 and curves.decision.value == 1, "24 steps expected: a point a step"
    assert decided == [curves.decision] and "log_every: 1 (300 points or more over the ~24 steps" in \
        capsys.readouterr().out
    loss = curve(tmp_path, "train", "loss")
    assert [step for step, _ in loss] == list(range(1, 25))
    # Each point is its step's loss: a period's points average to keras'
    # mean of the period (its batches are all 8 rows).
    periods = curve(tmp_path, "train", "epoch_loss")
    assert [step for step, _ in periods] == list(range(3, 25, 3))
    for end, mean in periods:
        assert np.mean([value for step, value in loss if end - 3 < step <= end]) == pytest.approx(mean, rel=1e-5)
    rates = curve(tmp_path, "train", "learning_rate")
    assert [value for _, value in rates] == pytest.approx([0.05 * 0.9**step for step, _ in rates], rel=1e-5)
    norms, speed = curve(tmp_path, "train", "global_norm"), curve(tmp_path, "train", "examples_per_second")
    assert len(norms) == len(speed) == 24 and all(value > 0 for _, value in norms + speed)
    validation = [step for step, _ in curve(tmp_path, "validation", "epoch_loss")]
    assert validation == ([step for step, _ in periods] if validate else []), "on the train curves' step axis"


def test_the_expected_length_is_the_least_of_the_epochs_batches_and_the_budget(tmp_path):
    expected = []

    class Ask(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) == 6:
                expected.extend(fit.expected_steps(self.model, rate) for rate in (None, 100.0, 0.001))

    fit = Fit(str(tmp_path), max_minutes=10.0)
    train = epoch_ordered_batches((X, Y), fit.position, lambda d: d.batch(8), seed=5, epochs=3)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(FusedAdam(0.01), "mse")
    fit.fit(model, train, None, 3, logging=[Ask()], verbose=False)
    assert expected == [24, 24, 7], "3 epochs of 8 batches; at 0.001 steps/s the budget's 10 min add 0.6"


def test_a_given_cadence_writes_its_multiples(tmp_path):
    _, curves = fitted(tmp_path, every=5)
    assert (curves.decision.value, curves.decision.reason) == (5, "--log-every")
    assert [step for step, _ in curve(tmp_path, "train", "loss")] == [5, 10, 15, 20]


def test_with_gradient_accumulation_a_point_comes_at_each_update(tmp_path):
    metrics, curves = fitted(tmp_path, every=2, accumulate=2)
    assert metrics["steps"] == 12, "24 batches, 12 updates"
    loss = curve(tmp_path, "train", "loss")
    assert [step for step, _ in loss] == [2, 4, 6, 8, 10, 12]
    periods = curve(tmp_path, "train", "epoch_loss")  # every 3 updates: 6 batches
    assert [step for step, _ in periods] == [3, 6, 9, 12]
    for (_, first), (end, second) in zip(periods[::2], periods[1::2]):
        points = [value for step, value in loss if end - 6 < step <= end]  # 3 points of 4 batches: 2 periods
        assert len(points) == 3 and np.mean(points) == pytest.approx((first + second) / 2, rel=1e-5)
    assert len(curve(tmp_path, "train", "global_norm")) == 6


def test_a_killed_run_resumed_keeps_its_cadence_and_repeats_no_step(tmp_path):
    """Killed after step 13, whose point is on disk (each is flushed as
    written), its last save step 12's: the resumed run writes from step 14
    on, at the cadence the first run decided and saved."""
    decided = []
    with pytest.raises(KeyboardInterrupt):
        fitted(tmp_path, kill=KillAt(batch=13), decided=decided.append)
    assert [step for step, _ in curve(tmp_path, "train", "loss")] == list(range(1, 14))
    metrics, resumed = fitted(tmp_path, decided=decided.append)
    assert metrics["resumed_from_step"] == 12 and len(decided) == 1 and resumed.decision == decided[0]
    steps = [step for step, _ in curve(tmp_path, "train", "loss")]
    assert steps == list(range(1, 25)), "no step twice, none backward, none missing"


@pytest.mark.parametrize("replicas", [1, 2])
def test_totals_count_every_replicas_rows_and_real_tokens(replicas):
    """Read from each local replica's copy, with no collective: a chief
    alone can read them under several workers."""
    strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)])
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, 6, (32, 5))
    labels = np.where(np.arange(5) < rng.integers(1, 6, (32, 1)), tokens, 0)  # 1 to 5 real tokens a row
    with strategy.scope():
        model = keras.Sequential([keras.Input((5,), dtype="int32"), keras.layers.Embedding(6, 4),
                                  keras.layers.Dense(6)])
        model.compile(FusedAdam(1e-2), MaskedSparseCategoricalCrossentropy(), metrics=[MaskedAccuracy()])
    logged = model.fit(tokens, labels, batch_size=8, epochs=1, verbose=0).history["loss"][-1]
    _, rows, real_tokens, norms = TrainTotals(model, "tokens").read()
    assert (rows, real_tokens, norms) == (32, np.count_nonzero(labels), 0.0), "no clipping: no norms"
    loss_sum, rows, examples, _ = TrainTotals(model).read()
    assert examples == rows == 32 and loss_sum / rows == pytest.approx(logged, rel=1e-5), "keras' logged loss"
