"""The installed commands over the exports (kseq.cli): one line in, one
line out (K with --n-best K), equal to calling the signatures; the same
answers in any batch size; the newest version of a base folder; every
error one line with the tasks' exit status (2: the command line, 1: the
input or the run)."""

import functools
import importlib
import importlib.metadata
import io
import os
import re
import shutil
import string
import subprocess
import sys

import keras
import pytest
import tensorflow as tf

from kseq.cli import classify, command, generate, generate_from_label, servable, train, translate
from kseq.data import CharacterTokenizer
from kseq.decoding import BeamSearch, GreedySearch, Limits
from kseq.export import export_classifier, export_conditioned_generator, export_language_model, export_translator
from kseq.models import ConditionedGenerator, RNNLanguageModel, SequenceClassifier
from support import small_model, subprocess_env

importlib.import_module("tensorflow_text")  # registers the text ops the exports use

TOKENIZER = CharacterTokenizer(string.ascii_lowercase)
# What the commands read: a BOM, CRLF ends, blank and whitespace-only lines,
# a character the vocabulary lacks, no final line end.
RAW = "\ufeffkeras\r\n\n  \t \nseq\nabcabc\nthe cat\nzz\n\u00e9t\u00e9\nx".encode("utf-8")
LINES = ["keras", "", "  \t ", "seq", "abcabc", "the cat", "zz", "\u00e9t\u00e9", "x"]
BLANK = [not line.strip() for line in LINES]
LABELS = ["negative", "positive"]
COMMANDS = {"kseq-translate": translate, "kseq-generate": generate, "kseq-classify": classify,
            "kseq-generate-from-label": generate_from_label, "kseq-train": train}


@pytest.fixture(scope="module")
def exports(made_once):
    """{name: the folder of its numbered versions (one, "1")}: tiny random
    exports, written once a session (conftest's `made_once`): the tests only read them."""
    return made_once("cli", write_exports)[1]


def write_exports(root):
    keras.utils.set_random_seed(0)
    vocab = TOKENIZER.vocab_size
    export_translator(small_model("rnn", {"attention": "dot"}), TOKENIZER, TOKENIZER, str(root / "translate"),
                      search=BeamSearch(limits=Limits(8), beam_size=3), n_best=3)
    export_translator(small_model("rnn", {}), TOKENIZER, TOKENIZER, str(root / "greedy_translate"),
                      search=GreedySearch(8), n_best=0)
    export_language_model(RNNLanguageModel(vocab, embed_dim=8, units=8), TOKENIZER, str(root / "lm"),
                          GreedySearch(6))
    for name in ("classify", "other_classify"):
        export_classifier(SequenceClassifier(vocab, 3, embed_dim=8, units=8), TOKENIZER, ["a", "b", "c"],
                          str(root / name))
    export_conditioned_generator(ConditionedGenerator(vocab, num_classes=2, embed_dim=8, units=8), TOKENIZER,
                                 str(root / "generate"), search=GreedySearch(6), labels=LABELS)
    return {name: str(root / name) for name in
            ("translate", "greedy_translate", "lm", "classify", "other_classify", "generate")}


@pytest.fixture(scope="module", autouse=True)
def each_version_loaded_once():
    """The commands load a version folder's signatures once a module, not
    once a command run (a beam-search export takes seconds to load); what
    they do with them, and loads that fail (never cached), are unchanged."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(servable, "load_signatures", functools.cache(servable.load_signatures))
        yield


@functools.cache
def signature(folder, name="serving_default"):
    return tf.saved_model.load(folder).signatures[name]


def served(folder, name="serving_default", **inputs):
    """{output: numpy} of signature `name` of the version folder `folder`."""
    return {key: value.numpy() for key, value in signature(folder, name)(
        **{key: tf.constant(values, tf.string) for key, values in inputs.items()}).items()}


def texts(values):
    return [value.decode("utf-8") for value in values]


def blanked(answers, width=1):
    """`answers` (one list of `width` lines an input line) with blank
    inputs' lines blank, flattened: what the commands print."""
    return [line for answer, blank in zip(answers, BLANK) for line in ([""] * width if blank else answer)]


def run(module, tmp_path, argv, data=RAW):
    """`module`'s output lines for the input bytes `data`, through --input and --output."""
    source, target = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_bytes(data)
    module.main([*argv, "--input", str(source), "--output", str(target)])
    return target.read_text(encoding="utf-8").split("\n")[:-1]


@pytest.mark.parametrize("batch_size", [["1"], ["4"], ["32"], ["4", "--no-sort"]], ids=" ".join)
def test_translations_are_the_signatures_line_for_line_in_any_batch_size(exports, tmp_path, batch_size):
    """Each batch size, lines sorted by length or not, gives the answers of
    one call on all lines, so all give the same, in input order."""
    out = run(translate, tmp_path, ["--model", exports["translate"], "--batch-size", *batch_size])
    expected = served(exports["translate"] + "/1", source=LINES)
    assert out == blanked([[text] for text in texts(expected["translation"])])
    assert len(out) == len(LINES) and any(out)


@pytest.mark.parametrize("no_sort", [False, True], ids=["sorted", "--no-sort"])
def test_a_window_of_lines_is_batched_by_length_and_answered_in_input_order(tmp_path, capsys, no_sort):
    lengths = [7, 2, 9, 0, 1, 5, 3, 8, 4, 6]  # 0: a blank line, answered without a call
    (tmp_path / "in.txt").write_text("".join("x" * n + "\n" for n in lengths), encoding="utf-8")
    calls = []

    def answer(requests):
        calls.append([len(request) for request in requests])
        return [[str(len(request))] for request in requests]

    args = command.parser("kseq-test", "", "texts").parse_args(
        ["--model", "m", "--input", str(tmp_path / "in.txt"), "--batch-size", "3", *(["--no-sort"] if no_sort else [])])
    command.serve(args, answer)
    assert capsys.readouterr().out.split("\n")[:-1] == [str(n) if n else "" for n in lengths]
    # --no-sort: batches of 3 input lines, blank ones left out; sorted: 3 real lines of like length a batch.
    assert calls == ([[7, 2, 9], [1, 5], [3, 8, 4], [6]] if no_sort else [[1, 2, 3], [4, 5, 6], [7, 8, 9]])


def test_a_refused_batch_names_its_lines_consecutive_or_not():
    assert command.named_lines([5, 3, 4]) == "lines 3-5"
    assert command.named_lines([9, 2, 40]) == "lines 2, 9, 40"
    assert command.named_lines(list(range(1, 20, 2))) == "lines 1, 3, 5, 7, 9 and 5 more"


def test_scores_and_n_best_formats(exports, tmp_path):
    folder, version = exports["translate"], exports["translate"] + "/1"
    best = served(version, source=LINES)
    scored = run(translate, tmp_path, ["--model", folder, "--scores", "--batch-size", "3"])
    assert scored == blanked([[f"{score:.4f}\t{text}"] for score, text in zip(best["score"],
                                                                               texts(best["translation"]))])
    hypotheses = served(version, "n_best", source=LINES)
    two = run(translate, tmp_path, ["--model", folder, "--n-best", "2", "--batch-size", "3"])
    assert two == blanked([texts(row[:2]) for row in hypotheses["translations"]], width=2)
    three = run(translate, tmp_path, ["--model", folder, "--n-best", "3", "--scores"])
    assert three == blanked([[f"{s:.4f}\t{t}" for s, t in zip(scores, texts(row))]
                             for scores, row in zip(hypotheses["scores"], hypotheses["translations"])], width=3)
    assert [line.split("\t")[0] for line in three[::3]] == [line.split("\t")[0] for line in scored]  # best first
    assert run(translate, tmp_path, ["--model", folder, "--n-best", "1"]) == [line.partition("\t")[2]
                                                                             for line in scored]


def test_score_pairs_print_each_targets_log_probability(exports, tmp_path):
    pairs = [("keras", "seq"), None, ("abc", ""), ("the cat", "zz")]
    data = "".join(("\t".join(pair) if pair else " ") + "\n" for pair in pairs).encode()
    out = run(translate, tmp_path, ["--model", exports["translate"], "--score-pairs", "--batch-size", "2"], data)
    given = [pair for pair in pairs if pair]
    expected = served(exports["translate"] + "/1", "score", source=[s for s, _ in given],
                      target=[t for _, t in given])["log_probability"]
    assert out == [f"{expected[0]:.4f}", "", f"{expected[1]:.4f}", f"{expected[2]:.4f}"]


def test_the_other_commands_answer_as_their_signatures(exports, tmp_path):
    lm = run(generate, tmp_path, ["--model", exports["lm"], "--batch-size", "2"])
    assert lm == blanked([[text] for text in texts(served(exports["lm"] + "/1", prompt=LINES)["continuation"])])
    classes = served(exports["classify"] + "/1", text=LINES)
    labels = texts(classes["label"])
    assert run(classify, tmp_path, ["--model", exports["classify"]]) == blanked([[label] for label in labels])
    assert run(classify, tmp_path, ["--model", exports["classify"], "--scores"]) == blanked(
        [[f"{p.max():.4f}\t{label}"] for p, label in zip(classes["probabilities"], labels)])
    assert run(classify, tmp_path, ["--model", exports["classify"], "--probabilities", "--batch-size", "5"]) == \
        blanked([["\t".join(f"{x:.4f}" for x in p) + f"\t{label}"] for p, label in zip(classes["probabilities"],
                                                                                         labels)])
    wanted = ["positive", "", "negative", " positive "]
    written = run(generate_from_label, tmp_path, ["--model", exports["generate"], "--batch-size", "3"],
                  "".join(label + "\n" for label in wanted).encode())
    expected = texts(served(exports["generate"] + "/1", label=["positive", "negative", "positive"])["text"])
    assert written == [expected[0], "", expected[1], expected[2]]


def test_output_is_renamed_into_place_so_it_may_be_the_input(exports, tmp_path):
    path = tmp_path / "texts.txt"
    path.write_bytes(RAW)
    classify.main(["--model", exports["classify"], "--input", str(path), "--output", str(path)])
    labels = texts(served(exports["classify"] + "/1", text=LINES)["label"])
    assert path.read_text(encoding="utf-8").split("\n")[:-1] == blanked([[label] for label in labels])
    assert os.listdir(tmp_path) == ["texts.txt"]  # no temporary file left


def test_a_base_folder_serves_its_newest_complete_version(exports, tmp_path, capsys):
    base = tmp_path / "classify"
    shutil.copytree(os.path.join(exports["classify"], "1"), base / "2")
    shutil.copytree(os.path.join(exports["other_classify"], "1"), base / "10")  # newer: 10 > 2, though "10" < "2"
    (base / "11").mkdir()  # a version being copied in: no saved_model.pb yet
    (base / ".tmp-next-123").mkdir()
    out = run(classify, tmp_path, ["--model", str(base), "--probabilities"])
    assert f"kseq-classify: using {base / '10'}, the newest of 2 versions" in capsys.readouterr().err
    newest = served(exports["other_classify"] + "/1", text=LINES)
    assert out == blanked([["\t".join(f"{x:.4f}" for x in p) + f"\t{label}"]
                           for p, label in zip(newest["probabilities"], texts(newest["label"]))])
    assert out != run(classify, tmp_path, ["--model", str(base / "2"), "--probabilities"])


def places(exports, tmp_path):
    """Names the error tables use for paths."""
    (tmp_path / "empty" / "3").mkdir(parents=True)
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / "saved_model.pb").write_bytes(b"not a SavedModel")
    (tmp_path / "folder").mkdir()
    return {**exports, "MISSING": str(tmp_path / "missing"), "EMPTY": str(tmp_path / "empty"),
            "PB": os.path.join(exports["translate"], "1", "saved_model.pb"), "DAMAGED": str(tmp_path / "damaged"),
            "NOWHERE": str(tmp_path / "nowhere" / "out.txt"), "FOLDER": str(tmp_path / "folder")}


USAGE_ERRORS = [
    ("kseq-translate", ["--model", "MISSING"], r"--model \S+missing: no such folder"),
    ("kseq-translate", ["--model", "EMPTY"], r"--model \S+empty: no SavedModel there: no saved_model.pb, and no "
                                             r"numbered version folder holding one \(numbered folders without one: 3\)"),
    ("kseq-translate", ["--model", "PB"], r"--model \S+saved_model.pb: is a file, not a SavedModel folder; pass its "
                                          r"folder, \S+translate/1"),
    ("kseq-classify", ["--model", "translate"], r"--model \S+translate/1: a translator export \(its serving_default "
                                                r"takes source\), not a classifier \(whose serving_default takes "
                                                r"text\): use kseq-translate"),
    ("kseq-generate-from-label", ["--model", "lm"], r"a language model export .* not a label-conditioned generator "
                                                    r"\(whose serving_default takes label\): use kseq-generate"),
    ("kseq-translate", ["--model", "translate", "--n-best", "4"],
     r"--n-best 4: this export gives at most 3 hypotheses an input \(exported with n_best=3; re-export with n_best=4\)"),
    ("kseq-translate", ["--model", "greedy_translate", "--n-best", "2"],
     r"--n-best 2: --model \S+greedy_translate/1 has no n_best signature \(re-export it with "
     r"kseq.export.export_translator, n_best>=2\)"),
    ("kseq-translate", ["--model", "translate", "--score-pairs", "--scores"], r"--score-pairs .* neither --n-best nor"),
    ("kseq-translate", ["--model", "translate", "--batch-size", "0"], r"argument --batch-size: must be >= 1, got 0"),
    ("kseq-translate", ["--model", "translate", "--n-bset", "2"],
     r"unrecognized arguments: --n-bset 2 \(did you mean --n-best\?\)$"),
    ("kseq-classify", ["--model", "classify", "--scores", "--probabilities"], r"--probabilities: not allowed with"),
    ("kseq-generate", ["--model", "lm", "--input", "MISSING"], r"--input \S+missing: no such file"),
    ("kseq-generate", ["--model", "lm", "--input", "FOLDER"], r"--input \S+folder: is a directory, not a file"),
    ("kseq-generate", ["--model", "lm", "--output", "NOWHERE"], r"--output \S+out.txt: no such folder \S+nowhere"),
]


@pytest.mark.parametrize("name, argv, message", USAGE_ERRORS, ids=[" ".join(row[1]) for row in USAGE_ERRORS])
def test_usage_errors_exit_2_naming_the_option(exports, tmp_path, capsys, name, argv, message):
    named = places(exports, tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        COMMANDS[name].main([named.get(arg, arg) for arg in argv])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and f"usage: {name} " in err and "Traceback" not in err, err
    assert err.splitlines()[-1].startswith(f"{name}: error: ") and re.search(message, err.splitlines()[-1]), err


FAILURES = [
    ("kseq-translate", [], b"keras\nseq\n\xff\xfe\nzz\n", r"in.txt line 3 is not UTF-8 \(byte 1: invalid start byte\)"),
    ("kseq-generate-from-label", ["--batch-size", "4"], b"positive\n\nneutral\nnegative\nbad\n",
     r"in.txt line 3: `label` must be one of: negative, positive; unknown labels: neutral$"),
    # Sorted by length, line 5 ("bad") is asked before line 3: the first bad line is still the one named.
    ("kseq-generate-from-label", ["--batch-size", "1"], b"positive\n\nneutral\nnegative\nbad\n",
     r"in.txt line 3: `label` must be one of: negative, positive; unknown labels: neutral$"),
    ("kseq-translate", ["--score-pairs"], b"a\tb\nab\n", r"in.txt line 2: --score-pairs takes source<TAB>target "
                                                          r"lines; this one has no tab"),
    ("kseq-translate", ["--score-pairs"], b"a\tb\tc\n", r"in.txt line 1: .* this one has 2 tabs"),
    ("kseq-translate", ["--model", "DAMAGED"], b"keras\n", r"--model \S+damaged: cannot be loaded \(.*corrupt"),
]


@pytest.mark.parametrize("name, argv, data, message", FAILURES, ids=[row[-1][:30] for row in FAILURES])
def test_failures_exit_1_on_one_line_and_leave_the_output_as_it_was(exports, tmp_path, capsys, name, argv, data,
                                                                   message):
    model = {"kseq-translate": "translate", "kseq-generate-from-label": "generate"}[name]
    named = places(exports, tmp_path)
    argv = [named.get(arg, arg) for arg in ["--model", exports[model] + "/1", *argv]]  # the last --model wins
    (tmp_path / "in.txt").write_bytes(data)
    (tmp_path / "out.txt").write_text("before\n")
    with pytest.raises(SystemExit) as exit_info:
        COMMANDS[name].main([*argv, "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "out.txt")])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 1 and len(err.splitlines()) == 1, err
    assert err.startswith(f"{name}: ") and re.search(message, err), err
    assert (tmp_path / "out.txt").read_text() == "before\n"
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]


def test_a_terminal_gets_each_line_answered_as_it_is_typed(exports, monkeypatch, capsys):
    class Terminal(io.TextIOWrapper):
        def isatty(self):
            return True

    rows = []
    call = servable.call
    monkeypatch.setattr(sys, "stdin", Terminal(io.BytesIO(b"keras\nseq\n\nzz\n")))
    monkeypatch.setattr(servable, "call", lambda signature, **inputs: rows.append(
        len(next(iter(inputs.values())))) or call(signature, **inputs))
    generate.main(["--model", exports["lm"] + "/1"])
    expected = texts(served(exports["lm"] + "/1", prompt=["keras", "seq", "zz"])["continuation"])
    assert capsys.readouterr().out.split("\n")[:-1] == [expected[0], expected[1], "", expected[2]]
    assert rows == [1, 1, 1]


def script(name):
    """The installed script, beside the interpreter running the tests."""
    path = os.path.join(os.path.dirname(sys.executable), name)
    assert os.access(path, os.X_OK), f"{path}: not installed; run .venv/bin/pip install -e . --no-deps"
    return path


def test_the_entry_points_are_each_modules_main():
    scripts = {entry.name: entry for entry in importlib.metadata.entry_points(group="console_scripts")
               if entry.name.startswith("kseq-")}
    assert sorted(scripts) == sorted(COMMANDS)
    for name, module in COMMANDS.items():
        assert scripts[name].value == f"{module.__name__}:main" and scripts[name].load() is module.main
        assert os.path.basename(script(name)) == name


def users_environment():
    """The tests' subprocess environment with TensorFlow's log level unset, as a user's shell has it."""
    env = subprocess_env()
    del env["TF_CPP_MIN_LOG_LEVEL"]
    return env


# An ERROR line oneDNN's graph pass writes, where kseq's default level shows
# errors, on a CPU its check finds short (an AMD EPYC with AVX-512 among them),
# for keras' masked recurrent layers' bool transposes; TensorFlow's, not kseq's.
ONEDNN_DTYPE_NOTICE = re.compile(r"^E\d{4} [\d:.]+ +\d+ util\.cc:\d+\] oneDNN supports DT_[A-Z0-9]+ only on platforms")


def own_lines(stderr):
    return [line for line in stderr.splitlines() if not ONEDNN_DTYPE_NOTICE.match(line)]


def test_an_installed_script_translates_a_pipe(exports):
    """Its stderr is its own line alone: no TensorFlow start-up lines, no
    CUDA probe's failure on a machine without a GPU, no warning about the
    gradients an export leaves out."""
    result = subprocess.run([script("kseq-translate"), "--model", exports["translate"]], input=RAW,
                            capture_output=True, env=users_environment(), timeout=120)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    expected = served(exports["translate"] + "/1", source=LINES)["translation"]
    assert result.stdout.decode().split("\n")[:-1] == blanked([[text] for text in texts(expected)])
    assert own_lines(result.stderr.decode()) == [
        f"kseq-translate: using {exports['translate']}/1, the newest of 1 version"]


def test_installed_scripts_exit_with_one_line_and_no_traceback(exports):
    usage = subprocess.run([script("kseq-classify")], capture_output=True, text=True, env=subprocess_env(),
                           timeout=120)
    assert usage.returncode == 2 and usage.stderr.splitlines()[-1] == \
        "kseq-classify: error: the following arguments are required: --model", usage.stderr[-2000:]
    bad = subprocess.run([script("kseq-generate-from-label"), "--model", exports["generate"] + "/1"],
                         input=b"positive\n\xc3\n", capture_output=True, env=users_environment(), timeout=120)
    assert bad.returncode == 1 and bad.stdout == b"", bad.stderr.decode()[-2000:]
    err = bad.stderr.decode()
    assert own_lines(err) == ["kseq-generate-from-label: stdin line 2 is not UTF-8 (byte 1: unexpected end of data)"]
    assert "Traceback" not in err + usage.stderr


def test_a_closed_pipe_ends_the_command_quietly(exports, tmp_path):
    """`kseq-generate ... | head -1`: the reader leaves; no traceback."""
    (tmp_path / "in.txt").write_text("keras\nseq\n" * 50)
    process = subprocess.Popen([script("kseq-generate"), "--model", exports["lm"] + "/1", "--batch-size", "1",
                                "--input", str(tmp_path / "in.txt")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=subprocess_env())
    process.stdout.close()  # nobody reads: the first write finds the pipe closed
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) == 1 and "Traceback" not in err and "Exception ignored" not in err, err
    assert "kseq-generate:" not in err, err  # quiet: no message of its own


def test_kseq_train_names_its_tasks_and_refuses_an_unknown_one(capsys):
    with pytest.raises(SystemExit) as listed:
        train.main(["--help"])
    listing = capsys.readouterr().out
    assert listed.value.code == 0 and all(f"- {task}:" in listing for task in train.TASKS)
    with pytest.raises(SystemExit) as unknown:
        train.main(["translation"])
    assert unknown.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "kseq-train: error: TASK must be one of translate, language_model, classify, generate_reviews, caption, "
        "reverse; got 'translation'")


def test_kseq_train_runs_a_task_with_its_options_and_names_them_in_errors():
    """`kseq-train language-model` is the language_model task; its usage errors name the command."""
    bad = subprocess.run([script("kseq-train"), "language-model", "--epochs", "0"], capture_output=True, text=True,
                         env=subprocess_env(), timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.splitlines()[-1] == "kseq-train language_model: error: --epochs must be >= 1; got 0"
