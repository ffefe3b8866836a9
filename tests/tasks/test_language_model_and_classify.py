"""kseq-train language_model and kseq-train classify end to end on tiny data."""

import gzip
import json
import os
import random

import keras
import numpy as np
import pytest
import tensorflow as tf

from kseq.tasks import classify  # noqa: E402
from kseq.tasks import language_model  # noqa: E402

from kseq.data.subword_tokenizer import SubwordTokenizer  # noqa: E402
from support import check_served_text_is_normalized  # noqa: E402

pytestmark = pytest.mark.long

WORDS = ["the", "lord", "said", "to", "moses", "and", "people", "went", "out", "of", "egypt"]


def write_text(path, lines, seed):
    rng = random.Random(seed)
    text = [" ".join(rng.choices(WORDS, k=rng.randint(3, 9))) for _ in range(lines)]
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def lm_run(made_once):
    """The language model run, made once a session (`made_once`): its tests only read it."""
    return made_once("lm", language_model_run)[1]


def language_model_run(root):
    write_text(root / "all.txt", 400, 0)
    lines = (root / "all.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    # The training text as a glob of two files, the second gzip: read as the one file would be.
    (root / "train-0.txt").write_text("".join(lines[:150]), encoding="utf-8")
    (root / "train-1.txt.gz").write_bytes(gzip.compress("".join(lines[150:]).encode("utf-8")))
    train, valid = str(root / "train-*"), write_text(root / "valid.txt", 40, 1)
    logdir, export_dir = str(root / "runs"), str(root / "export")
    metrics = language_model.main([
        "--train-txt", train, "--valid-txt", valid, "--logdir", logdir, "--export-dir", export_dir,
        "--vocab-size", "320", "--embed-dim", "16", "--units", "16", "--batch-size", "4",
        "--bptt", "10", "--epochs", "2", "--sample-length", "8",
    ])
    return dict(metrics=metrics, logdir=logdir, export_dir=export_dir)


@pytest.mark.e2e
def test_language_model_metrics(lm_run):
    with open(os.path.join(lm_run["logdir"], "metrics.json")) as f:
        saved = json.load(f)
    for key in ("test_perplexity", "baseline_test_perplexity", "valid_loss", "train_seconds"):
        assert np.isfinite(saved[key]), key
    # The words are drawn uniformly from 11 (plus the end of a line): a
    # model that learned them scores far below the vocabulary's ~300 pieces.
    assert 1 < saved["test_perplexity"] < 30
    assert len(saved["samples"]) == 3 and all("continuation" in s for s in saved["samples"])
    for run in ("tbptt", "independent_chunks"):
        assert os.listdir(os.path.join(lm_run["logdir"], run, "train"))
        assert os.listdir(os.path.join(lm_run["logdir"], run, "generation"))


@pytest.mark.e2e
def test_language_model_export_serves_without_kseq_and_matches_python(lm_run, tf_only):
    path = os.path.join(lm_run["export_dir"], "1")
    prompts = ["the lord said", "", "moses and"]
    served = tf_only.serve_texts(path, prompts)
    assert served["input"] == "prompt"
    # The Python model with the task's seeded sampler: the same continuations.
    model = keras.saving.load_model(os.path.join(lm_run["logdir"], "tbptt", "model.keras"))
    tokenizer = SubwordTokenizer.load(os.path.join(lm_run["logdir"], "spm.model"))
    ids = tokenizer.tokenize(prompts).to_tensor()
    expected = model.generate(ids, max_length=8, method="sample", temperature=0.8, top_k=40, seed=0).numpy()
    texts = [t.decode() for t in tokenizer.detokenize(expected).numpy()]
    for row in (0, 2):
        assert served["token_ids"][row][: len(expected[row])] == expected[row].tolist()
        assert served["continuation"][row] == texts[row]
    assert served["continuation"][1] == "" and set(served["token_ids"][1]) == {0}, "a blank prompt: nothing"


@pytest.mark.e2e
def test_language_model_export_reads_prompts_as_training_read_text(lm_run, tf_only):
    words = WORDS + ["café", "zoë"]
    check_served_text_is_normalized(tf_only, os.path.join(lm_run["export_dir"], "1"), words, "continuation")


@pytest.fixture(scope="module")
def classify_run(made_once):
    """The classifier run, made once a session (`made_once`): its tests only read it."""
    return made_once("classify", classifier_run)[1]


def classifier_run(root):
    rng = random.Random(0)
    good, bad = ["great", "moving", "funny", "superb"], ["dull", "boring", "awful", "flat"]
    lines = []
    for _ in range(300):
        label = rng.choice(["pos", "neg"])
        words = rng.choices(["the", "film", "was", "a", "plot"], k=4) + [
            rng.choice(good if label == "pos" else bad)]
        rng.shuffle(words)
        lines.append(" ".join(words) + "\t" + label)
    lines.insert(5, "a line without a label")
    # Two files joined by a comma, the second gzip: read as one file of their lines would be.
    (root / "train-a.tsv").write_text("\n".join(lines[:100]) + "\n", encoding="utf-8")
    (root / "train-b.tsv.gz").write_bytes(gzip.compress(("\n".join(lines[100:]) + "\n").encode("utf-8")))
    logdir, export_dir = str(root / "runs"), str(root / "export")
    argv = [
        "--train-tsv", f"{root / 'train-a.tsv'},{root / 'train-b.tsv.gz'}",
        "--logdir", logdir, "--export-dir", export_dir,
        "--vocab-size", "320", "--embed-dim", "16", "--units", "16", "--epochs", "8",
        "--dropout", "0.1", "--learning-rate", "0.01",
    ]
    metrics = classify.main(argv)
    return dict(metrics=metrics, logdir=logdir, export_dir=export_dir, argv=argv)


@pytest.mark.e2e
def test_classifier_metrics(classify_run):
    with open(os.path.join(classify_run["logdir"], "metrics.json")) as f:
        saved = json.load(f)
    assert saved["labels"] == ["neg", "pos"]
    assert saved["test_accuracy"] >= 0.9, saved
    assert os.listdir(os.path.join(classify_run["logdir"], "train"))
    # The run wrote the config that runs it again.
    config = os.path.join(classify_run["logdir"], "config.yaml")
    assert classify.parse_args(["--config", config]) == classify.parse_args(classify_run["argv"])
    again = classify.parse_args(["--config", config, "--epochs", "3"])
    assert again.epochs == 3 and "epochs" in again.options_given


@pytest.mark.e2e
def test_classifier_export_serves_without_kseq_and_matches_python(classify_run, tf_only):
    path = os.path.join(classify_run["export_dir"], "1")
    texts = ["the film was great", "boring plot", "", "   ", "\u0007 control ✓ ünïcode"]
    served = tf_only.serve_texts(path, texts)
    assert served["input"] == "text"
    probabilities = np.asarray(served["probabilities"])
    assert probabilities.shape == (5, 2)
    real = [0, 1, 4]
    np.testing.assert_allclose(probabilities[real].sum(axis=1), 1.0, atol=1e-5)
    assert served["label"][:2] == ["pos", "neg"]
    assert [served["label"][row] for row in real] == [["neg", "pos"][served["class_id"][row]] for row in real]
    # A blank text gets an empty answer.
    assert [served["label"][row] for row in (2, 3)] == ["", ""] and [served["class_id"][row] for row in (2, 3)] == [-1, -1]
    np.testing.assert_array_equal(probabilities[[2, 3]], 0.0)
    model = keras.saving.load_model(os.path.join(classify_run["logdir"], "model.keras"))
    tokenizer = SubwordTokenizer.load(os.path.join(classify_run["logdir"], "spm.model"))
    ids = tokenizer.tokenize([texts[row] for row in real]).to_tensor()
    expected = tf.nn.softmax(model(tf.pad(ids, [[0, 0], [0, 1]]))).numpy()
    np.testing.assert_allclose(probabilities[real], expected, atol=1e-5)


@pytest.mark.e2e
def test_classifier_export_reads_texts_as_training_read_text(classify_run, tf_only):
    words = ["the", "film", "was", "great", "dull", "café", "naïve", "plot"]
    check_served_text_is_normalized(tf_only, os.path.join(classify_run["export_dir"], "1"), words, "label")


def test_tasks_reject_bad_arguments(tmp_path, capsys):
    logdir_file = tmp_path / "file"
    logdir_file.write_text("x")
    cases = [
        (language_model, ["--train-txt", str(tmp_path / "missing.txt")], "no such file"),
        (language_model, ["--embed-dim", "8", "--units", "16"], "--embed-dim == --units"),
        (language_model, ["--logdir", str(logdir_file)], "not a directory"),
        (classify, ["--train-tsv", str(tmp_path / "missing.tsv")], "no such file"),
        (classify, ["--encoder", "transformer", "--pooling", "last"], "--pooling last"),
        (classify, ["--batch-size", "0"], "--batch-size must be >= 1"),
    ]
    for task, argv, message in cases:
        with pytest.raises(SystemExit):
            task.main(argv)
        assert message in capsys.readouterr().err, (task.__name__, argv)
