"""kseq-train caption end to end: a tiny run in the e2e tier, the real
budget (both captioners, the issue's content-accuracy targets) with -m slow."""

import glob
import json
import os

import pytest
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from kseq.tasks import caption  # noqa: E402

from kseq.data import scenes  # noqa: E402

TINY = ["--train-images", "64", "--valid-images", "16", "--test-images", "24", "--monitor-images", "8",
        "--epochs", "1", "--filters", "8,16", "--units", "16", "--embed-dim", "8", "--beam-size", "2",
        "--max-caption-length", "12", "--attention-plots", "2", "--strategy", "default"]


@pytest.mark.e2e
def test_tiny_run_reports_exports_and_draws_attention(tmp_path):
    logdir, export_dir = str(tmp_path / "runs"), str(tmp_path / "export")
    metrics = caption.main(TINY + ["--models", "attention", "--logdir", logdir, "--export-dir", export_dir])
    with open(os.path.join(logdir, "metrics.json")) as f:
        assert json.load(f) == json.loads(json.dumps(metrics))
    model = metrics["models"]["attention"]
    assert 0 <= model["test_bleu"] <= 100 and 0 <= model["content_accuracy"] <= 1
    assert metrics["content_accuracy_attention"] == model["content_accuracy"]
    assert set(model["content_accuracy_by_shapes"]) == {1, 2, 3}
    assert model["shape_words_checked"] >= 0 and "attention_on_named_shape" in metrics
    # The export takes PNG bytes and answers in the grammar's words.
    served = tf.saved_model.load(model["export"]).signatures["serving_default"]
    image = scenes.load_scenes("test", 1).images[0]
    text = served(image=tf.constant([tf.io.encode_png(image).numpy()]))["caption"].numpy()[0].decode()
    assert set(text.split()) <= set(scenes.vocabulary()) | {"[UNK]"}
    # TensorBoard: one heat-map image per plotted caption, after the epoch and for the test.
    for run in ("generation", "test"):
        events = EventAccumulator(os.path.join(logdir, "attention", run), size_guidance={"tensors": 0}).Reload()
        images = [tag for tag in events.Tags()["tensors"] if tag.startswith("attention_")]
        assert sorted(images) == ["attention_0", "attention_1"], run
    assert glob.glob(os.path.join(logdir, "attention", "train", "events.*"))


def test_bad_options_stop_before_any_work(capsys):
    for argv, message in [(["--filters", "32,x"], "--filters must be positive widths"),
                          (["--models", "both-ways"], "invalid choice"),
                          (["--attention", "luong"], "invalid choice")]:
        with pytest.raises(SystemExit) as stopped:
            caption.parse_args(argv)
        assert stopped.value.code == 2
        assert message in capsys.readouterr().err


@pytest.mark.slow  # about 11 minutes on 2 idle CPU cores: the task's default budget
def test_default_budget_meets_the_content_targets(tmp_path):
    metrics = caption.main(["--logdir", str(tmp_path / "runs"), "--export-dir", str(tmp_path / "export")])
    attention, plain = metrics["content_accuracy_attention"], metrics["content_accuracy_plain"]
    assert attention >= 0.9, metrics["models"]["attention"]
    assert attention > plain, (attention, plain)
    assert metrics["attention_on_named_shape"] > 0.5
