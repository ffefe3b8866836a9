import json
import math
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kseq.tasks import reverse  # noqa: E402


def run_task(*args):
    return subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "kseq-train"), "reverse", *args],
        capture_output=True, text=True, cwd=ROOT,
    )


@pytest.mark.e2e
def test_reverse_task_end_to_end(tmp_path):
    logdir, export_dir = tmp_path / "logs", tmp_path / "export"
    result = run_task(
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
    losses = metrics["valid_loss_by_epoch"]
    assert len(losses) == 2 and losses[-1] < losses[0] and losses[-1] < math.log(26), losses
    assert 0.0 <= metrics["test_exact_match"] <= 1.0
    for run in ("train", "validation", "generation", "test"):
        files = os.listdir(logdir / run)
        assert any(f.startswith("events.out.tfevents") for f in files), run
    check_train_curves(logdir, metrics)
    assert (export_dir / "1" / "saved_model.pb").exists()
    traces = [name for folder, _, names in os.walk(logdir / "train" / "plugins" / "profile") for name in names]
    assert any(name.endswith(".xplane.pb") for name in traces), "--profile-steps 3,4 wrote a profile"


def check_train_curves(logdir, metrics):
    """TensorBoard's train curves, read with its own reader: a point every
    step (auto, for a run of 40 steps), at the global step, evaluations on
    the same axis, the cadence in metrics.json and HParams."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata

    def read(run):
        return EventAccumulator(str(logdir / run), size_guidance={"tensors": 0}).Reload()

    train, validation = read("train"), read("validation")
    steps = [event.step for event in train.Tensors("loss")]
    assert len(steps) >= 10 and steps == sorted(set(steps)) and steps[-1] == metrics["steps"], steps
    assert {"learning_rate", "examples_per_second", "global_norm"} <= set(train.Tags()["tensors"])
    assert [event.step for event in train.Tensors("learning_rate")] == steps
    evaluated = [event.step for event in validation.Tensors("epoch_loss")]
    assert len(evaluated) == 2 and set(evaluated) <= set(steps), "validation on the train curves' step axis"
    assert metrics["log_every"] == steps[1] - steps[0] == 1
    assert f"~{metrics['steps']} steps expected" in metrics["log_every_reason"]
    tag = "_hparams_/session_start_info"
    settings = metadata.parse_session_start_info_plugin_data(read(".").SummaryMetadata(tag).plugin_data.content)
    assert settings.hparams["log_every"].number_value == 1


@pytest.mark.parametrize("argv, message", [
    (["--epochs", "0"], "--epochs must be >= 1"),
    (["--arch", "cnn"], "invalid choice"),
    (["--profile-steps", "5"], "--profile-steps must be two steps A,B"),
    (["--profile-steps", "9,3"], "--profile-steps must be two steps A,B with 0 < A <= B"),
    (["--logdir", "FILE"], "exists and is not a directory"),
])
def test_reverse_task_rejects_bad_arguments(tmp_path, capsys, argv, message):
    (tmp_path / "file").write_text("x")
    argv = [str(tmp_path / "file") if arg == "FILE" else arg for arg in argv]
    with pytest.raises(SystemExit) as exit_info:
        reverse.parse_args(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_a_vocabulary_trained_on_a_corpus_is_kept_with_its_scan_and_found_by_the_next_run(tmp_path, monkeypatch,
                                                                                         capsys):
    from kseq.data.subword_tokenizer import SubwordTokenizer
    from kseq.training.config.options import AUTO
    from kseq.training.vocabulary import run_tokenizer

    texts = [f"the {word} sat on the mat" for word in ("cat", "dog", "bird", "fox")] * 40
    cache, run1, run2 = tmp_path / "scan", tmp_path / "run1", tmp_path / "run2"
    for folder in (cache, run1, run2):
        folder.mkdir()
    first = run_tokenizer(texts, str(run1), vocab_size=AUTO, max_vocab_size=400, cache=str(cache))
    kept = list(cache.iterdir())
    assert len(kept) == 1 and kept[0].name.startswith("spm-") and kept[0].read_bytes() == first.proto

    def refused(*args, **kwargs):
        raise AssertionError("trained again")

    monkeypatch.setattr(SubwordTokenizer, "train", refused)
    again = run_tokenizer(texts, str(run2), vocab_size=AUTO, max_vocab_size=400, cache=str(cache))
    assert again.proto == first.proto and "trained on this data before" in capsys.readouterr().out
    assert (run2 / "spm.model").read_bytes() == first.proto, "the run's own copy, for its export"
