"""`--accumulate N`: N batches make one update, equal to one batch N times
larger, and a cadenced run with it resumes where it was killed."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from kseq.training.task import compile_model
from kseq.training.objectives.optimizers import FusedAdam
from kseq.training.checkpoints.resume import ResumableBackup
from support import KillAt, cadenced_run

def fit_classifier(strategy, batch_size, accumulate):
    """Weights after 2 epochs of a small classifier on 64 examples; the
    clipping norm is small enough to clip every update."""
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation="tanh"),
                                  keras.layers.Dense(3)])
        compile_model(model, FusedAdam(1e-2, clipnorm=0.05),
                             keras.losses.SparseCategoricalCrossentropy(from_logits=True), accumulate=accumulate)
    rng = np.random.default_rng(0)
    model.fit(rng.normal(size=(64, 5)), rng.integers(0, 3, 64), batch_size=batch_size, epochs=2, verbose=0,
              shuffle=False)
    return model


@pytest.mark.parametrize("replicas", [1, 2])
def test_n_accumulated_batches_step_as_one_batch_n_times_larger(replicas):
    strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)])
    large = fit_classifier(strategy, batch_size=16, accumulate=1)
    accumulated = fit_classifier(strategy, batch_size=4, accumulate=4)
    assert int(accumulated.optimizer.iterations.numpy()) == int(large.optimizer.iterations.numpy()) == 8
    for a, e in zip(accumulated.weights, large.weights):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=1e-5, atol=1e-6)
    alone = fit_classifier(strategy, batch_size=4, accumulate=1)
    assert not np.allclose(np.asarray(alone.weights[0]), np.asarray(large.weights[0]), atol=1e-4)


def test_accumulate_needs_an_optimizer_not_built_yet():
    optimizer = FusedAdam(1e-3)
    optimizer.build([keras.Variable(np.zeros(2, "float32"))])
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    with pytest.raises(ValueError, match="Gradient accumulation needs an optimizer that is not built"):
        compile_model(model, optimizer, "mse", accumulate=2)


def accumulated_run(workdir, kill=None):
    """2 epochs, an evaluation every 5 updates, a save every 3 batches, 2 batches an update."""
    model, report, _, total = cadenced_run(workdir, epochs=2, cadence_steps=5, save_every=3, learning_rate=1e-2,
                                           accumulate=2, kill=kill)
    return model, report, total


@pytest.mark.e2e
def test_a_killed_run_with_accumulation_resumes_to_the_same_weights(tmp_path):
    reference, report, total = accumulated_run(tmp_path / "reference")
    assert report["steps"] == total // 2 and report["epochs_run"] == 2.0
    with pytest.raises(KeyboardInterrupt):
        accumulated_run(tmp_path / "killed", kill=KillAt(batch=5))
    saved = ResumableBackup.saved_state(str(tmp_path / "killed" / "backup"))
    # Saved after 3 batches, between updates: the accumulated gradient is saved too.
    assert (saved["batches"], saved["step"]) == (3, 1)
    resumed, report, _ = accumulated_run(tmp_path / "killed")
    assert report["resumed_from_step"] == 1 and report["steps"] == total // 2
    for a, e in zip(resumed.weights, reference.weights):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=1e-4, atol=1e-5)
