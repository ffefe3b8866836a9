"""kseq-train generate_reviews end to end on tiny labelled text, labelled
by an exported stand-in classifier; the fallback that trains one with
kseq-train classify is checked with classify.main replaced."""

import json
import os
import random

import keras
import pytest
import tensorflow as tf

from kseq.tasks import generate_reviews  # noqa: E402
from kseq.training import scoring  # noqa: E402

from kseq.data.subword_tokenizer import SubwordTokenizer  # noqa: E402
from kseq.errors import UsageError  # noqa: E402

GOOD, BAD = ["great", "moving", "funny", "superb"], ["dull", "boring", "awful", "flat"]


def write_reviews(path, lines, seed):
    """`text<TAB>label` lines: one word of the label's kind."""
    rng = random.Random(seed)
    rows = []
    for _ in range(lines):
        label = rng.choice(["pos", "neg"])
        rows.append(f"{rng.choice(GOOD if label == 'pos' else BAD)}\t{label}")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return str(path)


class WordClassifier(tf.Module):
    """A stand-in for the classifier task's export (same signature): "pos"
    when a text holds a GOOD word, else "neg" (or other names)."""

    def __init__(self, names=("neg", "pos")):
        super().__init__()
        self.names = names

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def classify(self, text):
        good = tf.strings.regex_full_match(text, f".*\\b({'|'.join(GOOD)})\\b.*")
        return {"label": tf.where(good, self.names[1], self.names[0])}


def export_word_classifier(folder, names=("neg", "pos")):
    module = WordClassifier(names)
    tf.saved_model.save(module, os.path.join(folder, "1"), signatures={"serving_default": module.classify})


@pytest.fixture(scope="module")
def run(made_once):
    """The reviews run, made once a session (`made_once`): its tests only read it."""
    return made_once("reviews", reviews_run)[1]


def reviews_run(root):
    train, valid = write_reviews(root / "train.tsv", 640, 0), write_reviews(root / "valid.tsv", 40, 1)
    logdir, export_dir, classifier = (str(root / name) for name in ("runs", "export", "classifier"))
    export_word_classifier(classifier)
    metrics = generate_reviews.main([
        "--train-tsv", train, "--valid-tsv", valid, "--logdir", logdir, "--export-dir", export_dir,
        "--classifier-export", classifier, "--vocab-size", "330", "--embed-dim", "16",
        "--units", "48", "--dropout", "0", "--epochs", "4", "--learning-rate", "0.03",
        "--clipnorm", "10", "--batch-size", "32", "--samples-per-class", "20",
        "--sample-length", "16", "--temperature", "0.3", "--top-k", "3",
    ])
    return dict(metrics=metrics, logdir=logdir, export_dir=export_dir, classifier=classifier)


pytestmark = pytest.mark.long


@pytest.mark.e2e
def test_metrics_report_label_agreement(run):
    with open(os.path.join(run["logdir"], "metrics.json")) as f:
        saved = json.load(f)
    assert saved == json.loads(json.dumps(run["metrics"]))
    assert saved["labels"] == ["neg", "pos"]
    assert saved["classifier"] == os.path.join(run["classifier"], "1")
    assert not saved["classifier_trained_here"]
    assert saved["classifier_test_accuracy"] == 1.0
    # The last word decides the label: a generator that learned
    # p(text | label) writes the right kind; one that ignores it gets ~50%.
    assert set(saved["agreement"]) == {"neg", "pos"}
    assert saved["agreement_overall"] >= 0.8, saved
    assert all(len(texts) == 5 for texts in saved["samples"].values())
    assert 1 < saved["test_perplexity"] < 20
    assert saved["known_word_rate_real_test"] == 1.0 and saved["known_word_rate"] >= 0.8, saved
    for folder in ("train", "validation", "generation", "agreement", "test"):
        assert os.listdir(os.path.join(run["logdir"], folder)), folder
    assert any(name.startswith("events.out") for name in os.listdir(run["logdir"])), "HParams in the run's folder"


@pytest.mark.e2e
def test_export_serves_labels_without_kseq_and_matches_the_model(run, tf_only):
    path = os.path.join(run["export_dir"], "1")
    served = tf_only.serve_texts(path, ["pos", "neg", "pos"])
    assert served["input"] == "label" and served["class_id"] == [1, 0, 1]
    model = keras.saving.load_model(os.path.join(run["logdir"], "model.keras"))
    tokenizer = SubwordTokenizer.load(os.path.join(run["logdir"], "spm.model"))
    expected = model.generate([1, 0, 1], max_length=16, method="sample", temperature=0.3, top_k=3,
                              seed=0, no_repeat_ngram_size=3)
    assert served["token_ids"] == expected.numpy().tolist()
    assert served["text"] == [t.decode() for t in tokenizer.detokenize(expected).numpy()]


@pytest.mark.e2e
def test_the_export_reads_labels_as_training_read_text(run, tf_only):
    """A label with tabs, spaces or newlines around it is the label; a blank
    one gets an empty answer; the other rows are as if it were not there."""
    path = os.path.join(run["export_dir"], "1")
    sent, clean = ["\tpos ", "neg\n", "\u00a0pos", "   ", ""], ["pos", "neg", "pos", "pos", "pos"]
    messy, plain = tf_only.serve_text_batches(path, [sent, clean])
    assert messy["class_id"] == [1, 0, 1, -1, -1] and messy["text"][3:] == ["", ""]
    assert messy["text"][:3] == plain["text"][:3] and all(messy["text"][:3])


def test_agreement_and_known_words_count_what_they_say():
    per_class, overall = scoring.agreement(
        ["a", "b", "a", "b"], ["a", "a", "b", "b"], ["a", "b", "c"])
    assert per_class == {"a": 0.5, "b": 0.5} and overall == 0.5
    rate = scoring.known_word_rate(["So great, it's GREAT", "zzq"], {"so", "great", "it's"})
    assert rate == 0.8


def test_classifier_export_is_reused_when_present(tmp_path, monkeypatch):
    for version in ("1", "3", "7"):  # 7 is incomplete: no saved_model.pb
        os.makedirs(tmp_path / "cls" / version)
        if version != "7":
            (tmp_path / "cls" / version / "saved_model.pb").write_bytes(b"")
    monkeypatch.setattr(generate_reviews.classify, "main", lambda argv: pytest.fail("trained"))
    options = generate_reviews.Options(classifier_export=str(tmp_path / "cls"))
    assert generate_reviews.classifier_path(options) == (str(tmp_path / "cls" / "3"), 0.0)


def test_without_an_export_the_classifier_task_trains_one(tmp_path, monkeypatch):
    calls = []

    def train_classifier(argv):
        calls.append(argv)
        export_word_classifier(argv[argv.index("--export-dir") + 1])

    monkeypatch.setattr(generate_reviews.classify, "main", train_classifier)
    options = generate_reviews.Options(classifier_export=str(tmp_path / "cls"), logdir=str(tmp_path / "runs"),
                                       train_tsv="my.tsv", classifier_args="--epochs 1 --units 8")
    path, seconds = generate_reviews.classifier_path(options)
    assert path == str(tmp_path / "cls" / "1") and seconds > 0
    (argv,) = calls
    assert argv[:4] == ["--epochs", "1", "--units", "8"]
    for option, value in [("--export-dir", str(tmp_path / "cls")), ("--train-tsv", "my.tsv"),
                          ("--logdir", str(tmp_path / "runs" / "classifier"))]:
        assert argv[argv.index(option) + 1] == value
    assert "--valid-tsv" not in argv


def test_a_classifier_of_other_labels_stops_the_run_before_training(tmp_path):
    export_word_classifier(str(tmp_path / "cls"), names=("rotten", "fresh"))
    train = write_reviews(tmp_path / "train.tsv", 40, 0)
    with pytest.raises(UsageError, match=r"labels texts \['fresh', 'rotten'\], which this data's "
                                         r"labels \['neg', 'pos'\] do not include"):
        generate_reviews.main(["--train-tsv", train, "--classifier-export", str(tmp_path / "cls"),
                               "--logdir", str(tmp_path / "runs"), "--vocab-size", "300"])
    assert not os.path.exists(tmp_path / "runs" / "checkpoints"), "stopped before training"


def test_bad_arguments_exit_with_usage(tmp_path, capsys):
    cases = [
        (["--samples-per-class", "0"], "--samples-per-class must be >= 1"),
        (["--train-tsv", str(tmp_path / "missing.tsv")], "no such file"),
        (["--cell", "transformer"], "invalid choice"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit):
            generate_reviews.main(argv)
        assert message in capsys.readouterr().err, argv


@pytest.mark.slow  # 4-7 minutes: the real snippets, a classifier trained first
def test_real_snippets_follow_their_label(tmp_path):
    """The default data and model for 2 minutes: the classifier task's
    export labels most generated snippets as the requested class (measured
    2026-11-24: 83.5% after the default 5 minutes, 81% after these 2 on an
    idle machine; 66.5% in 327 steps beside other slow tests, rotten 38%
    and fresh 95%).

    The label's effect is what shows the condition is followed: how much
    more often a snippet asked to be rotten is classified rotten than one
    asked to be fresh (0 for a generator that ignores its label, whatever
    the classifier leans to; 0.33 in the loaded run above)."""
    metrics = generate_reviews.main([
        "--logdir", str(tmp_path / "runs"), "--export-dir", str(tmp_path / "export"),
        "--classifier-export", str(tmp_path / "classifier"), "--max-minutes", "2",
    ])
    assert metrics["classifier_trained_here"] and metrics["classifier_test_accuracy"] > 0.7
    assert metrics["test_perplexity"] < 150, metrics["test_perplexity"]
    agreement = metrics["agreement"]
    assert metrics["agreement_overall"] >= 0.6, agreement
    assert agreement["rotten"] - (1 - agreement["fresh"]) >= 0.2, agreement
    assert metrics["known_word_rate"] > 0.85 and metrics["copied_from_train"] < 0.05
