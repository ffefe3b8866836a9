"""kseq-train translate end to end on a tiny TSV: logs, metrics, export."""

import contextlib
import dataclasses
import functools
import importlib.util
import io
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_multiplexer

from kseq.cli import servable, translate as translate_command  # noqa: E402
from kseq.data.tokenizers import tokenizer_files  # noqa: E402
from kseq.decoding import length_penalty  # noqa: E402
from kseq.export import export_translator  # noqa: E402
from kseq.tasks import translate  # noqa: E402
from kseq.training.scoring import DecodingSettings  # noqa: E402
from kseq.data.bucketing import bucketed_pair_dataset, xla_boundaries  # noqa: E402
from kseq.training.devices.distribution import weights_fingerprint  # noqa: E402
from kseq.training.scoring.evaluation import looping_outputs  # noqa: E402
from kseq.training.devices.precision import MEASURED_FASTEST, precision_class  # noqa: E402
from support import check_served_text_is_normalized, subprocess_env  # noqa: E402

from kseq.data.subword_tokenizer import SubwordTokenizer  # noqa: E402

pytestmark = pytest.mark.long
WORDS = {"cat": "chat", "dog": "chien", "house": "maison", "red": "rouge", "blue": "bleu",
         "small": "petit", "big": "grand", "the": "le", "runs": "court", "eats": "mange"}
# 300 pairs make 5 batches an epoch: 10 steps, evaluated at steps 5 and 10.
TINY = ["--num-layers", "1", "--d-model", "32", "--num-heads", "2", "--ff-dim", "64",
        "--vocab-size", "300", "--epochs", "2", "--token-budget", "512", "--max-length", "24",
        "--eval-sentences", "6", "--attention-plots", "2", "--beam-size", "2",
        "--eval-every", "5", "--jit-compile", "off", "--snapshot-every", "2",
        "--average-snapshots", "4"]


def write_pairs(path, count, seed, bad_lines=()):
    rng = random.Random(seed)
    lines = []
    for _ in range(count):
        words = rng.choices(list(WORDS), k=rng.randint(2, 6))
        lines.append(" ".join(words) + "\t" + " ".join(WORDS[w] for w in words))
    for index, line in bad_lines:
        lines.insert(index, line)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def run(made_once):
    """The TINY run, made once a session (`made_once`): its tests only read it."""
    root, made = made_once("translate", translate_run)
    return dict(made, root=root)


def translate_run(root):
    train = write_pairs(root / "train.tsv", 300, 0, bad_lines=[(3, "no tab here"), (7, "\tempty source")])
    valid = write_pairs(root / "valid.tsv", 12, 1)
    logdir, export_dir = str(root / "runs"), str(root / "export")
    ctranslate2 = ["--export-ctranslate2", str(root / "ct2")] if importlib.util.find_spec("ctranslate2") else []
    metrics = translate.main(
        ["--train-tsv", train, "--valid-tsv", valid, "--logdir", logdir, "--export-dir", export_dir] + TINY
        + ctranslate2
    )
    return dict(metrics=metrics, logdir=logdir, export_dir=export_dir)


def test_metrics_json(run):
    with open(os.path.join(run["logdir"], "metrics.json")) as f:
        saved = json.load(f)
    assert saved == json.loads(json.dumps(run["metrics"]))
    for key in ("test_bleu", "test_chrf", "valid_loss", "train_seconds", "steps"):
        assert isinstance(saved[key], (int, float)) and np.isfinite(saved[key]), key
    assert saved["bleu_signature"].startswith("nrefs:1|") and saved["epochs_run"] == 2
    assert saved["steps"] == 10 and saved["evaluations"] == 2
    # What ran, and where the time went.
    assert saved["precision"] == MEASURED_FASTEST[precision_class()][0] and saved["jit_compile"] is False
    assert saved["eval_every"] == "every 5 steps"
    assert 0 < saved["train_step_seconds"] <= saved["fit_seconds"] <= saved["wall_seconds"]
    assert saved["train_step_share"] == round(saved["train_step_seconds"] / saved["wall_seconds"], 3)
    assert os.path.isfile(os.path.join(run["logdir"], "spm.model"))
    assert os.path.isfile(os.path.join(run["logdir"], "checkpoints", "last.weights.h5"))
    # Short word-for-word targets (median 3 words): exact match chooses.
    assert saved["metric"] == "exact_match" and "median of 3 words" in saved["metric_reason"]
    assert saved["lr_scale"] == 0.5 and saved["lr_scale_reason"] == "auto: exact_match data"
    # The default anneal, planned from the 6-minute budget's speed: the 10 steps end before its first
    # estimate (a twentieth of the budget), so the rate stays the schedule's.
    assert saved["lr_anneal"] == 0.2 and saved["lr_anneal_total_steps"] is None
    assert saved["lr_anneal_estimates"] == []
    assert saved["lr_anneal_reason"].startswith("linear to 0 over the last 20% of the steps the 6-minute")
    assert saved["vocab_size"] == 298
    # --epochs 2 end training before the minutes: 2 passes; the widths given stay.
    assert saved["expected_passes"] == 2.0 and saved["train_target_tokens"] > 298
    assert saved["model_size"] == dict(d_model=32, num_heads=2, ff_dim=64, dropout=0.0)
    assert "exact match" in saved["model_size_reason"]
    assert saved["model_size_options_given"] == ["d_model", "ff_dim", "num_heads", "num_layers"]
    assert 0 <= saved["test_exact_match"] <= 100
    # Every test output beside its source and reference; the looping ones counted.
    with open(os.path.join(run["logdir"], "test_translations.tsv"), encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f]
    assert rows[0] == ["source", "output", "reference"] and len(rows) == saved["test_sentences"] + 1
    assert all(len(row) == 3 for row in rows)
    assert saved["test_looping_outputs"] == looping_outputs([row[1] for row in rows[1:]])
    # Snapshots every 2 steps, the last 4 averaged and kept if they score better.
    averaging = saved["averaging"]
    assert averaging["steps"] == [4, 6, 8, 10] and isinstance(averaging["averaged"], bool)
    better = averaging["score_averaged"] > averaging["score_before"]
    assert averaging["averaged"] == better


def test_decoding_settings_are_chosen_on_validation_pairs(run):
    saved = run["metrics"]
    table = saved["decoding_candidates"]
    settings = ("beam_size", "length_penalty", "no_repeat_ngram", "max_ngram_count")
    assert [tuple(row[name] for name in settings) for row in table] == [
        (2, penalty, *ngram) for penalty in (0.6, 1.0, 1.5, 2.0) for ngram in ((4, 2), (3, 1))
    ], "--beam-size 2 given, the rest tuned: the penalty, and the loop guard or no 3-gram twice"
    best = max(table, key=lambda row: row["exact_match"])  # max keeps the first of ties
    assert saved["decoding"] == {name: best[name] for name in settings + ("max_length_ratio", "patience")}
    assert saved["decoding"]["patience"] == 1.0  # CTranslate2's stop unless --beam-patience
    ratio = saved["decoding"]["max_length_ratio"]
    assert {row["max_length_ratio"] for row in table} == {ratio}
    assert 0.1 <= ratio <= 3.0 and "1.5x the smallest that fits" in saved["max_length_ratio_reason"]


def test_the_best_evaluation_is_kept_and_restored(run):
    kept = run["metrics"]["best_weights"]
    assert kept["monitor"] == "val_exact_match" and kept["evaluations"] == 2
    assert kept["best_step"] in (5, 10)
    runs = event_multiplexer.EventMultiplexer()
    runs.AddRunsFromDirectory(run["logdir"])
    runs.Reload()
    import tensorflow as tf

    curve = {e.step: float(tf.make_ndarray(e.tensor_proto))
             for e in runs.Tensors("generation", "exact_match")}
    assert kept["best"] == pytest.approx(max(curve.values()), abs=1e-4)
    assert kept["best_step"] == min(step for step, value in curve.items() if value == max(curve.values()))
    # A second evaluation more than 2% below the first takes training back, at half the rate.
    fell = curve[10] < 0.98 * curve[5]
    assert (kept["reverts"], kept["lr_factor"]) == ((1, 0.5) if fell else (0, 1.0))
    model = restored_model(run, "trained.weights.h5")
    assert weights_fingerprint(model) == run["metrics"]["weights_sha256"], "tested and exported"
    last = weights_fingerprint(restored_model(run, "checkpoints/last.weights.h5"))  # step 10's
    assert (last == run["metrics"]["weights_sha256"]) == (kept["best_step"] == 10)


def restored_model(run, name):
    return restored(run["logdir"], name)


@functools.cache
def restored(logdir, name):
    """The TINY model with the weights file `name` of `logdir`: built once
    a worker (and its search traced once), as no test changes it."""
    tokenizer = SubwordTokenizer.load(os.path.join(logdir, "spm.model"))
    options = translate.parse_args(TINY)
    model = options.build(tokenizer.vocab_size, options.max_length + 1)
    model._ensure_built()
    model.load_weights(os.path.join(logdir, name))
    return model


def test_tensorboard_events_hold_curves_text_images_graph_and_hparams(run):
    runs = event_multiplexer.EventMultiplexer()
    runs.AddRunsFromDirectory(run["logdir"])
    runs.Reload()
    tags = {name: {kind: value for kind, value in found.items() if value} for name, found in runs.Runs().items()}
    for tag in ("epoch_loss", "epoch_masked_accuracy", "epoch_perplexity", "epoch_learning_rate"):
        assert tag in tags["train"]["tensors"]
        steps = [event.step for event in runs.Tensors("train", tag)]
        assert steps == [5, 10], "one point per evaluation, at its global step"
    for tag in ("epoch_loss", "epoch_bleu", "epoch_chrf"):
        assert tag in tags["validation"]["tensors"]
        assert [event.step for event in runs.Tensors("validation", tag)] == [5, 10]
    for tag in ("loss", "learning_rate", "tokens_per_second", "global_norm"):
        steps = [event.step for event in runs.Tensors("train", tag)]
        assert steps == list(range(1, 11)), "a point a step in a run of 10 (auto)"
    tokens = [float(tf.make_ndarray(event.tensor_proto)) for event in runs.Tensors("train", "tokens_per_second")]
    assert all(value > 0 for value in tokens)
    # Streamed pairs: the length comes from the share of the data read by the first save (step 5's).
    assert run["metrics"]["log_every"] == 1 and "~10 steps expected" in run["metrics"]["log_every_reason"]
    assert {"bleu", "chrf", "samples"} <= set(tags["generation"]["tensors"])
    sample = runs.Tensors("generation", "samples")[-1].tensor_proto.string_val[0].decode()
    assert "| source | output | reference |" in sample
    image = runs.Tensors("attention", "sentence_0")[-1].tensor_proto.string_val
    assert image[2].startswith(b"\x89PNG"), "an encoded PNG heatmap"
    assert tags["graph"]["graph"] is True
    assert "_hparams_/session_start_info" in tags["."]["tensors"], "settings in the run's own folder"
    assert {"bleu", "chrf", "exact_match"} <= set(tags["test"]["tensors"])


def test_export_serves_with_tensorflow_and_text_only_and_matches_python(run, tf_only):
    versions = os.listdir(run["export_dir"])
    assert versions == ["1"]
    path = os.path.join(run["export_dir"], "1")
    assert os.path.isfile(os.path.join(path, "assets", "spm.model"))
    sources = ["the red cat", "", "   ", "big " * 200, "zoë eats"]
    served = tf_only.serve_texts(path, sources)
    assert served["input"] == "source"
    assert len(served["translation"]) == len(sources), "every input gets an output"
    # The same beam search in Python on the same (truncated) source ids.
    tokenizer = SubwordTokenizer.load(os.path.join(run["logdir"], "spm.model"))
    model = restored_model(run, "trained.weights.h5")
    decoding = run["metrics"]["decoding"]
    ids = tokenizer.tokenize(sources[:1]).to_tensor()
    expected = model.generate(ids, max_length=24, method="beam", beam_size=decoding["beam_size"],
                              length_penalty=decoding["length_penalty"],
                              no_repeat_ngram_size=decoding["no_repeat_ngram"],
                              max_ngram_count=decoding["max_ngram_count"],
                              max_length_ratio=decoding["max_length_ratio"])
    assert served["token_ids"][0][: np.asarray(expected).shape[1]] == np.asarray(expected)[0].tolist()


def test_the_run_writes_a_ctranslate2_model_that_decodes_as_its_weights(run):
    ctranslate2 = pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed")
    import sentencepiece

    path = os.path.join(run["root"], "ct2", "1")
    processor = sentencepiece.SentencePieceProcessor(model_file=os.path.join(path, "spm.model"))
    model, tokenizer = translate.trained_model(run["logdir"])
    sources = ["the red cat", "big dog eats the small house", "blue"]
    expected = np.asarray(model.generate(tokenizer.tokenize(sources).to_tensor(), max_length=24)).tolist()
    expected = [row[: row.index(2)] if 2 in row else row for row in expected]  # up to EOS
    results = ctranslate2.Translator(path).translate_batch(
        [processor.encode(source, out_type=str) for source in sources], beam_size=1, min_decoding_length=0,
        max_decoding_length=24)
    assert [[processor.piece_to_id(t) for t in r.hypotheses[0]] for r in results] == expected


def test_the_export_reads_requests_as_training_read_text(run, tf_only):
    """NFC or NFD accents, tabs, newlines and runs of spaces: one translation;
    a blank request: ""."""
    words = list(WORDS) + ["café", "zoë", "naïve", "Ångström"]
    check_served_text_is_normalized(tf_only, os.path.join(run["export_dir"], "1"), words, "translation")


@pytest.fixture(scope="module")
def penalized(run, tmp_path_factory):
    """The run's model exported as the run exports it, with the decoding it
    chose (its beam, patience, n-gram limit and length ratio) but the length
    penalty the Bible run tuned, 2.0 (a penalty other than the default, with
    which a search that drops the patience runs on to the length limit)."""
    settings = dataclasses.replace(DecodingSettings(**run["metrics"]["decoding"]), length_penalty=2.0)
    model, tokenizer = translate.trained_model(run["logdir"])
    folder = str(tmp_path_factory.mktemp("penalized") / "translate")
    export_translator(model, tokenizer, tokenizer, folder, search=settings.search(24), max_source_length=24,
                      assets=tokenizer_files(tokenizer))
    return dict(settings=settings, model=model, tokenizer=tokenizer, folder=folder)


def test_every_signature_decodes_with_the_runs_settings(run, penalized, tmp_path, monkeypatch):
    """For every test source: `n_best`'s first translation and score are
    `serving_default`'s, `alignment` aligns that translation, and
    `kseq-translate --n-best 2`'s first line is `--scores`'. Every
    hypothesis keeps the run's n-gram limit, and every score is the
    hypothesis' log-probability over the run's length penalty."""
    import tensorflow as tf

    settings, model, tokenizer = penalized["settings"], penalized["model"], penalized["tokenizer"]
    assert settings.beam_size == 2 and settings.patience == 1.0 and settings.no_repeat_ngram > 0
    with open(os.path.join(run["logdir"], "test_translations.tsv"), encoding="utf-8") as f:
        tested = [line.split("\t")[0] for line in f][1:]  # outputs may hold \x1e: no splitlines
    sources = tested + ["", "big dog " * 20]  # a blank request, an over-long one
    monkeypatch.setattr(servable, "load_signatures", functools.cache(servable.load_signatures))  # loaded once
    signatures = servable.load_signatures(os.path.join(penalized["folder"], "1"))  # as kseq-translate names it
    best, n_best, aligned = ({key: value.numpy() for key, value in signature(source=tf.constant(sources)).items()}
                             for signature in map(signatures.get, ("serving_default", "n_best", "alignment")))
    assert n_best["translations"].shape == (len(sources), 4)
    assert n_best["translations"][:, 0].tolist() == best["translation"].tolist()
    assert n_best["scores"][:, 0].tolist() == best["score"].tolist()
    assert aligned["translation"].tolist() == best["translation"].tolist()
    assert aligned["token_ids"].tolist() == best["token_ids"].tolist()
    # One scale: log P(hypothesis) / ((5 + |Y|) / 6) ** 2.0, |Y| counting EOS.
    source_ids = tokenizer.tokenize(tested)[:, :24].to_tensor()
    for rank in range(4):
        ids = n_best["token_ids"][: len(tested), rank]
        ended = (ids == 2).any(axis=1)  # model.score counts an EOS: the hypotheses that end with one
        assert ended.any(), rank
        log_p = model.score(source_ids, np.where(ids == 2, 0, ids)).numpy()
        expected = log_p / length_penalty((ids != 0).sum(axis=1), settings.length_penalty).numpy()
        scores = n_best["scores"][: len(tested), rank]
        np.testing.assert_allclose(scores[ended], expected[ended], rtol=1e-4, atol=1e-4)
        size = settings.no_repeat_ngram
        for row in ids:
            tokens = row[row != 0].tolist()
            grams = [tuple(tokens[i: i + size]) for i in range(len(tokens) - size + 1)]
            assert max(map(grams.count, grams), default=0) <= settings.max_ngram_count, (rank, tokens)
    lines = tmp_path / "sources.txt"
    lines.write_text("\n".join(tested) + "\n", encoding="utf-8")

    def command(*options):
        out = tmp_path / "out.txt"
        translate_command.main(["--model", penalized["folder"], "--input", str(lines), "--output", str(out),
                                "--scores", *options])
        return out.read_text(encoding="utf-8").split("\n")[:-1]

    scored = command()
    assert scored == [f"{score:.4f}\t{text.decode()}" for score, text in
                      zip(best["score"][: len(tested)], best["translation"][: len(tested)])]
    assert command("--n-best", "2")[::2] == scored


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def second_run(run, made_once):
    """The same pairs, greedy decoding and another seed, beside the first run
    (in its folder, once a session: `made_once`'s own folder stays empty).
    Its decoding is given whole (no loop guard), so it tunes none: the test
    reads its curves, settings and scores, not its decoding. It turns the
    learning rate's default anneal off (`--anneal 0`)."""
    return made_once("translate-greedy", lambda _: greedy_run(run["root"]))[1]


def greedy_run(root):
    argv = ["--train-tsv", str(root / "train.tsv"), "--valid-tsv", str(root / "valid.tsv"),
            "--logdir", str(root / "greedy"), "--export-dir", str(root / "export-greedy"), "--seed", "1"]
    # No attention maps: the test reads the first run's (drawing them took about 2 s of this run).
    return translate.main(argv + TINY[: TINY.index("--beam-size")] + [
        "--beam-size", "1", "--eval-every", "5", "--jit-compile", "off", "--no-repeat-ngram", "0",
        "--attention-plots", "0", "--anneal", "0"])


def tensorboard_json(port, path, body=None):
    """TensorBoard's HTTP data API: GET `path`, or POST `body` as JSON."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


@pytest.mark.e2e
def test_tensorboard_shows_curves_samples_attention_and_hparams_of_two_runs(run, second_run):
    """A real TensorBoard over the folder of two runs, read through its own
    HTTP data API as its dashboards read it."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(run["root"]), "--host", "127.0.0.1",
         "--port", str(port), "--reload_interval", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline, runs = time.time() + 120, {}
        while time.time() < deadline and not {"runs/test", "greedy/test"} <= set(runs):
            try:
                runs = tensorboard_json(port, "/data/plugin/scalars/tags")
            except (OSError, ValueError):
                time.sleep(1)
        assert {"runs/test", "greedy/test"} <= set(runs), f"tensorboard did not list both runs: {sorted(runs)}"
        for name in ("runs", "greedy"):
            for curve in ("train", "validation"):
                points = tensorboard_json(port, f"/data/plugin/scalars/scalars?run={name}/{curve}&tag=epoch_loss")
                assert [step for _, step, _ in points] == [5, 10] and all(np.isfinite(v) for _, _, v in points)
            scores = tensorboard_json(port, f"/data/plugin/scalars/scalars?run={name}/generation&tag=chrf")
            assert len(scores) == 2, "a score curve: one point per evaluation"
        text = tensorboard_json(port, "/data/plugin/text/text?run=runs/generation&tag=samples")
        assert "source" in text[-1]["text"] and "reference" in text[-1]["text"]
        images = tensorboard_json(port, "/data/plugin/images/images?run=runs/attention&tag=sentence_0")
        assert images and images[-1]["step"] == 10, "an attention map at each evaluation"
        experiment = tensorboard_json(port, "/data/plugin/hparams/experiment", {"experimentName": ""})
        settings = {info["name"] for info in experiment["hparamInfos"]}
        assert {"beam_size", "seed", "d_model", "metric", "model_size"} <= settings
        metrics = {(m["name"]["group"], m["name"]["tag"]) for m in experiment["metricInfos"]}
        assert {("test", "bleu"), ("test", "chrf"), ("validation", "epoch_loss"), ("generation", "chrf")} <= metrics
        groups = tensorboard_json(port, "/data/plugin/hparams/session_groups", {
            "experimentName": "", "startIndex": 0, "sliceSize": 10, "colParams": [],
            "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"]})
        sessions = {group["sessions"][0]["name"]: group for group in groups["sessionGroups"]}
        assert set(sessions) == {"runs", "greedy"}
        assert sessions["greedy"]["hparams"]["beam_size"] == 1 and sessions["runs"]["hparams"]["beam_size"] == 2
        assert sessions["greedy"]["hparams"]["lr_anneal"] == 0.0 and sessions["runs"]["hparams"]["lr_anneal"] == 0.2
        assert second_run["lr_anneal_reason"] == "--anneal 0: the rate is not annealed"
        for name, metrics_json in (("runs", run["metrics"]), ("greedy", second_run)):
            values = {(m["name"]["group"], m["name"]["tag"]): m["value"] for m in sessions[name]["metricValues"]}
            assert values[("test", "chrf")] == pytest.approx(metrics_json["test_chrf"], abs=0.01)
            assert values[("validation", "epoch_loss")] == pytest.approx(metrics_json["valid_loss"], rel=1e-4)
    finally:
        server.kill()
        server.wait(timeout=30)


@pytest.mark.slow  # tests/training/config/test_warm_start.py covers --init-from in the default suite
def test_init_from_starts_from_the_runs_weights_and_accumulate_counts_updates(run, tmp_path):
    """A run from the first one's logdir, at a learning rate too small to
    move its weights: it starts where the first one ended, with its sizes
    and tokenizer; 5 batches with --accumulate 2 make 2 updates."""
    root = run["root"]
    architecture = ("--num-layers", "--d-model", "--num-heads", "--ff-dim")
    kept = [arg for i, arg in enumerate(TINY) if arg not in architecture and TINY[i - 1] not in architecture]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        metrics = translate.main(kept + [
            "--train-tsv", str(root / "train.tsv"), "--valid-tsv", str(root / "valid.tsv"), "--logdir",
            str(tmp_path / "tuned"), "--export-dir", str(tmp_path / "export-tuned"), "--init-from", run["logdir"],
            "--learning-rate", "1e-9", "--epochs", "1", "--accumulate", "2", "--beam-size", "1"])
    assert f"init from {run['logdir']}: its weights and tokenizer; --arch transformer" in printed.getvalue()
    assert metrics["model_size"] == run["metrics"]["model_size"] and metrics["vocab_size"] == 298
    assert (tmp_path / "tuned" / "spm.model").read_bytes() == (root / "runs" / "spm.model").read_bytes()
    assert (metrics["steps"], metrics["epochs_run"]) == (2, 1.0)
    tuned, first = (restored_model(dict(logdir=str(folder)), "trained.weights.h5")
                    for folder in (tmp_path / "tuned", root / "runs"))
    for mine, theirs in zip(tuned.weights, first.weights):
        np.testing.assert_allclose(np.asarray(mine), np.asarray(theirs), atol=1e-6)


def test_task_rejects_bad_arguments(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cases = [
        (["--train-tsv", str(tmp_path / "missing.tsv")], "--train-tsv .*missing.tsv: no such file"),
        (["--logdir", str(blocker)], "--logdir .* exists and is not a directory"),
        (["--token-budget", "8", "--max-length", "16"], "--token-budget must be >= --max-length"),
        (["--length-penalty", "high"], "--length-penalty: invalid auto or float value: 'high'"),
        (["--no-repeat-ngram", "-1"], "--no-repeat-ngram must be auto or >= 0"),
        (["--patience", "-2"], "--patience must be >= 0"),
        (["--beam-size", "0"], "--beam-size must be auto or >= 1"),
        (["--metric", "rouge"], "--metric: invalid choice: 'rouge'"),
        (["--export-ctranslate2", "ct2", "--arch", "rnn"], "--export-ctranslate2 needs --arch transformer"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit):
            translate.parse_args(argv)
        assert __import__("re").search(message, capsys.readouterr().err), message


@pytest.mark.parametrize("argv, share", [([], 0.2), (["--anneal", "0"], 0.0), (["--preset", "gpu"], 0.0),
                                         (["--arch", "rnn"], 0.0), (["--arch", "rnn", "--anneal", "0.3"], 0.3)])
def test_the_transformers_quick_preset_anneals_by_default(argv, share):
    assert translate.parse_args(argv).anneal == share


def test_saved_model_cli_runs_the_export(run):
    """saved_model_cli itself, with tensorflow_text's ops registered first
    (the stock entry point does not load them; TF Serving links them in)."""
    path = os.path.join(run["export_dir"], "1")
    launcher = ("import sys, tensorflow_text; from tensorflow.python.tools import saved_model_cli; "
                "sys.argv[0] = 'saved_model_cli'; saved_model_cli.main()")
    result = subprocess.run(
        [sys.executable, "-c", launcher, "run", "--dir", path, "--tag_set", "serve",
         "--signature_def", "serving_default", "--input_exprs", 'source=["the red cat"]'],
        capture_output=True, text=True, timeout=300, env=subprocess_env(),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Result for output key translation:" in result.stdout


@pytest.mark.slow  # 70 s, and XLA is off for training on a CPU (kseq.training.devices.xla)
def test_xla_trains_every_pair_in_few_shapes_and_repeated_or_resumed_runs_compile_nothing(tmp_path):
    """--jit-compile on (XLA on a CPU): coarse buckets whose last batch is
    padded, so an epoch trains every pair in one shape per bucket. The
    compiled programs go to --xla-cache; the same command run again (into a
    new logdir), killed after a save and started once more, loads every one
    of them instead of compiling. In subprocesses: TensorFlow reads the
    cache flag when it starts, and logs what its persistent cache loads and
    saves."""
    train = write_pairs(tmp_path / "train.tsv", 300, 0)
    valid = write_pairs(tmp_path / "valid.tsv", 12, 1)
    cache = tmp_path / "xla"

    def argv(name):
        return ["--train-tsv", train, "--valid-tsv", valid, "--logdir", str(tmp_path / name),
                "--export-dir", str(tmp_path / f"export-{name}"), "--max-test-sentences", "2",
                "--xla-cache", str(cache), "--save-every", "2", "--length-penalty", "0.6",
                "--no-repeat-ngram", "0"] + TINY[:-2] + ["--jit-compile", "on"]

    # The tests' two logical CPUs cannot hold XLA replicas: a named error.
    with pytest.raises(SystemExit, match="--jit-compile on cannot train 2 replicas on CPU"):
        translate.main(argv("refused"))
    kseq_train = os.path.join(os.path.dirname(sys.executable), "kseq-train")
    command = lambda name: [kseq_train, "translate", *argv(name), "--strategy", "default"]  # noqa: E731
    environment = {k: v for k, v in os.environ.items() if k != "TF_XLA_FLAGS"}
    environment.update(TF_CPP_MIN_LOG_LEVEL="0", TF_CPP_VMODULE="device_executable_persistor=3")

    def programs(log, verb):
        return sorted(set(re.findall(verb + r" ?(__inference_[\w<>]+?)_\d+\[", log)))

    def run(name):
        result = subprocess.run(command(name), capture_output=True, text=True, timeout=600, env=environment)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        with open(tmp_path / name / "metrics.json") as f:
            metrics = json.load(f)
        return result, metrics

    result, metrics = run("first")
    assert "jit_compile: True (asked for); compiled programs cached in" in result.stdout
    assert metrics["jit_compile"] is True and metrics["jit_compile_requested"] == "on"
    compiled = programs(result.stderr, "Serializing and saving cache entry:")
    assert compiled == ["__inference_<lambda>", "__inference_one_step_on_data"], "train, test, decoding"
    options = translate.parse_args(argv("first"))
    tokenizer = SubwordTokenizer.load(str(tmp_path / "first" / "spm.model"))
    sources, targets = translate.load_data(options)["train"].sample  # the whole corpus: it is small
    data, report = bucketed_pair_dataset(
        sources, targets, tokenizer, tokenizer, token_budget=options.token_budget,
        max_length=options.max_length, boundaries=xla_boundaries(options.max_length),
        pad_remainder=True, shuffle=False)
    shapes = {tuple(labels.shape) for _, labels in data}
    assert metrics["batch_shapes"] == report.batch_shapes == len(shapes) <= 2
    assert sum(int(np.count_nonzero(labels.numpy().any(axis=1))) for _, labels in data) == 300
    assert metrics["steps"] == 2 * report.batches_per_epoch
    assert np.isfinite(metrics["valid_loss"])

    # The same command into a new logdir, killed after its second save.
    log = tmp_path / "killed.log"
    with open(log, "w") as stderr:
        process = subprocess.Popen(command("again"), stdout=subprocess.DEVNULL, stderr=stderr, env=environment)
        pointer, deadline = tmp_path / "again" / "backup" / "latest.json", time.monotonic() + 300
        while process.poll() is None and time.monotonic() < deadline:
            try:
                if json.loads(pointer.read_text())["step"] >= 4:
                    process.send_signal(signal.SIGKILL)
                    break
            except (FileNotFoundError, json.JSONDecodeError):
                pass
            time.sleep(0.02)
        process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL, "killed mid-training"
    assert programs(log.read_text(), "Serializing and saving cache entry:") == []
    resumed, again = run("again")
    assert "resuming from" in resumed.stdout
    assert programs(resumed.stderr, "Serializing and saving cache entry:") == [], "it compiled nothing"
    assert programs(resumed.stderr, "Loading cached entry for:") == compiled, "it loaded each program"
    assert again["weights_sha256"] == metrics["weights_sha256"], "and trained the same steps"
