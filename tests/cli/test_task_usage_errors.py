"""Every kseq-train task answers a user's mistake the same way: one line,
`kseq-train TASK: error: <message>` on stderr, exit status 2, no
traceback, and no run folder or export left behind. `BAD_INPUTS` is the
table docs/errors.md shows: (kind, task, argv, message, status).

The table runs in this process through `kseq.cli.train.main` (what the
installed command calls): a child process costs seconds of TensorFlow's
import a case. Two child processes show the real commands, `kseq-train`
and `python -m kseq.cli.train <task>`, doing the same.
"""

import gzip
import os
import re
import subprocess
import sys

import pytest

from kseq.cli import train
from kseq.data.corpus import scan_corpus
from kseq.errors import UsageError
from kseq.training.checkpoints import failed_start
from support import subprocess_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEXT_TASKS = ("translate", "classify", "generate_reviews", "language_model")
COLUMNS = {"translate": "source<TAB>target", "classify": "text<TAB>label", "generate_reviews": "text<TAB>label"}
DOCUMENT = "UTF-8 text, one document a line"
HELD_OUT = ("the 1 good line is held out for validation, which leaves none to train on (give more lines, or "
            "validation lines of their own)")
# The files of the mistakes: {name: (file name, bytes)}, bytes None for a folder; `{name}` in argv and
# messages is the path. A line of a 2-line file without a tab: the first line is held out for validation,
# so none is left to train on.
FILES = {
    "bad_pairs": ("bad_pairs.tsv", b"hello\tbonjour\nno tab here\n"),
    "bad_text": ("bad_text.txt", b"in the beginning\n\xff\xfe not UTF-8\n"),
    "empty_tsv": ("empty.tsv", b""),
    "empty_txt": ("empty.txt", b""),
    "no_tabs": ("no_tabs.tsv", b"one column only\nstill one\n"),
    "not_utf8": ("not_utf8.txt", b"\xff\xfe\n"),
    "good_tsv": ("good.tsv", b"the film was great\tpos\nthe film was dull\tneg\nwhat a film\tpos\n"),
    "good_txt": ("good.txt", b"in the beginning\nblessed are\n"),
    "one_label": ("one_label.tsv", b"the film\tpos\nthat film\tpos\nthis film\tpos\n"),
    "locked": ("locked.tsv", b"a\tb\n"),
    "config_key": ("config_key.yaml", b"epoch: 3\n"),
    "config_value": ("config_value.yaml", b"epochs: many\n"),
    "config_range": ("config_range.yaml", b"epochs: 0\n"),
    "junk": ("junk.bin", b"\x00\xff\xfe\x80" * 16),
    "not_a_run": ("not_a_run", None),
    "read_only": ("read_only", None),
}


def data_option(task, role="train"):
    return f"--{role}-{'txt' if task == 'language_model' else 'tsv'}"


def rows():
    """The table: (kind, task, argv, message, status)."""
    table = []

    def add(kind, tasks, argv, message):
        table.extend((kind, task, argv(task), message(task), 2) for task in tasks)

    tsv = ("translate", "classify", "generate_reviews")
    add("a data file that does not exist", TEXT_TASKS, lambda t: [data_option(t), "{missing}"],
        lambda t: f"{data_option(t)} {{missing}}: no such file")
    add("a data file without read permission", TEXT_TASKS, lambda t: [data_option(t), "{locked}"],
        lambda t: f"{data_option(t)} {{locked}}: not readable (permission denied)")
    add("an empty data file", tsv, lambda t: ["--train-tsv", "{empty_tsv}"],
        lambda t: f"--train-tsv {{empty_tsv}}: the file is empty: expected {COLUMNS[t]} lines")
    add("an empty data file", ["language_model"], lambda t: ["--train-txt", "{empty_txt}"],
        lambda t: f"--train-txt {{empty_txt}}: the file is empty: expected {DOCUMENT}")
    add("a data line without a tab (the other held out)", tsv, lambda t: ["--train-tsv", "{bad_pairs}"],
        lambda t: f"--train-tsv {{bad_pairs}}: line 2 has no tab: expected {COLUMNS[t]}; {HELD_OUT}")
    add("a data line not UTF-8 (the other held out)", ["language_model"], lambda t: ["--train-txt", "{bad_text}"],
        lambda t: f"--train-txt {{bad_text}}: line 2 is not UTF-8: expected {DOCUMENT}; {HELD_OUT}")
    add("a validation file without a good line", tsv,
        lambda t: ["--train-tsv", "{good_tsv}", "--valid-tsv", "{no_tabs}"],
        lambda t: f"--valid-tsv {{no_tabs}}: line 1 has no tab: expected {COLUMNS[t]}; no line of the file is good")
    add("a validation file without a good line", ["language_model"],
        lambda t: ["--train-txt", "{good_txt}", "--valid-txt", "{not_utf8}"],
        lambda t: f"--valid-txt {{not_utf8}}: line 1 is not UTF-8: expected {DOCUMENT}; no line of the file is good")
    add("labelled lines of one label", ["classify", "generate_reviews"], lambda t: ["--train-tsv", "{one_label}"],
        lambda t: "--train-tsv {one_label}: every training line has the label 'pos': expected text<TAB>label "
                  "lines with at least 2 distinct labels")
    add("a --config key that is no option", train.TASKS, lambda t: ["--config", "{config_key}"],
        lambda t: "--config {config_key}: 'epoch' is no option of this task; did you mean 'epochs'?")
    add("a --config value of the wrong type", train.TASKS, lambda t: ["--config", "{config_value}"],
        lambda t: "--config {config_value}: epochs must be a whole number; got 'many'")
    add("an --init-from folder that holds no finished run", train.TASKS, lambda t: ["--init-from", "{not_a_run}"],
        lambda t: "--init-from {not_a_run}: no finished run there (no options.json or trained.weights.h5; a task "
                  "writes them when its training ends)")
    add("an --export-dir whose name cannot be made", train.TASKS, lambda t: ["--export-dir", "{long_name}"],
        lambda t: "--export-dir {long_name}: a folder name of 300 bytes cannot be made in {root}: expected names "
                  "of at most {name_max} bytes")
    add("an --export-dir in a folder without write permission", train.TASKS,
        lambda t: ["--export-dir", "{read_only}/exports"],
        lambda t: "--export-dir {read_only}/exports: cannot write in {read_only}: expected a folder this user "
                  "can write in")
    add("a --backbone that keras.applications lacks", ["caption"], lambda t: ["--backbone", "MobileNetV9"],
        lambda t: "--backbone MobileNetV9: keras.applications has no model of that name: expected one such as "
                  "MobileNetV2 or ResNet50")
    add("a --classifier-args value a shell cannot split", ["generate_reviews"],
        lambda t: ["--classifier-args", "--epochs '1"],
        lambda t: "--classifier-args --epochs '1: No closing quotation: expected kseq-train classify's options, as "
                  "a shell splits them")
    add("--jit-compile blocks with a recurrent model", ["translate", "reverse"],
        lambda t: ["--arch", "rnn", "--jit-compile", "blocks"],
        lambda t: "--jit-compile blocks: compiles a TransformerSeq2Seq's blocks, and --arch rnn builds none: "
                  "expected --arch transformer, or --jit-compile auto, on or off")
    add("--jit-compile blocks for a model without Transformer blocks",
        ["language_model", "classify", "generate_reviews", "caption"], lambda t: ["--jit-compile", "blocks"],
        lambda t: "--jit-compile blocks: compiles a TransformerSeq2Seq's blocks, and this task's model has none: "
                  "expected --jit-compile auto, on or off")
    add("a --tokenizer file of another kind", TEXT_TASKS, lambda t: ["--tokenizer", "{junk}"],
        lambda t: "--tokenizer {junk}: `path` {junk} is no tokenizer kseq reads: expected a saved kseq "
                  "tokenizer, a SentencePiece model or a UTF-8 vocabulary.")
    add_option_rows(add)
    return table


def add_option_rows(add):
    """The rows of option values: each checked before the run writes anything (tests/cli/test_option_checks.py
    walks every option of every task)."""
    with_dropout = ("translate", "language_model", "classify", "generate_reviews", "caption")
    add("an option's value of the wrong type", train.TASKS, lambda t: ["--epochs", "abc"],
        lambda t: "argument --epochs: invalid int value: 'abc': expected a whole number >= 1")
    add("an option's value out of its range", train.TASKS, lambda t: ["--max-minutes", "-3"],
        lambda t: "--max-minutes must be > 0; got -3.0")
    add("a dropout rate of 1 or more", with_dropout, lambda t: ["--dropout", "1.5"],
        lambda t: "--dropout must be in [0, 1); got 1.5")
    add("a --config value out of its range", train.TASKS, lambda t: ["--config", "{config_range}"],
        lambda t: "--epochs must be >= 1; got 0 (from --config {config_range}: epochs: 0)")
    add("attention heads that do not divide the width", ["translate"], lambda t: ["--num-heads", "5"],
        lambda t: "--num-heads 5: does not divide --d-model 192: expected a divisor of 192, such as 4 or 6")
    add("attention heads that do not divide the width", ["classify"],
        lambda t: ["--encoder", "transformer", "--num-heads", "5"],
        lambda t: "--num-heads 5: does not divide --embed-dim 128: expected a divisor of 128, such as 4 or 8")
    add("an RNN's option with --arch transformer", ["translate", "reverse"], lambda t: ["--cell", "gru"],
        lambda t: "--cell needs --arch rnn")
    add("a --vocab-size under SentencePiece's smallest", ["translate"], lambda t: ["--vocab-size", "2"],
        lambda t: "--vocab-size must be auto or >= 261; got 2")
    add("a --vocab-size under SentencePiece's smallest", ["language_model", "classify", "generate_reviews"],
        lambda t: ["--vocab-size", "2"], lambda t: "--vocab-size must be >= 261; got 2")
    add("a --vocab-size under what the data's characters need", ["translate"],
        lambda t: ["--train-tsv", "{good_tsv}", "--vocab-size", "262"],
        lambda t: "--vocab-size 262: too small for the training data: expected at least 277 (260 base pieces, the "
                  "special ids and bytes, and one for each of the data's 17 characters)")
    add("a --logdir where no folder can be made", train.TASKS, lambda t: ["--logdir", "/proc/x"],
        lambda t: "--logdir /proc/x: cannot write in /proc: expected a folder this user can write in")


BAD_INPUTS = rows()
PERMISSIONS = ("without read permission", "without write permission")


@pytest.fixture(scope="module")
def bad(tmp_path_factory):
    """{name: path} of `FILES` and the other paths the table names."""
    root = tmp_path_factory.mktemp("bad")
    paths = {"root": str(root), "missing": str(root / "missing.tsv"), "long_name": str(root / ("x" * 300)),
             "name_max": str(os.pathconf(root, "PC_NAME_MAX"))}
    for name, (file_name, content) in FILES.items():
        path = root / file_name
        if content is None:
            path.mkdir()
        else:
            path.write_bytes(content)
        paths[name] = str(path)
    os.chmod(paths["locked"], 0)
    os.chmod(paths["read_only"], 0o555)
    yield paths
    os.chmod(paths["read_only"], 0o755)


def run_folders(task, out):
    """The folders a run of `task` writes, under `out`, as options."""
    folders = {"--logdir": str(out / "runs"), "--export-dir": str(out / "exports")}
    if task == "generate_reviews":  # with none there, it trains a classifier first, on the same data
        folders["--classifier-export"] = str(out / "classifier_exports")
    return folders


def stopped(task, argv):
    """The exit status of `kseq-train TASK ARGV`, run in this process."""
    with pytest.raises(SystemExit) as stop:
        train.main([task, *argv])
    return stop.value.code


@pytest.mark.parametrize("kind, task, argv, message, status", BAD_INPUTS,
                         ids=[f"{task}: {kind}" for kind, task, *_ in BAD_INPUTS])
def test_a_mistake_is_one_line_and_status_2_and_leaves_nothing(bad, tmp_path, monkeypatch, capsys, kind, task, argv,
                                                                message, status):
    if kind.endswith(PERMISSIONS) and overrides_permissions():
        pytest.skip("this process reads and writes whatever the permissions say (root): "
                    "test_the_unreadable_and_unwritable_rows_hold_for_root_without_its_override runs this row")
    monkeypatch.setattr(sys, "argv", ["kseq-train"])  # kseq-train names argparse's program in sys.argv[0]
    monkeypatch.setenv("KSEQ_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    folders = run_folders(task, tmp_path / "out")
    named = [arg.format(**bad) for arg in argv]
    status_seen = stopped(task, [*(item for pair in folders.items() for item in pair), *named])
    err = capsys.readouterr().err
    assert (status_seen, err) == (status, f"kseq-train {task}: error: {message.format(**bad)}\n")
    assert not os.path.exists(tmp_path / "out"), sorted(os.listdir(tmp_path / "out"))
    assert os.listdir(tmp_path / "cwd") == []


# Bits of /proc/self/status's CapEff: CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH.
PERMISSION_OVERRIDES = (1 << 1) | (1 << 2)


def overrides_permissions():
    """Whether this process ignores file permissions (root's capabilities)."""
    with open("/proc/self/status") as status:
        effective = next(line for line in status if line.startswith("CapEff:"))
    return bool(int(effective.split()[1], 16) & PERMISSION_OVERRIDES)


@pytest.mark.e2e
def test_the_unreadable_and_unwritable_rows_hold_for_root_without_its_override():
    """CI runs as root, whom permissions do not stop: the table's rows of a
    file without read permission and a folder without write permission run
    in a child pytest without the two override capabilities (util-linux's
    setpriv), as they would for any other user."""
    if not overrides_permissions():
        pytest.skip("this process obeys file permissions: the rows ran in test_a_mistake_is_one_line_and_status_2_"
                    "and_leaves_nothing itself")
    drop = "-dac_override,-dac_read_search"
    result = subprocess.run(
        ["setpriv", f"--bounding-set={drop}", f"--inh-caps={drop}", sys.executable, "-m", "pytest", "-n", "0", "-q",
         "-p", "no:cacheprovider", os.path.abspath(__file__), "-k", "permission"],
        capture_output=True, text=True, cwd=ROOT, env=subprocess_env(), timeout=600)
    rows = sum(kind.endswith(PERMISSIONS) for kind, *_ in BAD_INPUTS)
    assert result.returncode == 0 and f"{rows} passed" in result.stdout, result.stdout[-3000:] + result.stderr[-2000:]
    assert "skipped" not in result.stdout.splitlines()[-1]


def test_a_run_folder_that_existed_keeps_what_it_held(bad, tmp_path, monkeypatch, capsys):
    """A run to resume: a mistake found after the run started (the data)
    leaves its folder, its files and its config.yaml as they were."""
    monkeypatch.setattr(sys, "argv", ["kseq-train"])
    monkeypatch.setenv("KSEQ_CACHE_DIR", str(tmp_path / "cache"))
    logdir = tmp_path / "runs"
    (logdir / "checkpoints").mkdir(parents=True)
    (logdir / "checkpoints" / "keep.txt").write_text("a save")
    (logdir / "config.yaml").write_text("# the run before's\nepochs: 3\n")
    before = {path: path.read_bytes() for path in logdir.rglob("*") if path.is_file()}
    argv = ["--logdir", str(logdir), "--export-dir", str(tmp_path / "exports"), "--train-tsv", bad["empty_tsv"]]
    assert stopped("translate", argv) == 2
    assert "the file is empty" in capsys.readouterr().err
    assert {path: path.read_bytes() for path in logdir.rglob("*") if path.is_file()} == before
    assert sorted(os.listdir(logdir)) == ["checkpoints", "config.yaml"]


def test_what_a_run_writes_once_it_trains_stays(tmp_path):
    """The undoing covers a failed start only: a run that began training
    keeps its folder whatever stops it, and a start outside kseq-train's
    block (a task's main called from Python) is not recorded."""
    assert failed_start.starting(str(tmp_path / "python")) is None
    with pytest.raises(UsageError), failed_start.undone_on_usage_error():
        trained, failed = (failed_start.starting(str(tmp_path / name)) for name in ("trained", "failed"))
        for name in ("trained", "failed"):
            (tmp_path / name).mkdir()
        failed_start.training(trained)
        raise UsageError("--some-option: a mistake found late")
    assert sorted(os.listdir(tmp_path)) == ["trained"] and failed.made == str(tmp_path / "failed")


def test_a_damaged_gzip_file_names_the_file_and_what_was_expected(tmp_path):
    whole = gzip.compress(b"hello\tbonjour\n" * 2000)
    (tmp_path / "cut.tsv.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(UsageError, match=r"cut.tsv.gz: a damaged gzip file, unreadable after line \d+ \(.*\): "
                                         r"expected a whole gzip file$"):
        scan_corpus([str(tmp_path / "cut.tsv.gz")], cache_dir=tmp_path)


@pytest.mark.e2e
def test_the_installed_command_and_a_recipe_answer_the_same(tmp_path):
    """The issue's command as a user runs it: a two-line TSV whose second
    line has no tab; and `python -m kseq.cli.train classify` with the same file.
    Each prints one line (and no traceback, nor TensorFlow's start-up
    lines at kseq's default log level), exits 2 and leaves no folder."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "bad.tsv").write_bytes(FILES["bad_pairs"][1])
    env = subprocess_env(KSEQ_CACHE_DIR=str(tmp_path / "cache"))
    del env["TF_CPP_MIN_LOG_LEVEL"]  # as a user's shell has it
    commands = {
        "translate": [os.path.join(os.path.dirname(sys.executable), "kseq-train"), "translate"],
        "classify": [sys.executable, "-m", "kseq.cli.train", "classify"],
    }
    for task, command in commands.items():
        done = subprocess.run([*command, "--train-tsv", "bad.tsv", "--max-minutes", "0.1"], cwd=work,
                              capture_output=True, text=True, env=env, timeout=300)
        expected = (f"kseq-train {task}: error: --train-tsv bad.tsv: line 2 has no tab: expected {COLUMNS[task]}; "
                    f"{HELD_OUT}")
        assert (done.returncode, done.stderr.splitlines()) == (2, [expected]), done.stderr[-3000:]
        assert os.listdir(work) == ["bad.tsv"], "no runs/ or savedmodels/ left"


# docs/errors.md shows the table with the paths a user in /data would see.
DOCS = os.path.join(ROOT, "docs", "errors.md")
DOC_PATHS = {"root": "/data", "missing": "/data/missing.tsv", "long_name": "/data/x…x", "name_max": "255",
             **{name: f"/data/{file_name}" for name, (file_name, _) in FILES.items()}}


def documented_rows():
    """The table's lines in docs/errors.md: a task column lists the tasks that answer alike."""
    tasks = {}
    for kind, task, _, message, status in BAD_INPUTS:
        tasks.setdefault((kind, message.format(**DOC_PATHS), status), []).append(task)
    return [f"| {kind} | {', '.join(names)} | ``{message}`` | {status} |"
            for (kind, message, status), names in tasks.items()]


def test_docs_show_the_same_table():
    text = open(DOCS, encoding="utf-8").read()
    shown = [line for line in text.splitlines() if line.startswith("| ") and "``" in line]
    assert shown == documented_rows()
