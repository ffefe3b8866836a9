"""kseq-train translate --pretrained: a Marian checkpoint fine-tuned with fit
(tests/fixtures/marian/joint_swish on pairs of the language it was trained
on), the usual run's files, its export served by TensorFlow alone and by
kseq-translate; and its mistakes, one line and status 2 each, nothing left."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from kseq.cli import train
from kseq.tasks import translate
from support import subprocess_env

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "marian")
CHECKPOINT = os.path.join(FIXTURES, "joint_swish")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = os.path.join(ROOT, "docs", "errors.md")
# 200 pairs in batches of 512 tokens: 5 steps an epoch, evaluated at the end (step 10); greedy decoding.
TINY = ["--epochs", "2", "--token-budget", "512", "--max-length", "24", "--eval-sentences", "6",
        "--attention-plots", "1", "--beam-size", "1", "--eval-every", "10", "--jit-compile", "off"]


def split_pairs(folder):
    """train.tsv (200 pairs), valid.tsv and test.tsv (20 each) from the fixtures' pairs.tsv."""
    with open(os.path.join(FIXTURES, "pairs.tsv"), encoding="utf-8") as f:
        lines = f.readlines()
    paths = {}
    for name, chosen in (("train", lines[:200]), ("valid", lines[200:220]), ("test", lines[220:240])):
        paths[name] = os.path.join(folder, f"{name}.tsv")
        with open(paths[name], "w", encoding="utf-8") as f:
            f.writelines(chosen)
    return paths


def arguments(folder, checkpoint=CHECKPOINT):
    paths = split_pairs(folder)
    return ["--pretrained", checkpoint, "--train-tsv", paths["train"], "--valid-tsv", paths["valid"],
            "--test-tsv", paths["test"], "--logdir", os.path.join(folder, "runs"),
            "--export-dir", os.path.join(folder, "export"), *TINY]


@pytest.fixture(scope="module")
def run(made_once):
    """The fine-tuning run, made once a session (`made_once`): its tests only read it."""
    def make(root):
        metrics = translate.main(arguments(str(root)))
        return {"metrics": metrics, "logdir": str(root / "runs"), "export": str(root / "export" / "1")}

    return made_once("marian-fine-tune", make)[1]


@pytest.mark.e2e
@pytest.mark.long
def test_a_fine_tuning_run_reports_before_and_after(run):
    metrics = run["metrics"]
    assert metrics["steps"] == 10
    for name in ("test_bleu", "test_chrf", "pretrained_test_bleu", "pretrained_test_chrf"):
        assert 0 <= metrics[name] <= 100, name
    assert metrics["pretrained_test_bleu"] > 50  # the checkpoint translates its language before fine-tuning
    assert metrics["pretrained_decoding"]["beam_size"] == 4
    assert metrics["learning_rate"] == {"rate": 5e-5, "warmup_steps": 100}
    assert metrics["learning_rate_reason"].startswith("fine-tuning: 5e-05, far below")
    assert metrics["model_size_reason"].startswith("the pretrained checkpoint's config.json")
    assert metrics["model_size"]["activation"] == "silu" and metrics["decoding"]["beam_size"] == 1
    with open(os.path.join(run["logdir"], "config.yaml"), encoding="utf-8") as f:
        config = f.read()
    assert f"pretrained: {CHECKPOINT}" in config
    logdir = run["logdir"]
    assert os.listdir(os.path.join(logdir, "train")) and os.path.isfile(os.path.join(logdir, "pretrained",
                                                                                     "test_translations.tsv"))
    assert {"marian_source.json", "marian_target.json"} <= set(os.listdir(os.path.join(run["export"], "assets")))


@pytest.mark.e2e
@pytest.mark.long
def test_the_export_serves_strings_alone_and_through_kseq_translate(run, tf_only):
    with open(os.path.join(run["logdir"], "test_translations.tsv"), encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:6]
    sources, outputs = [row[0] for row in rows], [row[1] for row in rows]
    reply = tf_only.serve(run["export"], {"source": sources})
    assert not reply["modules"]
    assert reply["answers"][0]["outputs"]["translation"] == outputs
    command = [sys.executable, "-m", "kseq.cli.translate", "--model", run["export"]]
    done = subprocess.run(command, input="\n".join(sources) + "\n", capture_output=True, text=True,
                          env=subprocess_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == outputs


@pytest.mark.e2e
@pytest.mark.long
def test_trained_model_rebuilds_a_fine_tuned_run(run):
    model, tokenizers = translate.trained_model(run["logdir"])
    assert model.position == "sinusoidal_halves" and tokenizers.source.side == "source"
    ids = model.generate(tokenizers.source.tokenize(["the cat sees a dog."]).to_tensor(), max_length=12)
    assert tokenizers.target.detokenize(ids).numpy()[0].decode("utf-8")


def without(name):
    return lambda folder: os.remove(os.path.join(folder, name))


def truncated(folder):
    path = os.path.join(folder, "model.safetensors")
    with open(path, "rb") as f:
        content = f.read()
    with open(path, "wb") as f:
        f.write(content[:len(content) // 2])


def pre_norm(folder):
    path = os.path.join(folder, "config.json")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    config["normalize_before"] = True
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f)


def vocabulary_without_a_piece(folder):
    path = os.path.join(folder, "vocab.json")
    with open(path, encoding="utf-8") as f:
        vocabulary = json.load(f)
    last = max(vocabulary, key=vocabulary.get)
    pad = vocabulary.pop(last)
    del vocabulary[max(vocabulary, key=vocabulary.get)]
    vocabulary[last] = pad - 1
    with open(path, "w", encoding="utf-8") as f:
        json.dump(vocabulary, f, ensure_ascii=False)


# (kind, break the folder copy, extra options, the message after "kseq-train translate: error: ").
MISTAKES = [
    ("a folder without config.json", without("config.json"), [],
     "--pretrained {folder}: {folder}/config.json: No such file or directory; a Marian checkpoint folder holds "
     "config.json"),
    ("a folder without weights", without("model.safetensors"), [],
     "--pretrained {folder}: {folder} holds no weights: expected model.safetensors (or pytorch_model.bin)"),
    ("a truncated weights file", truncated, [],
     "{folder}/model.safetensors cannot be read: truncated, or not a safetensors file (*)"),
    ("a folder without source.spm", without("source.spm"), [],
     "--pretrained {folder}: {folder}/source.spm: No such file; a Marian checkpoint holds source.spm and "
     "target.spm"),
    ("a folder without vocab.json", without("vocab.json"), [],
     "--pretrained {folder}: {folder}/vocab.json: No such file or directory; a Marian checkpoint folder holds "
     "vocab.json"),
    ("a vocabulary that does not match the embeddings", vocabulary_without_a_piece, [],
     "--pretrained {folder}: {folder}: the source vocabulary has 132 pieces; config.json's vocab_size (its "
     "embedding's rows) is 133"),
    ("a config of another architecture", pre_norm, [],
     "--pretrained {folder}: {folder}/config.json: normalize_before is True: that is pre-norm blocks; kseq loads "
     "Marian Transformers (OPUS-MT's: post-norm, sinusoidal positions, tied output)"),
    ("an option that changes the architecture", None, ["--num-layers", "3"],
     "--num-layers would change the pretrained model's architecture, which the checkpoint's config.json and "
     "vocabularies set: drop --num-layers, or --pretrained {folder}"),
    ("a recurrent model", None, ["--arch", "rnn"],
     "--pretrained {folder}: a Marian checkpoint is a Transformer; --arch rnn cannot take its weights"),
    ("--max-length over the model's positions", None, ["--max-length", "200"],
     "--max-length 200: the pretrained model holds 128 positions (its max_position_embeddings), BOS included: "
     "expected at most 127"),
]


@pytest.mark.parametrize("kind,break_it,extra,message", MISTAKES, ids=[row[0] for row in MISTAKES])
def test_a_mistake_is_one_line_status_2_and_leaves_nothing(kind, break_it, extra, message, tmp_path, monkeypatch,
                                                            capsys):
    folder = str(tmp_path / "checkpoint")
    shutil.copytree(CHECKPOINT, folder)
    if break_it:
        break_it(folder)
    (tmp_path / "out").mkdir()
    argv = arguments(str(tmp_path / "out"), folder)
    for name in ("runs", "export"):  # the run's folders: neither may be left
        argv[argv.index(os.path.join(str(tmp_path / "out"), name))] = str(tmp_path / name)
    monkeypatch.setattr(sys, "argv", ["kseq-train"])
    monkeypatch.setenv("KSEQ_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(SystemExit) as stop:
        train.main(["translate", *argv, *extra])
    err = capsys.readouterr().err
    expected = "kseq-train translate: error: " + re.escape(message.format(folder=folder)).replace(r"\*", ".*")
    assert stop.value.code == 2 and re.fullmatch(expected + "\n", err), err
    assert not os.path.exists(tmp_path / "runs") and not os.path.exists(tmp_path / "export")


def documented_rows():
    """docs/errors.md's rows of `MISTAKES`, the folder /data/opus-mt-en-fr."""
    rows = []
    for kind, _, _, message in MISTAKES:
        shown = message.format(folder="/data/opus-mt-en-fr").replace("(*)", "(safetensors' reason)")
        rows.append(f"| {kind} | `{shown}` | 2 |")
    return rows


def test_docs_list_the_mistakes():
    with open(DOCS, encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("## A pretrained translator"):]
    assert [line for line in section.splitlines() if line.startswith("| ") and " | `" in line] == documented_rows()


@pytest.mark.slow
def test_a_killed_fine_tuning_run_resumes(tmp_path):
    """Killed (SIGKILL) after its first save, the same command goes on from it and ends as one run."""
    argv = [*arguments(str(tmp_path)), "--save-every", "3", "--epochs", "4"]
    command = [sys.executable, "-m", "kseq.cli.train", "translate", *argv]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=subprocess_env())
    seen = ""
    deadline = time.time() + 600
    while "step 10 (" not in seen and time.time() < deadline:  # the evaluation at step 10, after a save
        line = process.stdout.readline()
        if not line:
            break
        seen += line
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert "step 10 (" in seen and process.returncode == -signal.SIGKILL, seen[-3000:]
    done = subprocess.run(command, capture_output=True, text=True, env=subprocess_env(), timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with open(tmp_path / "runs" / "metrics.json", encoding="utf-8") as f:
        metrics = json.load(f)
    assert 0 < metrics["resumed_from_step"] < 20 and metrics["steps"] == 20  # from the last save
    assert "pretrained_test_bleu" in metrics  # the phase before training, recorded by the killed run
