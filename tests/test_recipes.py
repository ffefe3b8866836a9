import json
import math
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "recipes"))
import reverse  # noqa: E402


def run_recipe(*args):
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "recipes", "reverse.py"), *args],
        capture_output=True, text=True, cwd=ROOT,
    )


def test_reverse_recipe_end_to_end(tmp_path):
    logdir, export_dir = tmp_path / "logs", tmp_path / "export"
    result = run_recipe(
        "--arch", "rnn", "--attention", "dot", "--cell", "lstm", "--train-examples", "1280",
        "--valid-examples", "64", "--epochs", "2", "--logdir", str(logdir), "--export-dir", str(export_dir),
        "--profile-steps", "3,4",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "source_ids" in result.stdout and "exported" in result.stdout
    metrics = json.loads((logdir / "metrics.json").read_text())
    assert {"test_exact_match", "valid_loss", "train_seconds"} <= set(metrics)
    # It learned: the validation loss fell from epoch to epoch, and below
    # what a decoder that ignores the source can reach (letters are uniform:
    # ln 26 = 3.26 per letter; EOS is easier, so the bound is loose).
    losses = metrics["valid_losses"]
    assert len(losses) == 2 and losses[-1] < losses[0] and losses[-1] < math.log(26), losses
    assert 0.0 <= metrics["test_exact_match"] <= 1.0
    for run in ("train", "validation", "generation", "test"):
        files = os.listdir(logdir / run)
        assert any(f.startswith("events.out.tfevents") for f in files), run
    assert (export_dir / "1" / "saved_model.pb").exists()
    traces = [name for folder, _, names in os.walk(logdir / "train" / "plugins" / "profile") for name in names]
    assert any(name.endswith(".xplane.pb") for name in traces), "--profile-steps 3,4 wrote a profile"


@pytest.mark.parametrize("argv, message", [
    (["--epochs", "0"], "--epochs must be >= 1"),
    (["--arch", "cnn"], "invalid choice"),
    (["--profile-steps", "5"], "--profile-steps must be two steps A,B"),
    (["--profile-steps", "9,3"], "--profile-steps must be two steps A,B with 0 < A <= B"),
    (["--logdir", "FILE"], "exists and is not a directory"),
])
def test_reverse_recipe_rejects_bad_arguments(tmp_path, capsys, argv, message):
    (tmp_path / "file").write_text("x")
    argv = [str(tmp_path / "file") if arg == "FILE" else arg for arg in argv]
    with pytest.raises(SystemExit) as exit_info:
        reverse.parse_args(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_hold_out_keeps_pairs_aligned_and_takes_every_nth_from_the_first():
    from kseq.training.recipe import hold_out

    kept, held = hold_out(list("abcdefg"), list(range(7)), every=3)
    assert held == (["a", "d", "g"], [0, 3, 6])
    assert kept == (["b", "c", "e", "f"], [1, 2, 4, 5])


def test_fit_keeping_best_ends_with_the_epoch_of_the_lowest_validation_loss(tmp_path):
    import keras
    import numpy as np
    import tensorflow as tf

    from kseq.training.recipe import fit_keeping_best

    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
    y = x @ np.array([[1.0], [-2.0], [0.5], [3.0]], "float32")
    data = {"train": tf.data.Dataset.from_tensor_slices((x, y)).batch(8),
            "valid": tf.data.Dataset.from_tensor_slices((x[:16], y[:16] + 1.0)).batch(8)}
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.2), "mse")
    history, metrics = fit_keeping_best(model, data, str(tmp_path), epochs=4, verbose=0)
    # The validation targets are off by 1: fitting the training data well ends near a loss of 1.
    assert metrics["valid_loss"] == min(history["val_loss"]) < history["val_loss"][-1]
    assert metrics["best_epoch"] == int(np.argmin(history["val_loss"])) + 1 and metrics["epochs_run"] == 4
    assert metrics["steps"] == 8 * metrics["best_epoch"], "the optimizer's state comes back with the weights"
    assert np.isclose(model.evaluate(data["valid"], verbose=0), metrics["valid_loss"], rtol=1e-5)
    saved = keras.saving.load_model(str(tmp_path / "model.keras"))
    np.testing.assert_array_equal(saved.get_weights()[0], model.get_weights()[0])
    assert os.listdir(tmp_path / "train") and os.listdir(tmp_path / "validation")
