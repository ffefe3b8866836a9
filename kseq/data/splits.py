"""A task's training, validation and test data, from the user's files or
the task's default data set: the training files scanned once
(`kseq.data.corpus.scan_corpus`: they are streamed while training), the
validation and test examples read into memory, and validation examples
held out of the training files by line number where no validation file
is given. The data step every text task starts with."""

import dataclasses

from kseq.data.corpus import CorpusScan, corpus_files, raw_lines, scan_corpus
from kseq.data.text import normalize_text
from kseq.data.tsv import DOCUMENT, EMPTY_LINE, LABELLED, NOT_UTF8, PAIR, format_problems, no_good_line
from kseq.data.tsv import read_tsv
from kseq.errors import UsageError


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
                seed=0, count_labels=False):
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
        count_labels: count the second column's labels (`CorpusScan.labels`);
            the lines are then `text<TAB>label`, as messages name them.

    Returns:
        `Splits`; the training files' bad lines are printed.

    Raises:
        UsageError: a file that cannot be read, holds no good line, or no
            line to hold out; the message names the option, the file, the
            first bad line and what was expected.
    """
    option = f"--train-{kind}"
    columns = DOCUMENT if kind == "txt" else LABELLED if count_labels else PAIR
    if train:
        files = corpus_files(train, option)
        hold_out = None if valid else hold_out
    else:
        files, default_valid, default_test = default()
        hold_out = None
    try:
        corpus = scan_corpus(files, vocab_sample, seed, hold_out, count_labels=count_labels,
                             fields=2 if kind == "tsv" else 1)
    except UsageError as error:
        if not train:  # the task's own data: not the user's mistake
            raise
        raise UsageError(f"{option} {error}") from None
    if corpus.bad:
        print(f"train: {corpus.describe_problems()}")
    if not train:
        return Splits(corpus, default_valid, default_test, held_out=False)
    held = corpus.valid if kind == "tsv" else corpus.valid[0]
    valid_examples = read_files(valid, "valid", kind, columns) if valid else held
    if not (valid_examples[0] if kind == "tsv" else valid_examples):
        rule = f" (line 1 and every {hold_out.every}th line after it are held out)" if hold_out else ""
        raise UsageError(f"{option} {train}: no good line to hold out for validation{rule}; pass --valid-{kind}")
    test_examples = read_files(test, "test", kind, columns) if test else valid_examples
    return Splits(corpus, valid_examples, test_examples, held_out=hold_out is not None)


def read_files(files, role, kind, columns):
    """Reads the validation or test files of a task, named as `--<role>-<kind>`.

    Args:
        files: a path, a glob or several joined by commas, plain or gzip.
        role: "valid" or "test".
        kind: "tsv" (two columns a line) or "txt" (a document a line).
        columns: the names of a line's columns, for messages.

    Returns:
        `read_tsv_files`' columns, or `read_text_files`' documents.

    Raises:
        UsageError: as `read_tsv_files` and `read_text_files`.
    """
    if kind == "tsv":
        return read_tsv_files(files, role, columns)
    return read_text_files(files, role)


def read_tsv_files(files, role, columns=PAIR):
    """Reads two-column TSV `files` given as `--<role>-tsv`; bad lines are skipped and reported by file and number.

    Args:
        files: a path, a glob or several joined by commas (see `corpus_files`), plain or gzip.
        role: "train", "valid" or "test", for the option's name and the report.
        columns: the names of the two columns, for messages: `PAIR`
            (default) or `LABELLED`.

    Returns:
        (first column, second column): two equal-length lists of normalized strings.

    Raises:
        UsageError: `files` names no file, or a file has no valid line (the
            message names the option, the file and its first bad line).
    """
    option = f"--{role}-tsv"
    first, second = [], []
    for path in corpus_files(files, option):
        try:
            sources, targets, problems = read_tsv(path, columns=columns)
        except UsageError as error:
            raise UsageError(f"{option} {error}") from None
        if problems:
            print(f"{role}: {format_problems(problems, path, total_lines=len(sources) + len(problems))}")
        first += sources
        second += targets
    return first, second


def read_text_files(files, role):
    """Reads the non-empty lines of UTF-8 text `files` given as `--<role>-txt`, normalized as training reads them.

    Lines go through `kseq.data.text.normalize_text`; those empty after it
    are dropped, and lines that are not UTF-8 are skipped and reported by
    file and number, as the training files' are.

    Args:
        files: a path, a glob or several joined by commas (see `corpus_files`), plain or gzip.
        role: "train", "valid" or "test", for the option's name and the report.

    Returns:
        A list of strings.

    Raises:
        UsageError: `files` names no file, or the files hold no text (the
            message names the option, the file and its first bad line).
    """
    option = f"--{role}-txt"
    paths = corpus_files(files, option)
    lines, first_problem = [], None
    for path in paths:
        try:
            texts, problems = _text_lines(path)
        except UsageError as error:  # a damaged gzip file
            raise UsageError(f"{option} {error}") from None
        skipped = [problem for problem in problems if problem[1] == NOT_UTF8]  # blank lines are no news
        if skipped:
            print(f"{role}: {format_problems(skipped, path, total_lines=len(texts) + len(problems))}")
        if problems and first_problem is None:
            first_problem = (path, *problems[0])
        lines += texts
    if not lines:
        raise UsageError(f"{option} {no_good_line(paths, first_problem, DOCUMENT)}")
    return lines


def _text_lines(path):
    """Reads a text file's lines, normalized.

    Args:
        path: the file, plain or gzip.

    Returns:
        (the non-empty lines, [(line number, reason)] of the blank lines and
        those not UTF-8).

    Raises:
        UsageError: a damaged gzip file (`raw_lines`).
    """
    texts, problems = [], []
    for number, raw in enumerate(raw_lines(path), start=1):
        try:
            text = normalize_text(raw.decode("utf-8"))
        except UnicodeDecodeError:
            problems.append((number, NOT_UTF8))
            continue
        if text:
            texts.append(text)
        else:
            problems.append((number, EMPTY_LINE))
    return texts, problems
