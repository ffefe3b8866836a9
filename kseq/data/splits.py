"""A task's training, validation and test data, from the user's files or
the task's default data set: the training files scanned once
(`kseq.data.corpus.scan_corpus`: they are streamed while training), the
validation and test examples read into memory, and validation examples
held out of the training files by line number where no validation file
is given. The data step every text task starts with."""

import dataclasses

from kseq.data.corpus import CorpusScan, corpus_files, raw_lines, scan_corpus
from kseq.data.text import normalize_text
from kseq.data.tsv import format_problems, read_tsv


@dataclasses.dataclass
class Splits:
    """What `read_splits` found.

    Attributes:
        train: the training files' `CorpusScan` (files, bad lines, a sample,
            labels when counted).
        valid, test: the held-out examples as columns: (sources, targets) or
            (texts, labels) of two-column lines, a list of documents of
            one-column ones.
        held_out: whether `valid` was taken from the training files.
    """

    train: CorpusScan
    valid: tuple | list
    test: tuple | list
    held_out: bool


def read_splits(train, valid=None, test=None, *, kind="tsv", default=None, hold_out=None, vocab_sample=100_000,
                seed=0, count_labels=False, exit_on_scan_error=True):
    """The three splits of a task's data.

    Args:
        train: the training files (a path, a glob, or several joined by
            commas, plain or gzip), or None for the task's default data.
        valid, test: the validation and test files, or None: validation is
            then held out of `train` (`hold_out`) and tests with it.
        kind: "tsv" (two columns a line, the options `--train-tsv` ...) or
            "txt" (a document a line, `--train-txt` ...).
        default: `() -> (training files, valid, test)` of the default data.
        hold_out: the `HoldOut` of validation lines when `valid` is None.
        vocab_sample, seed: the training sample kept for the vocabulary.
        count_labels: count the second column's labels (`CorpusScan.labels`).
        exit_on_scan_error: a training file the scan refuses (empty, not
            text) exits naming the option; False: the scan's ValueError
            propagates (the translation task's behaviour, which its users'
            code may catch).

    Returns:
        `Splits`; the training files' bad lines are printed.

    Raises:
        SystemExit: a file that cannot be read, or no line to hold out,
            with a message naming the option.
    """
    option = f"--train-{kind}"
    if train:
        files = corpus_files(train, option)
        hold_out = None if valid else hold_out
    else:
        files, default_valid, default_test = default()
        hold_out = None
    try:
        corpus = scan_corpus(files, vocab_sample, seed, hold_out, count_labels=count_labels,
                             fields=2 if kind == "tsv" else 1)
    except ValueError as error:
        if not exit_on_scan_error:
            raise
        raise SystemExit(f"{option}: {error}") from None
    if corpus.bad:
        print(f"train: {corpus.describe_problems()}")
    if not train:
        return Splits(corpus, default_valid, default_test, held_out=False)
    read = read_tsv_files if kind == "tsv" else read_text_files
    held = corpus.valid if kind == "tsv" else corpus.valid[0]
    valid_examples = read(valid, "valid") if valid else held
    if not (valid_examples[0] if kind == "tsv" else valid_examples):
        raise SystemExit(f"{option} {train}: no good line to hold out for validation; pass --valid-{kind}")
    test_examples = read(test, "test") if test else valid_examples
    return Splits(corpus, valid_examples, test_examples, held_out=hold_out is not None)


def read_tsv_files(files, role):
    """Reads two-column TSV `files` given as `--<role>-tsv`; bad lines are skipped and reported by file and number.

    Args:
        files: a path, a glob or several joined by commas (see `corpus_files`), plain or gzip.
        role: "train", "valid" or "test", for the option's name and the report.

    Returns:
        (first column, second column): two equal-length lists of normalized strings.

    Raises:
        ValueError: `files` names no file, or a file has no valid line.
    """
    first, second = [], []
    for path in corpus_files(files, f"--{role}-tsv"):
        sources, targets, problems = read_tsv(path)
        if problems:
            print(f"{role}: {format_problems(problems, path, total_lines=len(sources) + len(problems))}")
        first += sources
        second += targets
    return first, second


def read_text_files(files, role):
    """Reads the non-empty lines of UTF-8 text `files` given as `--<role>-txt`, normalized as training reads them.

    Lines go through `kseq.data.text.normalize_text`; those empty after it are dropped.

    Args:
        files: a path, a glob or several joined by commas (see `corpus_files`), plain or gzip.
        role: "train", "valid" or "test", for the option's name.

    Returns:
        A list of strings.

    Raises:
        ValueError: `files` names no file.
        SystemExit: a file is not UTF-8, or the files hold no text.
    """
    lines = []
    for path in corpus_files(files, f"--{role}-txt"):
        try:
            lines += [normalize_text(raw.decode("utf-8")) for raw in raw_lines(path)]
        except UnicodeDecodeError as error:
            raise SystemExit(f"{path}: not UTF-8 text ({error})") from None
    lines = [line for line in lines if line]
    if not lines:
        raise SystemExit(f"{files}: no text")
    return lines

