"""Every option of every task is checked before a run writes anything: a
value it does not take is one line on stderr, `kseq-train TASK: error:
<message>` naming the option (and, from `--config FILE`, the file and the
key), exit status 2, no folder and no traceback.

The walk reads each option's own declaration (`kseq.training.config.option`:
its type, choices, range, check or path), so that an option added later is
walked too, and one that declares nothing of what it accepts fails here.
It runs each task's parser in this process, where a bad value costs a
parse and not a start of TensorFlow; `python -m kseq.cli.train <task>` is
run in this process too, with a run that would start stopped by an
assertion. A few child processes show the installed command and `python
-m` doing the same. The rules that tie options together get a row each
(`CROSS_ROWS`); the recipes' three flags are tests/test_recipes.py's.
"""

import dataclasses
import importlib
import json
import os
import runpy
import subprocess
import sys
import types
import typing

import pytest
import yaml

from kseq.cli import train
from kseq.training import task as task_steps
from kseq.training.config import accepts
from kseq.training.config.flags import flag
from kseq.training.config.options import config_values
from kseq.training.config.warm_start import OPTIONS_FILE, TRAINED_WEIGHTS
from support import subprocess_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULES = {task: importlib.import_module(f"kseq.tasks.{task}") for task in train.TASKS}
# Words of a one-line refusal that say what was expected.
SAYS_WHAT_IS_EXPECTED = ("must be", "expected", "choose from", "no such", "not a directory", "needs")


def declared(task):
    """The task's options a command line sets: (field, parsed type), as its parser declares them."""
    options_class = MODULES[task].Options
    hints = typing.get_type_hints(options_class)
    return [(field, accepts.value_type(hints[field.name])[0]) for field in dataclasses.fields(options_class)
            if "help" in field.metadata]


@dataclasses.dataclass
class Bad:
    """A value an option does not take: as a command line gives it, and as a `--config` file holds it."""
    argv: list
    config: object
    why: str


def bad_values(field, kind, places):
    """The values `field`'s declaration refuses: a wrong type, each side of its range, no choice, a bad path
    or a value its check refuses."""
    name, metadata = flag(field.name), field.metadata
    if kind is bool:
        return [Bad([f"{name}=maybe"], "maybe", "a value given to a switch")]
    if metadata.get("choices"):
        return [Bad([name, "not-a-choice"], "not-a-choice", "none of the choices")]
    if kind in (int, float):
        return _bad_numbers(field, kind)
    if metadata.get("file") or metadata.get("files") or metadata.get("folder") == "read":
        return [Bad([name, places["missing"]], places["missing"], "a path that does not exist")]
    if metadata.get("folder"):
        return [Bad([name, places["under_file"]], places["under_file"], "a folder under a file")]
    if metadata.get("check"):
        candidates = ("'", "x", "0", "-1", ",", places["under_file"])
        refused = [value for value in candidates if metadata["check"](value)]
        assert refused, f"{name}: its check takes every value tried: {candidates}"
        return [Bad([name, refused[0]], refused[0], "a value its check refuses")]
    pytest.fail(f"{name} declares nothing of what it accepts: give it choices, a range, a check or the path it "
                "names (kseq.training.config.option)")


def _bad_numbers(field, kind):
    name, metadata = flag(field.name), field.metadata
    bad = [Bad([name, "x"], "x", "not a number")]
    step = 1 if kind is int else 0.5
    for bound, offset in (("minimum", -step), ("maximum", step), ("above", 0), ("below", 0)):
        if metadata.get(bound) is not None:
            value = kind(metadata[bound] + offset)
            bad.append(Bad([name, str(value)], value, f"past its {bound} {metadata[bound]}"))
    if kind is float:
        bad.append(Bad([name, "nan"], float("nan"), "not finite"))
    if metadata.get("check"):
        refused = [value for value in (-1.0, 2.0, 1e9) if metadata["check"](value)]
        assert refused, f"{name}: its check takes every number tried"
        bad.append(Bad([name, str(refused[0])], refused[0], "a value its check refuses"))
    return bad


CASES = [(task, field.name) for task in train.TASKS for field, _ in declared(task)]


@pytest.fixture
def places(tmp_path, monkeypatch):
    """An empty working folder, the folders a run would write (under out/, which must stay absent) and the
    paths of bad values (under files/)."""
    for folder in ("cwd", "files", "out"):
        (tmp_path / folder).mkdir()
    (tmp_path / "out").rmdir()
    (tmp_path / "files" / "a_file").write_text("x")
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("KSEQ_CACHE_DIR", str(tmp_path / "out" / "cache"))
    return {"root": tmp_path, "missing": str(tmp_path / "files" / "missing"),
            "under_file": str(tmp_path / "files" / "a_file" / "x"),
            "folders": ["--logdir", str(tmp_path / "out" / "runs"), "--export-dir", str(tmp_path / "out" / "exports"),
                        "--xla-cache", str(tmp_path / "out" / "xla")]}


def refusal(task, argv, capsys, monkeypatch):
    """The one line `kseq-train TASK ARGV` is refused with, parsed in this process."""
    monkeypatch.setattr(sys, "argv", [f"kseq-train {task}"])  # argparse names the program after it
    with pytest.raises(SystemExit) as stop:
        MODULES[task].parse_args(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2, err
    return one_line(task, err)


def one_line(task, err):
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"kseq-train {task}: error: "), err
    return lines[0]


def nothing_written(places):
    assert os.listdir(places["root"] / "cwd") == [] and not os.path.exists(places["root"] / "out")


@pytest.mark.parametrize("task, name", CASES, ids=[f"{task} --{name}" for task, name in CASES])
def test_every_bad_value_of_every_option_is_refused_in_one_line(places, capsys, monkeypatch, task, name):
    field, kind = next((field, kind) for field, kind in declared(task) if field.name == name)
    for bad in bad_values(field, kind, places):
        line = refusal(task, places["folders"] + bad.argv, capsys, monkeypatch)
        assert flag(name) in line and any(words in line for words in SAYS_WHAT_IS_EXPECTED), (bad.why, line)
        config = places["root"] / "files" / f"{name}.yaml"
        config.write_text(yaml.safe_dump({name.replace("_", "-"): bad.config}))
        folders = [arg for pair in zip(*[iter(places["folders"])] * 2) if pair[0] != flag(name) for arg in pair]
        line = refusal(task, folders + ["--config", str(config)], capsys, monkeypatch)
        assert f"--config {config}" in line and name.replace("_", "-") in line, (bad.why, line)
        nothing_written(places)


@pytest.fixture
def no_run_starts(monkeypatch):
    """A run that would start is a failure here, not minutes of training."""
    def start(*args, **kwargs):
        raise AssertionError("the run started: the value was not refused at parse time")

    monkeypatch.setattr(task_steps, "start", start)


@pytest.mark.parametrize("task", train.TASKS)
def test_python_m_refuses_every_option_alike(places, capsys, monkeypatch, no_run_starts, task):
    """`python -m kseq.cli.train <task>`: the first bad value of each option, through `kseq-train TASK`'s own path."""
    for field, kind in declared(task):
        bad = bad_values(field, kind, places)[0]
        monkeypatch.setattr(sys, "argv", ["train.py", task, *places["folders"], *bad.argv])
        with pytest.raises(SystemExit) as stop:
            runpy.run_module("kseq.cli.train", run_name="__main__", alter_sys=False)
        err = capsys.readouterr().err
        assert stop.value.code == 2 and flag(field.name) in one_line(task, err), err
        nothing_written(places)


def test_every_default_and_preset_is_one_its_declarations_take(places, monkeypatch, capsys):
    """The checks pass over a task's defaults (a default is its declaration's own): each must be in its range
    and among its choices here, and each preset must parse."""
    for task, module in MODULES.items():
        for field, kind in declared(task):
            can_be_auto = accepts.value_type(typing.get_type_hints(module.Options)[field.name])[1]
            other_default = types.SimpleNamespace(name=field.name, default=object(), metadata=field.metadata)
            assert accepts.value_problem(other_default, field.default, can_be_auto) is None, (task, field.name)
        assert module.Options().problems() == [], task
        for preset in getattr(module, "PRESETS", {}):
            monkeypatch.setattr(sys, "argv", [f"kseq-train {task}"])
            assert module.parse_args(places["folders"] + ["--preset", preset]).preset == preset
    assert capsys.readouterr().err == ""


def test_what_an_option_needs_is_an_option_of_its_task():
    """`needs={"arch": "rnn"}` names options that exist: a misspelt one would never apply."""
    for task in train.TASKS:
        names = {field.name for field, _ in declared(task)}
        for field, _ in declared(task):
            assert set(field.metadata.get("needs") or ()) <= names, (task, field.name)


def finished_run(folder, task, **architecture):
    """A folder as a finished run of `task` leaves it, for `--init-from` (its weights are not read at parse time)."""
    os.makedirs(folder)
    with open(os.path.join(folder, OPTIONS_FILE), "w") as f:
        json.dump({"recipe": task, **architecture}, f)
    open(os.path.join(folder, TRAINED_WEIGHTS), "wb").close()
    return folder


# (task, argv, the message after "kseq-train TASK: error: "): each rule that ties options together.
CROSS_ROWS = [
    ("translate", ["--num-heads", "5"],
     "--num-heads 5: does not divide --d-model 192: expected a divisor of 192, such as 4 or 6"),
    ("translate", ["--d-model", "100", "--num-heads", "8"],
     "--num-heads 8: does not divide --d-model 100: expected a divisor of 100, such as 5 or 10"),
    ("classify", ["--encoder", "transformer", "--num-heads", "5"],
     "--num-heads 5: does not divide --embed-dim 128: expected a divisor of 128, such as 4 or 8"),
    ("translate", ["--cell", "gru"], "--cell needs --arch rnn"),
    ("translate", ["--attention", "dot"], "--attention needs --arch rnn"),
    ("translate", ["--units", "64"], "--units needs --arch rnn"),
    ("translate", ["--embed-dim", "64"], "--embed-dim needs --arch rnn"),
    ("translate", ["--embedding-stddev", "0.5"], "--embedding-stddev needs --arch rnn"),
    ("translate", ["--bidirectional"], "--bidirectional needs --arch rnn"),
    ("translate", ["--peeky"], "--peeky needs --arch rnn"),
    ("translate", ["--reverse-source"], "--reverse-source needs --arch rnn"),
    ("translate", ["--arch", "rnn", "--attention", "bahdanau", "--input-feeding"],
     "--input-feeding needs --arch rnn and --attention dot, general or concat"),
    ("translate", ["--arch", "rnn", "--d-model", "64"], "--d-model needs --arch transformer"),
    ("translate", ["--arch", "rnn", "--num-heads", "2"], "--num-heads needs --arch transformer"),
    ("translate", ["--arch", "rnn", "--ff-dim", "64"], "--ff-dim needs --arch transformer"),
    ("translate", ["--token-budget", "8", "--max-length", "16"], "--token-budget must be >= --max-length"),
    ("translate", ["--export-ctranslate2", "{out}/ct2", "--arch", "rnn"],
     "--export-ctranslate2 needs --arch transformer"),
    ("reverse", ["--cell", "lstm"], "--cell needs --arch rnn"),
    ("reverse", ["--attention", "dot"], "--attention needs --arch rnn"),
    ("reverse", ["--min-length", "10", "--max-length", "5"],
     "--max-length 5: under --min-length 10: expected at least as many letters"),
    ("classify", ["--encoder", "transformer", "--pooling", "last"], "--pooling last needs --encoder rnn"),
    ("classify", ["--num-heads", "2"], "--num-heads needs --encoder transformer"),
    ("classify", ["--ff-dim", "64"], "--ff-dim needs --encoder transformer"),
    ("classify", ["--encoder", "transformer", "--bidirectional"], "--bidirectional needs --encoder rnn"),
    ("language_model", ["--embed-dim", "8", "--units", "16"],
     "tied weights need --embed-dim == --units (or pass --no-tie-weights)"),
    ("language_model", ["--vocab-size", "300", "--top-k", "400"],
     "--top-k 400: over --vocab-size 300: expected at most the vocabulary's size"),
    ("generate_reviews", ["--vocab-size", "300", "--top-k", "400"],
     "--top-k 400: over --vocab-size 300: expected at most the vocabulary's size"),
    ("generate_reviews", ["--classifier-export", "{out}/classifiers", "--classifier-args", "--epochs 0"],
     "--classifier-args --epochs 0: kseq-train classify refuses it: --epochs must be >= 1; got 0"),
    ("caption", ["--init-from", "{caption_run}"], "--init-from is not supported by kseq-train caption"),
    ("language_model", ["--init-from", "{lm_run}", "--units", "64", "--embed-dim", "64"],
     "--embed-dim 64 differs from the --init-from run's 32: its weights need the same architecture"),
    ("language_model", ["--init-from", "{lm_run}", "--tokenizer", "{lm_run}/options.json"],
     "--init-from takes the run's tokenizer (its ids are the weights' vocabulary); drop --tokenizer"),
    ("classify", ["--init-from", "{lm_run}"], "--init-from {lm_run}: a run of recipe 'language_model', not 'classify'"),
]


@pytest.mark.parametrize("task, argv, message", CROSS_ROWS, ids=[" ".join([t, *a]) for t, a, _ in CROSS_ROWS])
def test_each_rule_across_options_is_refused_in_one_line(places, capsys, monkeypatch, task, argv, message):
    root = places["root"]
    paths = {"out": str(root / "out"), "lm_run": str(root / "files" / "lm_run"),
             "caption_run": str(root / "files" / "caption_run")}
    finished_run(paths["lm_run"], "language_model", cell="lstm", num_layers=1, embed_dim=32, units=32,
                 tie_weights=True)
    finished_run(paths["caption_run"], "caption", cell="lstm", num_layers=1, embed_dim=64, units=256)
    line = refusal(task, places["folders"] + [arg.format(**paths) for arg in argv], capsys, monkeypatch)
    assert line == f"kseq-train {task}: error: {message.format(**paths)}"
    nothing_written(places)


def test_an_init_from_run_gives_its_architecture_to_the_rules(places, capsys, monkeypatch):
    """An RNN run to start from makes the RNN's options its own: they need --arch rnn, which the run gives."""
    run = finished_run(str(places["root"] / "files" / "rnn_run"), "translate", arch="rnn", cell="gru", units=64,
                       d_model=192)
    monkeypatch.setattr(sys, "argv", ["kseq-train translate"])
    options = MODULES["translate"].parse_args(places["folders"] + ["--init-from", run, "--cell", "gru"])
    assert (options.arch, options.cell, options.units) == ("rnn", "gru", 64)
    written = places["root"] / "files" / "config.yaml"
    written.write_text(yaml.safe_dump(config_values(options)))
    assert "cell" in options.options_given and "d_model" in options.options_given, "adopted: no auto resizes them"
    assert MODULES["translate"].parse_args(["--config", str(written)]) == options, "the config it wrote runs again"
    assert refusal("translate", places["folders"] + ["--init-from", run, "--cell", "lstm"], capsys, monkeypatch) == (
        "kseq-train translate: error: --cell lstm differs from the --init-from run's gru: its weights need the same "
        "architecture")


def test_a_rule_across_options_names_the_config_file_and_its_keys(places, capsys, monkeypatch):
    config = places["root"] / "files" / "heads.yaml"
    config.write_text("num_heads: 5\nd-model: 64\n")
    line = refusal("translate", places["folders"] + ["--config", str(config)], capsys, monkeypatch)
    assert line == (f"kseq-train translate: error: --num-heads 5: does not divide --d-model 64: expected a divisor "
                    f"of 64, such as 4 or 8 (from --config {config}: num-heads: 5, d-model: 64)")
    line = refusal("translate", places["folders"] + ["--config", str(config), "--d-model", "62"], capsys,
                   monkeypatch)
    assert line.endswith(f"(from --config {config}: num-heads: 5)"), "a flag given overrides the file's key"


def test_the_issues_commands_in_this_process(places, capsys, monkeypatch, no_run_starts):
    """The five commands of the issue, through `kseq-train`'s entry point."""
    monkeypatch.setattr(sys, "argv", ["kseq-train"])
    logdir = str(places["root"] / "out" / "r")
    rows = [
        (["--max-minutes", "-3", "--logdir", logdir], "--max-minutes must be > 0; got -3.0"),
        (["--num-heads", "5", "--logdir", logdir],
         "--num-heads 5: does not divide --d-model 192: expected a divisor of 192, such as 4 or 6"),
        (["--dropout", "1.5", "--logdir", logdir], "--dropout must be in [0, 1); got 1.5"),
        (["--vocab-size", "2"], "--vocab-size must be auto or >= 261; got 2"),
    ]
    if os.path.isdir("/proc"):
        rows.append((["--logdir", "/proc/x"],
                     "--logdir /proc/x: cannot write in /proc: expected a folder this user can write in"))
    for argv, message in rows:
        with pytest.raises(SystemExit) as stop:
            train.main(["translate", *argv])
        assert (stop.value.code, capsys.readouterr().err) == (2, f"kseq-train translate: error: {message}\n")
        nothing_written(places)


def test_the_installed_command_and_python_m_refuse_before_writing(tmp_path):
    """Child processes, as a user runs them: one line, status 2, no folder, no traceback (two of the issue's
    commands; the others run through the same entry point in this process, above)."""
    env = subprocess_env(KSEQ_CACHE_DIR=str(tmp_path / "cache"))
    kseq_train = os.path.join(os.path.dirname(sys.executable), "kseq-train")
    commands = {
        "--max-minutes must be > 0; got -3.0": [kseq_train, "translate", "--max-minutes", "-3", "--logdir", "r5"],
        "--dropout must be in [0, 1); got 1.5": [sys.executable, "-m", "kseq.cli.train", "translate",
                                                 "--dropout", "1.5", "--logdir", "r7"],
    }
    work = tmp_path / "work"
    work.mkdir()
    running = {message: subprocess.Popen(command, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True) for message, command in commands.items()}
    for message, process in running.items():
        out, err = process.communicate(timeout=300)
        assert (process.returncode, err.splitlines()) == (2, [f"kseq-train translate: error: {message}"]), err
    assert os.listdir(work) == [], "no run folder, no export, no config written"


def test_a_vocabulary_too_small_for_the_texts_says_the_smallest_that_works():
    """SentencePiece's own message names its internals (`trainer_interface.cc(638) ...`); kseq's names the size."""
    from kseq.data.subword_tokenizer import BASE_PIECES, SubwordTokenizer, VocabularyTooSmall

    texts = ["abc abd", "dab cab"] * 10  # a, b, c, d and the space
    with pytest.raises(VocabularyTooSmall, match=r"`vocab_size` 262 is too small for these texts: expected at least "
                                                 r"265 \(the 260 base pieces, special ids and bytes, and one for each "
                                                 r"of their 5 characters\)") as error:
        SubwordTokenizer.train(texts, BASE_PIECES + 2)
    assert (error.value.vocab_size, error.value.needed) == (262, 265)
    with pytest.raises(VocabularyTooSmall, match=r"expected at least 261"):
        SubwordTokenizer.train(texts, 2)
    assert SubwordTokenizer.train(texts, 265).vocab_size == 265


def test_a_top_k_over_the_vocabulary_the_run_ended_with_is_a_usage_error():
    from kseq.errors import UsageError
    from kseq.training.config import SamplingOptions

    SamplingOptions(top_k=40).check_vocabulary(40)
    with pytest.raises(UsageError, match=r"^--top-k 41: over the vocabulary's 40 pieces: expected at most 40$"):
        SamplingOptions(top_k=41).check_vocabulary(40)
