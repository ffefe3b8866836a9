"""The tasks that train in epochs (reverse, classify, language_model,
generate_reviews, caption), killed with SIGKILL in real processes and started again
with the same command: mid-training they resume from the last epoch's
save, after training they train nothing again, and either way they end
with the uninterrupted run's results."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from support import subprocess_env
from test_generate_reviews import export_word_classifier, write_reviews

pytestmark = pytest.mark.long
KSEQ_TRAIN = os.path.join(os.path.dirname(sys.executable), "kseq-train")
# Timings, where a run resumed and its folders differ between runs; everything else must not.
VARYING = ("seconds", "resumed_from", "xla_cache")
FOLDERS = ("classifier", "export")


def write_labelled(path):
    rng = random.Random(0)
    lines = []
    for _ in range(240):
        label = rng.choice(["pos", "neg"])
        words = rng.choices(["the", "film", "was", "a", "plot"], k=4) + [
            rng.choice(["great", "funny"] if label == "pos" else ["dull", "flat"])]
        lines.append(" ".join(words) + "\t" + label)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def write_lines(path):
    rng = random.Random(0)
    words = ["the", "lord", "said", "to", "moses", "and", "people", "went", "out"]
    path.write_text("\n".join(" ".join(rng.choices(words, k=6)) for _ in range(300)) + "\n", encoding="utf-8")
    return str(path)


def reverse_args(root):
    return ["--arch", "rnn", "--attention", "dot", "--cell", "lstm", "--train-examples", "640",
            "--valid-examples", "32", "--epochs", "4", "--batch-size", "32"]


def classify_args(root):
    return ["--train-tsv", write_labelled(root / "train.tsv"), "--vocab-size", "320", "--embed-dim", "8",
            "--units", "8", "--epochs", "4", "--dropout", "0.2", "--learning-rate", "0.01"]


def language_model_args(root):
    return ["--train-txt", write_lines(root / "train.txt"), "--vocab-size", "320", "--embed-dim", "16",
            "--units", "16", "--batch-size", "4", "--bptt", "10", "--epochs", "3", "--sample-length", "6"]


def generate_reviews_args(root):
    export_word_classifier(str(root / "classifier"))
    return ["--train-tsv", write_reviews(root / "train.tsv", 320, 0), "--valid-tsv",
            write_reviews(root / "valid.tsv", 32, 1), "--classifier-export", str(root / "classifier"),
            "--vocab-size", "320", "--embed-dim", "8", "--units", "16", "--epochs", "3",
            "--samples-per-class", "4", "--sample-length", "6"]


def caption_args(root):
    return ["--train-images", "64", "--valid-images", "16", "--test-images", "24", "--monitor-images", "8",
            "--epochs", "3", "--filters", "8,16", "--units", "16", "--embed-dim", "8", "--beam-size", "2",
            "--max-caption-length", "12", "--attention-plots", "2"]


# (task, its arguments, the model whose backup a mid-training kill waits for, its training phase)
RUNS = {
    "reverse": (reverse_args, "", "trained"),
    "classify": (classify_args, "", "trained"),
    "language_model": (language_model_args, "tbptt", "tbptt"),
    "generate_reviews": (generate_reviews_args, "", "trained"),
    "caption": (caption_args, "plain", "plain"),
}
TWO_MODELS = ("language_model", "caption")  # the second trains after the first is recorded


def command(name, root):
    arguments = RUNS[name][0](root)
    return [KSEQ_TRAIN, name, *arguments, "--strategy", "default",
            "--logdir", str(root / "runs"), "--export-dir", str(root / "export")]


def run_to_end(argv, timeout=600):
    result = subprocess.run(argv, env=subprocess_env(), capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return result.stdout


def kill_when(argv, ready, timeout=600):
    """Starts `argv`, SIGKILLs it as soon as `ready()` holds; the process must not have ended first."""
    process = subprocess.Popen(argv, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if ready():
            process.send_signal(signal.SIGKILL)
            break
        time.sleep(0.01)
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL, "killed while it ran"


def read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def versions(folder):
    """Each export's version folders: ["1"], or one list a model (caption's <model>/1)."""
    names = sorted(os.listdir(folder))
    if all(name.isdigit() for name in names):
        return [names]
    return [listed for name in names for listed in versions(os.path.join(folder, name))]


def stable(metrics):
    return {key: stable(value) if isinstance(value, dict) else value for key, value in metrics.items()
            if key not in FOLDERS and not any(word in key for word in VARYING)}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """{task: its uninterrupted run's stable metrics}, each run once."""
    runs = {}

    def get(name):
        if name not in runs:
            root = tmp_path_factory.mktemp(name)
            run_to_end(command(name, root))
            runs[name] = stable(read_json(root / "runs" / "metrics.json"))
        return runs[name]

    return get


@pytest.mark.slow  # test_fault_tolerance.py and training/test_consistent_save.py resume killed fits by default
@pytest.mark.parametrize("name", RUNS)
def test_a_task_killed_mid_training_resumes_from_its_last_epoch(name, uninterrupted, tmp_path):
    """SIGKILL once the first epoch is saved: the restart resumes there and
    ends as the uninterrupted run did (weights, scores, samples)."""
    argv = command(name, tmp_path)
    backup = tmp_path / "runs" / RUNS[name][1] / "backup" / "latest.json"
    kill_when(argv, lambda: (read_json(backup) or {}).get("epoch", 0) >= 1)
    assert not (tmp_path / "runs" / "metrics.json").exists()
    output = run_to_end(argv)
    assert "resuming from" in output
    assert stable(read_json(tmp_path / "runs" / "metrics.json")) == uninterrupted(name)
    assert all(listed == ["1"] for listed in versions(tmp_path / "export")) and not backup.exists()


@pytest.mark.slow  # tests/training/loop/test_fit.py kills and resumes mid-epoch in the default suite
@pytest.mark.parametrize("name", ["reverse", "language_model", "classify"])
def test_a_task_evaluating_inside_epochs_resumes_mid_epoch(name, tmp_path):
    """Evaluating every 7 steps and saving every 4 (20 batches an epoch for
    reverse, about 50 for the language model's streams, 27 for the
    classifier's texts streamed from their file), killed in the first epoch
    once step 8 is saved: the restart resumes at that step, not at an
    epoch's start, and ends as the uninterrupted run with the same options
    did (the language model's carried state saved and restored)."""
    cadence = ["--eval-every", "7", "--save-every", "4"] + (["--batch-size", "8"] if name == "classify" else [])
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    whole.mkdir()
    killed.mkdir()
    run_to_end(command(name, whole) + cadence)
    expected = stable(read_json(whole / "runs" / "metrics.json"))
    assert expected["best_epoch"] is None and expected["evaluations"] > 2 * expected["epochs_run"]
    argv = command(name, killed) + cadence
    backup = killed / "runs" / RUNS[name][1] / "backup" / "latest.json"
    kill_when(argv, lambda: 8 <= (read_json(backup) or {}).get("step", 0) < 16)
    output = run_to_end(argv)
    assert "resuming from" in output and "data epoch 1, batch" in output and ", batch 0" not in output
    assert stable(read_json(killed / "runs" / "metrics.json")) == expected


@pytest.mark.slow  # train_once's unit test (quick suite) and translate's subprocess test (e2e) cover it
@pytest.mark.parametrize("name", RUNS)
def test_a_task_killed_after_training_trains_nothing_again(name, uninterrupted, tmp_path):
    """SIGKILL as soon as training is recorded: the restart loads the
    trained weights, trains nothing and ends as the uninterrupted run did."""
    argv = command(name, tmp_path)
    phase = RUNS[name][2]
    kill_when(argv, lambda: phase in (read_json(tmp_path / "runs" / "phases.json") or {}))
    output = run_to_end(argv)
    assert f"{phase}: trained before this run" in output and "resuming from" not in output
    if name not in TWO_MODELS:
        assert "the first train step of this run" not in output, "no step trained again"
    assert stable(read_json(tmp_path / "runs" / "metrics.json")) == uninterrupted(name)
    assert all(listed == ["1"] for listed in versions(tmp_path / "export"))


@pytest.mark.slow  # every task's Fit saves on SIGTERM: test_translate_faults.py's SIGTERM test runs by default
def test_sigterm_mid_epoch_exits_with_the_preemption_code_and_the_epoch_runs_again(uninterrupted, tmp_path):
    """SIGTERM once the first epoch is saved: the run exits at once with
    PREEMPTED_EXIT_CODE, keeping that save (its data cannot resume
    mid-epoch); the same command runs the epoch again and ends as the
    uninterrupted run did."""
    from kseq.training.checkpoints.preemption import PREEMPTED_EXIT_CODE

    argv = command("reverse", tmp_path)
    backup = tmp_path / "runs" / "backup" / "latest.json"
    process = subprocess.Popen(argv, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None and not read_json(backup):
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == PREEMPTED_EXIT_CODE, output[-3000:]
    assert "SIGTERM: kept the last epoch's save" in output
    saved = read_json(backup)
    assert saved["batch"] == 0 and 1 <= saved["epoch"] < 4
    output = run_to_end(argv)
    assert f"resuming from {tmp_path / 'runs' / 'backup' / saved['folder']}" in output
    assert stable(read_json(tmp_path / "runs" / "metrics.json")) == uninterrupted("reverse")
