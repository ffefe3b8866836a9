import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "source_ids" in result.stdout and "exported" in result.stdout
    metrics = json.loads((logdir / "metrics.json").read_text())
    assert {"test_exact_match", "valid_loss", "train_seconds"} <= set(metrics)
    assert metrics["valid_loss"] > 0
    for run in ("train", "validation", "generation"):
        files = os.listdir(logdir / run)
        assert any(f.startswith("events.out.tfevents") for f in files), run
    assert (export_dir / "1" / "saved_model.pb").exists()


def test_reverse_recipe_rejects_bad_arguments(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    result = run_recipe("--logdir", str(not_a_dir))
    assert result.returncode == 2 and "exists and is not a directory" in result.stderr
    result = run_recipe("--epochs", "0")
    assert result.returncode == 2 and "--epochs must be >= 1" in result.stderr
    result = run_recipe("--arch", "cnn")
    assert result.returncode == 2 and "invalid choice" in result.stderr
