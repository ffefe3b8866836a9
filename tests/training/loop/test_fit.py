"""Fit: the best epoch kept, and a killed fit resumed to the uninterrupted
one's weights and metrics; without a monitor its stopping callbacks decide;
the deprecated CadencedFit trains as Fit does; train_once trains a phase once."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from kseq.data.epoch_order import epoch_ordered_batches
from kseq.data.streams import stream_batches
from kseq.training.loop.fit import Fit
from kseq.training.loop.trained import Trained, train_once
from kseq.training.checkpoints.phases import Phases
from kseq.training.objectives import FusedAdam
from support import KillAt

X = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
Y = X @ np.array([[1.0], [-2.0], [0.5], [3.0]], "float32")


def regression(position, dropout=0.0, epochs=6):
    """(model, data): the validation targets are off by 1, so fitting the
    training data well ends near a validation loss of 1 and the best epoch
    is not always the last."""
    keras.utils.set_random_seed(0)
    data = {"train": epoch_ordered_batches((X, Y), position, lambda d: d.batch(8), seed=5, epochs=epochs),
            "valid": tf.data.Dataset.from_tensor_slices((X[:16], Y[:16] + 1.0)).batch(8)}
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dropout(dropout),
                              keras.layers.Dense(1)])
    model.compile(FusedAdam(0.05), "mse")
    return model, data


def test_epoch_fit_ends_with_the_best_epoch_and_keeps_its_backup_until_released(tmp_path, capsys):
    fit = Fit(str(tmp_path), monitor="val_loss", mode="min")
    model, data = regression(fit.position)
    metrics = fit.fit(model, data["train"], data["valid"], 6, verbose=False)
    assert "evaluation and checkpoints every data epoch; at most 6 epochs of 8 batches" in capsys.readouterr().out
    losses = metrics["valid_loss_by_epoch"]
    assert len(losses) == 6 and metrics["epochs_run"] == 6 and metrics["steps"] == 6 * 8
    assert metrics["valid_loss"] == min(losses) and metrics["best_epoch"] == int(np.argmin(losses)) + 1
    assert metrics["best_step"] == 8 * metrics["best_epoch"]
    assert np.isclose(model.evaluate(data["valid"], verbose=0), metrics["valid_loss"], rtol=1e-5)
    assert os.path.exists(tmp_path / "backup" / "latest.json"), "kept until what training made is written"
    fit.release()
    assert not os.path.exists(tmp_path / "backup")


TIMES = ("train_seconds", "train_step_seconds", "fit_seconds")
# What differs between a run and the same run resumed: its timings, where it resumed.
RESUMED = (*TIMES, "resumed_from_step", "resumed_from_epoch")


def test_fit_without_a_monitor_leaves_stopping_to_its_callbacks_and_ends_on_the_last_weights(tmp_path, capsys):
    fit = Fit(str(tmp_path), eval_every="3", save_every=2)
    model, data = regression(fit.position, epochs=2)
    seen = []

    class Scores(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            seen.append(logs["val_loss"])

    metrics = fit.fit(model, data["train"], data["valid"], 2, stopping=[Scores()], batches="8 fixed batches")
    out = capsys.readouterr().out
    assert "evaluation and checkpoints every 3 steps, saves every 2 steps; at most 2 epochs of 8 fixed batches" in out
    assert metrics["steps"] == 16 and metrics["epochs_run"] == 2 and "best_step" not in metrics
    assert len(seen) == metrics["evaluations"] == len(fit.history.history["val_loss"]) > 1
    assert np.isclose(model.evaluate(data["valid"], verbose=0), seen[-1], rtol=1e-5)


def test_epoch_fit_stops_after_patience_on_a_score(tmp_path):
    fit = Fit(str(tmp_path), monitor="val_loss", mode="max", patience=2)  # "max" of a loss: soon no better
    model, data = regression(fit.position, epochs=10)
    metrics = fit.fit(model, data["train"], data["valid"], 10, verbose=False)
    assert metrics["stopped_early"] and metrics["epochs_run"] == 3 and metrics["best_epoch"] == 1


@pytest.fixture(scope="module")
def uninterrupted_epoch_fit(tmp_path_factory):
    """(metrics, weights) of the run the killed ones must end like: the same
    for every kill, so fitted once for the module."""
    whole = Fit(str(tmp_path_factory.mktemp("whole")), monitor="val_loss", patience=3)
    model, data = regression(whole.position, dropout=0.3, epochs=5)
    return whole.fit(model, data["train"], data["valid"], 5, verbose=False), model.get_weights()


@pytest.mark.parametrize("kill", [KillAt(batch=21), KillAt(period=3)], ids=["mid-epoch", "before-the-save"])
def test_a_killed_epoch_fit_resumes_to_the_uninterrupted_weights_and_metrics(tmp_path, kill,
                                                                            uninterrupted_epoch_fit):
    """Killed in epoch 3 (mid-epoch, or after its logs and before its
    save), then resumed by a fresh model and Fit as a restarted
    process would: the same weights, bit for bit, and the same metrics.
    Dropout's random state and the shuffled order come back too."""
    expected, expected_weights = uninterrupted_epoch_fit
    expected = dict(expected)  # popped below; other kills read it too

    killed = Fit(str(tmp_path / "killed"), monitor="val_loss", patience=3)
    model, data = regression(killed.position, dropout=0.3, epochs=5)
    with pytest.raises(KeyboardInterrupt):
        killed.fit(model, data["train"], data["valid"], 5, logging=[kill], verbose=False)
    resumed = Fit(str(tmp_path / "killed"), monitor="val_loss", patience=3)
    assert resumed.resuming["epoch"] == 2, "the last save: epoch 2's end"
    model, data = regression(resumed.position, dropout=0.3, epochs=5)
    metrics = resumed.fit(model, data["train"], data["valid"], 5, verbose=False)
    for got, want in zip(model.get_weights(), expected_weights):
        np.testing.assert_array_equal(got, want)
    assert metrics.pop("resumed_from_epoch") == 2 and expected.pop("resumed_from_epoch") is None
    assert {k: v for k, v in metrics.items() if k not in RESUMED} == {
        k: v for k, v in expected.items() if k not in RESUMED}


def test_epoch_fit_evaluates_and_saves_inside_an_epoch_and_resumes_there(tmp_path):
    """Evaluations every 3 steps and saves every 2 in epochs of 8 batches:
    a run killed after batch 13 resumes from step 12 (its last save, mid
    epoch 2) onto the batches and weights of the uninterrupted run."""
    def fitted(folder, kill=None):
        fit = Fit(str(tmp_path / folder), eval_every="3", save_every=2, monitor="val_loss", patience=0)
        model, data = regression(fit.position, dropout=0.3, epochs=3)
        return fit, model, fit.fit(model, data["train"], data["valid"], 3, logging=[kill] if kill else [], verbose=False)

    _, whole, expected = fitted("whole")
    assert expected["evaluations"] == 8 and expected["steps"] == 24 and expected["epochs_run"] == 3
    assert len(expected["valid_loss_by_epoch"]) == 8 and expected["best_epoch"] is None
    with pytest.raises(KeyboardInterrupt):
        fitted("killed", KillAt(batch=13))
    resumed, model, metrics = fitted("killed")
    assert resumed.resuming["step"] == 12 and resumed.resuming["data"] == {"epoch": 1, "window": 0, "skip": 4}
    for got, want in zip(model.get_weights(), whole.get_weights()):
        np.testing.assert_array_equal(got, want)
    assert metrics["valid_loss_by_epoch"] == expected["valid_loss_by_epoch"]


def test_a_language_model_resumed_mid_epoch_goes_on_with_its_carried_streams(tmp_path):
    """Truncated BPTT over fixed-order stream batches, evaluated every 5
    steps and saved every 3: killed after batch 20 of the first epoch, the
    restart resumes at step 18 with the streams' state of that step (saved
    with it) and ends with the uninterrupted run's weights, bit for bit."""
    import kseq

    tokens = np.random.default_rng(1).integers(4, 40, 1400)

    def fitted(folder, kill=None):
        fit = Fit(str(tmp_path / folder), eval_every="5", save_every=3, monitor="val_loss")
        keras.utils.set_random_seed(0)
        model = kseq.models.RNNLanguageModel(40, embed_dim=8, units=8)
        model.build()
        model.compile(FusedAdam(0.01), kseq.losses.MaskedSparseCategoricalCrossentropy())
        data = {"train": stream_batches(tokens, 4, 10, drop_remainder=True),
                "valid": stream_batches(tokens[:300], 4, 10, drop_remainder=True)}
        return fit, model, fit.fit(model, data["train"], data["valid"], 2, logging=[kill] if kill else [], verbose=False)

    _, whole, expected = fitted("whole")
    assert expected["steps"] == 2 * 34 and expected["evaluations"] == 14
    with pytest.raises(KeyboardInterrupt):
        fitted("killed", KillAt(batch=20))
    resumed, model, metrics = fitted("killed")
    assert resumed.resuming["step"] == 18 and resumed.resuming["data"]["skip"] == 18
    for got, want in zip(model.get_weights(), whole.get_weights()):
        np.testing.assert_array_equal(got, want)
    assert metrics["valid_loss_by_epoch"] == expected["valid_loss_by_epoch"]


def test_the_deprecated_cadenced_fit_warns_and_trains_as_fit_does(tmp_path):
    """`CadencedFit`, the loop `Fit` built on every call before it did the
    job itself, keeps its arguments and calls for code written against it:
    it warns, and ends with Fit's weights and report, its backup kept
    until `release`."""
    from kseq.training.checkpoints.resume import TrainingPosition
    from kseq.training.loop import CadencedFit
    from kseq.training.progress import Cadence

    fit = Fit(str(tmp_path / "fit"), eval_every="3", save_every=2)
    model, data = regression(fit.position, epochs=2)
    expected = fit.fit(model, data["train"], data["valid"], 2, verbose=False)
    position = TrainingPosition()
    old_model, old_data = regression(position, epochs=2)
    with pytest.warns(DeprecationWarning, match="use `kseq.training.loop.Fit"):
        old = CadencedFit(str(tmp_path / "old"), position, Cadence(steps=3), 16, 8, save_every=2, max_minutes=None,
                          resuming=None, non_finite_hint="", show=False)
    history = old.fit(old_model, old_data["train"], old_data["valid"])
    report = old.report(old_model)
    for got, want in zip(old_model.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(got, want)
    assert {k: v for k, v in report.items() if k not in TIMES} == {
        k: expected[k] for k in report if k not in TIMES}
    assert len(history.history["val_loss"]) == report["evaluations"] == 6 and report["steps"] == 16
    assert os.path.exists(tmp_path / "old" / "backup" / "latest.json")
    old.release()
    assert not os.path.exists(tmp_path / "old" / "backup")


def test_train_once_trains_a_phase_once_and_a_restart_reloads_its_weights(tmp_path):
    class Options:
        logdir, task_name = str(tmp_path), "test"

        def as_hparams(self):
            return {}

    def build():
        keras.utils.set_random_seed(1)
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])

    fit = Fit(str(tmp_path), monitor="val_loss")
    model = build()
    model.layers[0].kernel.assign(np.full((4, 1), 3.0, "float32"))
    calls = []

    def train():
        calls.append(1)
        return Trained(model, [], {"valid_loss": 0.5})

    first = train_once(Phases(str(tmp_path)), "trained", fit, train, Options(), build)
    again = train_once(Phases(str(tmp_path)), "trained", Fit(str(tmp_path), monitor="val_loss"), train, Options(), build)
    assert calls == [1] and first.metrics == again.metrics == {"valid_loss": 0.5}
    np.testing.assert_array_equal(again.model.layers[0].kernel.numpy(), 3.0)
    assert not os.path.exists(tmp_path / "backup")


def test_a_kseq_models_first_fit_traces_its_train_step_once():
    """Without a strategy keras would build the optimizer inside the first
    trace and trace the step again (kseq._compat.OptimizerBuiltBeforeTracing)."""
    from kseq.training.objectives.losses import MaskedSparseCategoricalCrossentropy
    from kseq.training.task import compile_model
    from support import random_batch, small_model

    model = small_model("rnn", {"attention": "dot"}, dropout=0.0)
    batch = random_batch()
    model(batch)
    compile_model(model, FusedAdam(1e-3), MaskedSparseCategoricalCrossentropy())
    traces = []
    keras_step = model.train_step
    model.train_step = lambda data: traces.append(1) or keras_step(data)
    history = model.fit(batch, batch["target_ids"], epochs=2, verbose=0)
    assert len(traces) == 1 and model.optimizer.built
    assert np.all(np.isfinite(history.history["loss"]))
