"""The installed commands over the exports: one answer a line, in batches,
equal to calling the signatures; errors on one line with the recipes'
exit codes."""

import importlib.metadata
import os
import string
import subprocess
import sys

import keras
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401 (registers the text ops the exports use)

from kseq.cli import commands
from kseq.data import CharacterTokenizer
from kseq.decoding import BeamSearch, GreedySearch, Limits
from kseq.export import export_classifier, export_conditioned_generator, export_language_model, export_translator
from kseq.models import ConditionedGenerator, RNNLanguageModel, SequenceClassifier
from support import small_model, subprocess_env

TOKENIZER = CharacterTokenizer(string.ascii_lowercase)
LINES = ["keras", "", "seq", "abcabc", "the cat", "zz"]
LABELS = ["negative", "positive"]


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """{kind: the folder of its numbered versions}: tiny random exports."""
    keras.utils.set_random_seed(0)
    root = tmp_path_factory.mktemp("cli")
    vocab = TOKENIZER.vocab_size
    export_translator(small_model("rnn", {"attention": "dot"}), TOKENIZER, TOKENIZER, str(root / "translate"),
                      search=BeamSearch(limits=Limits(8), beam_size=3), n_best=3)
    export_language_model(RNNLanguageModel(vocab, embed_dim=8, units=8), TOKENIZER, str(root / "lm"),
                          GreedySearch(6))
    export_classifier(SequenceClassifier(vocab, 2, embed_dim=8, units=8), TOKENIZER, LABELS, str(root / "classify"))
    export_conditioned_generator(ConditionedGenerator(vocab, num_classes=2, embed_dim=8, units=8), TOKENIZER,
                                 str(root / "generate"), search=GreedySearch(6), labels=LABELS)
    return {kind: str(root / kind) for kind in ("translate", "lm", "classify", "generate")}


def run(command, tmp_path, lines, *argv):
    """`command`'s output lines for `lines`, through --input and --output."""
    source, target = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    command([*argv, "--input", str(source), "--output", str(target)])
    return target.read_text(encoding="utf-8").split("\n")[:-1]


def signature(path, name="serving_default"):
    return tf.saved_model.load(os.path.join(path, "1")).signatures[name]


def strings(values):
    return [value.decode("utf-8") for value in values]


@pytest.mark.parametrize("batch_size", ["1", "4"])
def test_translate_answers_each_line_as_the_signature_does(exports, tmp_path, batch_size):
    out = run(commands.translate, tmp_path, LINES, "--model", exports["translate"], "--batch-size", batch_size)
    expected = signature(exports["translate"])(source=tf.constant(LINES))
    assert out == strings(expected["translation"].numpy()) and out[1] == ""
    scored = run(commands.translate, tmp_path, LINES, "--model", exports["translate"], "--scores")
    assert scored == [f"{score:.4f}\t{text}" for score, text in zip(expected["score"].numpy(), out)]


def test_n_best_gives_k_lines_an_input_best_first(exports, tmp_path):
    out = run(commands.translate, tmp_path, LINES, "--model", exports["translate"], "--n-best", "2", "--scores")
    expected = signature(exports["translate"], "n_best")(source=tf.constant(LINES))
    assert len(out) == 2 * len(LINES)
    for i, (texts, scores) in enumerate(zip(expected["translations"].numpy(), expected["scores"].numpy())):
        assert out[2 * i: 2 * i + 2] == [f"{s:.4f}\t{t}" for s, t in zip(scores[:2], strings(texts[:2]))]
        assert scores[0] >= scores[1]


def test_the_other_exports(exports, tmp_path):
    lm = run(commands.generate, tmp_path, LINES, "--model", exports["lm"], "--batch-size", "2")
    assert lm == strings(signature(exports["lm"])(prompt=tf.constant(LINES))["continuation"].numpy())
    labels = run(commands.classify, tmp_path, LINES, "--model", exports["classify"], "--scores")
    expected = signature(exports["classify"])(text=tf.constant(LINES))
    assert labels == [f"{p.max():.4f}\t{label}" for p, label in zip(expected["probabilities"].numpy(),
                                                                       strings(expected["label"].numpy()))]
    texts = run(commands.generate_from_label, tmp_path, ["positive", "negative"], "--model", exports["generate"])
    assert len(texts) == 2 and all(isinstance(text, str) for text in texts)


def test_the_newest_version_of_a_base_folder_is_used(exports, tmp_path, capsys):
    base = exports["classify"]
    export_classifier(SequenceClassifier(TOKENIZER.vocab_size, 2, embed_dim=8, units=8), TOKENIZER, LABELS, base)
    out = run(commands.classify, tmp_path, LINES, "--model", base)
    assert f"using {os.path.join(base, '2')}" in capsys.readouterr().err
    newest = tf.saved_model.load(os.path.join(base, "2")).signatures["serving_default"]
    assert out == strings(newest(text=tf.constant(LINES))["label"].numpy())


@pytest.mark.parametrize("argv, lines, message", [
    (["--model", "MISSING"], LINES, "--model MISSING: no such folder"),
    (["--model", "EMPTY"], LINES, "no SavedModel there"),
    (["--model", "classify"], LINES, "not a translator export (its serving_default takes text; a translator "
                                     "takes source)"),
    (["--model", "translate", "--n-best", "5"], LINES, "--n-best 5: the export gives at most 3 hypotheses"),
])
def test_errors_name_what_is_wrong(exports, tmp_path, argv, lines, message):
    (tmp_path / "empty").mkdir()
    places = {"MISSING": str(tmp_path / "missing"), "EMPTY": str(tmp_path / "empty"), **exports}
    argv = [places.get(arg, arg) for arg in argv]
    with pytest.raises(SystemExit) as exit_info:
        run(commands.translate, tmp_path, lines, *argv)
    assert message.replace("MISSING", places["MISSING"]) in str(exit_info.value.code)


def test_invalid_utf8_names_its_line(exports, tmp_path):
    (tmp_path / "in.txt").write_bytes(b"keras\nseq\n\xff\xfe\n")
    with pytest.raises(SystemExit, match=r"in.txt: line 3 is not UTF-8"):
        commands.translate(["--model", exports["translate"], "--input", str(tmp_path / "in.txt")])


def test_an_unknown_label_names_the_known_ones(exports, tmp_path):
    with pytest.raises(SystemExit, match=r"in.txt: `label` must be one of: negative, positive; unknown labels: neutral$"):
        run(commands.generate_from_label, tmp_path, ["neutral"], "--model", exports["generate"])


def test_installed_scripts_run_from_a_pipe_with_the_recipes_exit_codes(exports):
    scripts = {entry.name: entry.value for entry in importlib.metadata.entry_points(group="console_scripts")
               if entry.name.startswith("kseq-")}
    assert scripts == {"kseq-translate": "kseq.cli.commands:translate", "kseq-generate": "kseq.cli.commands:generate",
                       "kseq-classify": "kseq.cli.commands:classify",
                       "kseq-generate-from-label": "kseq.cli.commands:generate_from_label"}
    script = os.path.join(os.path.dirname(sys.executable), "kseq-translate")
    result = subprocess.run([script, "--model", exports["translate"]], input="keras\nseq\n", capture_output=True,
                            text=True, env=subprocess_env(), timeout=120)
    assert result.returncode == 0 and len(result.stdout.splitlines()) == 2, result.stderr[-2000:]
    for argv, code in (([], 2), (["--model", exports["classify"]], 1)):
        failed = subprocess.run([script, *argv], input="keras\n", capture_output=True, text=True,
                                env=subprocess_env(), timeout=120)
        assert failed.returncode == code and "Traceback" not in failed.stderr, failed.stderr[-2000:]
