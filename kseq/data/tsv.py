"""A user's own parallel corpus: one `source<TAB>target` pair per line."""

import codecs
import gzip
import os

from kseq.data.text import normalize_text
from kseq.errors import UsageError
from kseq._validation import check_choice

# Reasons a line is skipped, as they appear in `problems` and in messages.
NO_TAB = "no tab"
MANY_TABS = "more than one tab"
EMPTY_LINE = "empty line"
EMPTY_SOURCE = "empty source"
EMPTY_TARGET = "empty target"
NOT_UTF8 = "not UTF-8"
GZIP_MAGIC = b"\x1f\x8b"
# What a line holds, as messages name its columns: a translation pair, a
# labelled text (classification, text from a label), a document.
PAIR = ("source", "target")
LABELLED = ("text", "label")
DOCUMENT = ("document",)


def expected_line(columns=PAIR):
    """Says what a good line holds, as the messages about bad lines end.

    Args:
        columns: the names of a line's columns: `PAIR` (default),
            `LABELLED`, or `DOCUMENT` (one text a line).

    Returns:
        "source<TAB>target" for two columns, "UTF-8 text, one document a
        line" for one.

    Example:
    >>> expected_line(LABELLED)
    'text<TAB>label'
    """
    return "<TAB>".join(columns) if len(columns) == 2 else f"UTF-8 text, one {columns[0]} a line"


def bad_line(path, number, reason, columns=PAIR):
    """Names a bad line, what is wrong with it and what was expected, the same way in every task.

    Args:
        path: the file, as the user named it.
        number: the line's number, from 1.
        reason: why the line is bad: `NO_TAB`, `MANY_TABS`, `EMPTY_LINE`,
            `EMPTY_SOURCE`, `EMPTY_TARGET` or `NOT_UTF8`.
        columns: the names of a line's columns (see `expected_line`).

    Returns:
        The message.

    Example:
    >>> bad_line("bad.tsv", 2, NO_TAB)
    'bad.tsv: line 2 has no tab: expected source<TAB>target'
    >>> bad_line("reviews.tsv", 7, EMPTY_TARGET, LABELLED)
    'reviews.tsv: line 7 has an empty label: expected text<TAB>label'
    """
    wrong = {NO_TAB: "has no tab", MANY_TABS: "has more than one tab", EMPTY_LINE: "is blank",
             EMPTY_SOURCE: f"has an empty {columns[0]}", EMPTY_TARGET: f"has an empty {columns[-1]}",
             NOT_UTF8: "is not UTF-8"}[reason]
    return f"{path}: line {number} {wrong}: expected {expected_line(columns)}"


def no_good_line(paths, first_problem=None, columns=PAIR, held_out=0):
    """Says why files give no line to use, naming the first bad line.

    Args:
        paths: the files read, as the user named them.
        first_problem: (path, line number, reason) of the first bad line;
            None (default) where no line is bad.
        columns: the names of a line's columns (see `expected_line`).
        held_out: the good lines held out for validation (default 0):
            they leave none to train on.

    Returns:
        The message.

    Example:
    >>> no_good_line(["bad.tsv"], ("bad.tsv", 2, NO_TAB))
    'bad.tsv: line 2 has no tab: expected source<TAB>target; no line of the file is good'
    >>> no_good_line(["a.tsv", "b.tsv"])
    'a.tsv, b.tsv: the files are empty: expected source<TAB>target lines'
    """
    several = len(paths) > 1
    named = ", ".join(paths)
    if held_out:
        good = f"the {held_out:,} good line{'s are' if held_out > 1 else ' is'}"
        why = (f"{good} held out for validation, which leaves none to train on (give more lines, or validation "
               "lines of their own)")
    elif first_problem:
        why = f"no line of the file{'s' if several else ''} is good"
    else:
        lines = " lines" if len(columns) == 2 else ""
        return f"{named}: the {'files are' if several else 'file is'} empty: expected {expected_line(columns)}{lines}"
    start = f"{bad_line(*first_problem, columns)};" if first_problem else f"{named}:"
    return f"{start} {why}"


def _check_line(raw):
    """One line's bytes -> ((source, target), None) or (None, reason)."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, NOT_UTF8
    if not line.strip():
        return None, EMPTY_LINE
    fields = line.split("\t")
    if len(fields) != 2:
        return None, NO_TAB if len(fields) == 1 else MANY_TABS
    source, target = (normalize_text(field) for field in fields)
    if not source:
        return None, EMPTY_SOURCE
    if not target:
        return None, EMPTY_TARGET
    return (source, target), None


def _describe(problems, limit):
    """'line 4 (no tab), line 7 (empty target) and 3 more'."""
    shown = ", ".join(f"line {number} ({reason})" for number, reason in problems[:limit])
    rest = len(problems) - limit
    return shown + (f" and {rest} more" if rest > 0 else "")


def read_tsv(path, on_error="skip", columns=PAIR):
    """Reads `source<TAB>target` pairs, normalized with `normalize_text`.

    The file is UTF-8 (an optional BOM is ignored), with `\\n` or `\\r\\n`
    line ends, plain or gzip (known by its first bytes). Bad lines are
    collected rather than fatal by default, because a few stray lines in a
    scraped corpus should not stop a run; print `format_problems(...)` so
    they are not silently lost.

    Args:
        path: the file to read.
        on_error: "skip" drops bad lines and reports them in `problems`;
            "raise" raises ValueError if any line is bad.
        columns: the names of the two columns in messages: `PAIR`
            (default, source and target) or `LABELLED` (text and label).

    Returns:
        (sources, targets, problems): two equal-length lists of strings and a
        list of (line_number, reason), line numbers 1-based, for the lines
        skipped: no tab, more than one tab, empty line, empty source, empty
        target or not UTF-8.

    Raises:
        FileNotFoundError: `path` does not exist.
        UsageError: `path` has no valid line (a ValueError; the message
            names the first bad line, `no_good_line`), or is a damaged
            gzip file.
        ValueError: `path` is a directory, or has a bad line when
            on_error="raise".

    Example:
        sources, targets, problems = read_tsv("pairs.tsv")
        if problems:
            print(format_problems(problems, "pairs.tsv", total_lines=len(sources) + len(problems)))
    """
    check_choice("on_error", on_error, ("skip", "raise"))
    path = os.fspath(path)
    lines = _file_lines(path)
    sources, targets, problems = _split_pairs(lines)
    if not sources:
        raise UsageError(no_good_line([path], (path, *problems[0]) if problems else None, columns))
    if problems and on_error == "raise":
        raise ValueError(
            f"{path!r}: {len(problems)} of {len(lines)} lines are not one {expected_line(columns)} "
            f"pair: {_describe(problems, 5)}. Fix them, or pass on_error='skip' to drop them."
        )
    return sources, targets, problems


def _file_lines(path):
    """The lines of a plain or gzip file, as bytes, without their `\\n`.

    Args:
        path: the file (a str).

    Returns:
        A list of bytes, one a line: a UTF-8 BOM removed from the first, no
        empty line for a final newline.

    Raises:
        FileNotFoundError, ValueError: as `read_tsv`.
        UsageError: a damaged gzip file.
    """
    if os.path.isdir(path):
        raise ValueError(
            f"`path` must be a file of source<TAB>target lines; {path!r} is a directory."
        )
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"`path`: no such file {path!r}.") from None
    if data.startswith(GZIP_MAGIC):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as error:
            raise UsageError(f"{path}: a damaged gzip file ({error}): expected a whole gzip file") from None
    # Bytes, not text mode: a bad byte then costs one line, not the whole file.
    lines = data.removeprefix(codecs.BOM_UTF8).split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the final newline ends the last line; it does not start one
    return lines


def _split_pairs(lines):
    """Splits lines into pairs and the reasons bad ones are skipped.

    Args:
        lines: the file's lines (bytes, `\\r\\n` ends allowed).

    Returns:
        (sources, targets, problems) as `read_tsv` returns them.
    """
    sources, targets, problems = [], [], []
    for number, raw in enumerate(lines, start=1):
        pair, reason = _check_line(raw.removesuffix(b"\r"))
        if reason:
            problems.append((number, reason))
        else:
            sources.append(pair[0])
            targets.append(pair[1])
    return sources, targets, problems


def format_problems(problems, path, limit=5, total_lines=None):
    """One-line summary of the lines `read_tsv` skipped, for logs.

    Args:
        problems: the (line_number, reason) list from `read_tsv`.
        path: the file read; only its base name is shown.
        limit: how many problems to spell out.
        total_lines: lines in the file, if known (kept + skipped).

    Returns:
        A string such as "skipped 2 of 120 lines in pairs.tsv: line 4 (no tab),
        line 7 (empty target)", or "" when nothing was skipped.

    Example:
    >>> format_problems([(4, "no tab"), (7, "empty target"), (9, "empty line")],
    ...                 "data/pairs.tsv", limit=2, total_lines=120)
    'skipped 3 of 120 lines in pairs.tsv: line 4 (no tab), line 7 (empty target) and 1 more'
    """
    if not problems:
        return ""
    of_total = f" of {total_lines}" if total_lines is not None else ""
    name = os.path.basename(os.fspath(path))
    noun = "line" if len(problems) == 1 and total_lines is None else "lines"
    return f"skipped {len(problems)}{of_total} {noun} in {name}: {_describe(problems, limit)}"
