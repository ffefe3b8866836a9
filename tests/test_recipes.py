"""recipes/*.py as a user runs them, on tiny settings: each recipe in its own
process with a few seconds of training (`--minutes`), reading stand-ins for
the packaged corpora from a kseq cache written here (no download). Then its
export answers strings in a TensorFlow-only process, its TensorBoard log
holds the training and validation curves (and, with attention, the images),
and a bad flag is one line and status 2 before anything is written."""

import ast
import base64
import glob
import os
import random
import subprocess
import sys

import pytest
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from kseq.cli import recipes
from kseq.data import bible, rotten_tomatoes, scenes
from kseq.data.pypi_data import write_rows
from support import subprocess_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPES = sorted(os.path.basename(path)[:-3] for path in glob.glob(os.path.join(ROOT, "recipes", "*.py")))
ENGLISH = "the man woman child king city house water bread light day night went saw gave took to from and".split()
FRENCH = "le homme femme enfant roi ville maison eau pain lumière jour nuit alla vit donna prit à de et".split()
MOODS = {"fresh": "moving brilliant funny warm sharp".split(), "rotten": "dull tedious flat clumsy empty".split()}
# What each export is asked, and the output that answers: (input, requests, output).
PROMPTS = ["the king went to", "bread and"]
REQUESTS = {
    "01_rnn_language_model": ("prompt", PROMPTS, "continuation"),
    "02_sentiment_classifier": ("text", ["a brilliant and moving film", "dull"], "label"),
    "03_seq2seq_context_vector": ("source", PROMPTS, "translation"),
    "04_seq2seq_attention": ("source", PROMPTS, "translation"),
    "05_transformer_translator": ("source", PROMPTS, "translation"),
    "06_image_captioning": ("image", None, "caption"),  # PNG bytes of a test scene
}
WITH_ATTENTION_IMAGES = ("04_seq2seq_attention", "06_image_captioning")


def write_stand_in_corpora(cache):
    """The Bible's verse pairs and Rotten Tomatoes' snippets as the loaders cache
    them, made of a few words: 1,200 pairs (about 24 test and 24 valid by the
    split's hash) and 400 snippets."""
    rng = random.Random(0)
    rows = []
    for verse in range(1, 1201):
        words = rng.choices(range(len(ENGLISH)), k=rng.randint(3, 9))
        rows.append((f"1:{verse // 50 + 1}:{verse % 50 + 1}", " ".join(ENGLISH[w] for w in words).capitalize() + ".",
                     " ".join(FRENCH[w] for w in words).capitalize() + "."))
    write_rows(bible.bible_cache_path(cache), rows)
    snippets = []
    for index in range(400):
        label = rng.choice(sorted(MOODS))
        words = rng.choices(MOODS[label] + ENGLISH, k=rng.randint(3, 12))
        snippets.append((f"{' '.join(words)} ({index})", label))
    write_rows(rotten_tomatoes.cache_path(cache), snippets)


@pytest.fixture(scope="session")
def corpora(made_once):
    """The stand-in kseq cache, written once for both workers."""
    return made_once("recipe_corpora", write_stand_in_corpora)[0]


def tensorboard_tags(logdir, run):
    events = EventAccumulator(os.path.join(logdir, run), size_guidance={"tensors": 0}).Reload()
    return set(events.Tags()["tensors"])


def served_request(name):
    put, texts, _ = REQUESTS[name]
    if texts is None:
        image = scenes.load_scenes("test", 1).images[0]
        return {put: {"base64": [base64.b64encode(tf.io.encode_png(image).numpy()).decode()]}}
    return {put: texts}


@pytest.mark.e2e
@pytest.mark.long
@pytest.mark.parametrize("name", RECIPES)
def test_a_recipe_trains_evaluates_exports_and_logs(name, corpora, tmp_path, tf_only):
    logdir, export_dir = tmp_path / "runs", tmp_path / "export"
    done = subprocess.run([sys.executable, os.path.join(ROOT, "recipes", f"{name}.py"), "--minutes", "0.02",
                           "--logdir", str(logdir), "--export-dir", str(export_dir)], cwd=tmp_path, capture_output=True,
                          text=True, env=subprocess_env(KSEQ_CACHE_DIR=str(corpora)), timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "Traceback" not in done.stderr
    version = export_dir / "1"
    assert f"SavedModel: {version}" in done.stdout and f"tensorboard --logdir {logdir}" in done.stdout
    assert sorted(os.listdir(export_dir)) == ["1"] and (version / "saved_model.pb").is_file()

    reply = tf_only.serve(str(version), served_request(name))
    put, texts, output = REQUESTS[name]
    assert reply["inputs"] == [put] and reply["modules"] == [], reply
    answers = reply["answers"][0]["outputs"][output]
    assert len(answers) == len(texts or [None]) and all(isinstance(answer, str) for answer in answers), answers
    if name == "02_sentiment_classifier":
        assert set(answers) <= set(rotten_tomatoes.LABELS)

    assert {"epoch_loss"} <= tensorboard_tags(logdir, "train"), "the training curve"
    assert {"epoch_loss"} <= tensorboard_tags(logdir, "validation"), "the validation curve"
    assert (logdir / "best.weights.h5").is_file(), "the checkpoint"
    if name in WITH_ATTENTION_IMAGES:
        images = [tag for tag in tensorboard_tags(logdir, "attention") if tag.startswith(("sentence_", "attention_"))]
        assert len(images) >= 2, images


def test_every_recipe_reads_its_flags_before_anything_else():
    """Each recipe's first call is `recipes.start(...)`, with its own name: a
    bad flag stops it before it reads data or writes a file."""
    assert len(RECIPES) == 6 and set(RECIPES) == set(REQUESTS)
    for name in RECIPES:
        with open(os.path.join(ROOT, "recipes", f"{name}.py"), encoding="utf-8") as file:
            tree = ast.parse(file.read())
        calls = [node for statement in tree.body if not isinstance(statement, (ast.Import, ast.ImportFrom))
                 for node in ast.walk(statement) if isinstance(node, ast.Call)]
        first = calls[0]
        assert ast.unparse(first.func) == "recipes.start", (name, ast.unparse(first))
        assert first.args[0].value == name


@pytest.mark.parametrize("argv, message", [
    (["--minutes", "0"], "argument --minutes: expected a number of minutes above 0, e.g. 0.5; got '0'"),
    (["--minutes", "nan"], "argument --minutes: expected a number of minutes above 0, e.g. 0.5; got 'nan'"),
    (["--minutes", "three"], "argument --minutes: expected a number of minutes above 0, e.g. 0.5; got 'three'"),
    (["--logdir", "{file}"], "--logdir {file} exists and is not a directory"),
    (["--export-dir", "{file}/1"], "--export-dir {file}/1: {file} is a file, not a directory"),
    (["--minuets", "2"], "unrecognized arguments: --minuets 2 (did you mean --minutes?)"),
])
def test_a_bad_flag_is_one_line_and_status_2(argv, message, tmp_path, capsys):
    file = tmp_path / "taken"
    file.write_text("")
    with pytest.raises(SystemExit) as stopped:
        recipes.start("02_sentiment_classifier", __doc__, 3.0, [a.format(file=file) for a in argv])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines() == [f"{os.path.basename(sys.argv[0])}: error: "
                                                    + message.format(file=file)]
    assert os.listdir(tmp_path) == ["taken"]


def test_the_defaults_and_good_flags(tmp_path):
    flags = recipes.start("01_rnn_language_model", __doc__, 3.0, [])
    assert (flags.minutes, flags.logdir, flags.export_dir) == (
        3.0, os.path.join("runs", "recipes", "01_rnn_language_model"),
        os.path.join("savedmodels", "recipes", "01_rnn_language_model"))
    flags = recipes.start("x", __doc__, 3.0, ["--minutes", "0.5", "--logdir", str(tmp_path / "new" / "logs")])
    assert (flags.minutes, flags.logdir) == (0.5, str(tmp_path / "new" / "logs"))


def test_a_recipe_run_as_a_user_runs_it_refuses_a_bad_flag_in_one_line(tmp_path):
    """The real command: one line on stderr (no usage, no traceback, none of
    TensorFlow's start-up lines), status 2, nothing written."""
    environment = subprocess_env()
    del environment["TF_CPP_MIN_LOG_LEVEL"]  # as a user's shell has it
    done = subprocess.run([sys.executable, os.path.join(ROOT, "recipes", "05_transformer_translator.py"),
                           "--minutes", "-1"], cwd=tmp_path, capture_output=True, text=True, env=environment,
                          timeout=300)
    assert (done.returncode, done.stderr.splitlines()) == (2, [
        "05_transformer_translator.py: error: argument --minutes: expected a number of minutes above 0, e.g. 0.5; "
        "got '-1'"]), done.stderr[-3000:]
    assert os.listdir(tmp_path) == []
