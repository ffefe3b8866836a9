"""Lines in, lines out: what every command reads and writes.

Input is streamed, so a large file never sits in memory and a pipe gets
its answers batch by batch; output to a file goes to a temporary file
beside it, renamed over it only when the command succeeds.
"""

import contextlib
import os
import sys

from kseq._atomic import atomic_writer
from kseq.cli.errors import Failure, UsageError

BOM = "\ufeff"


def is_stdio(path):
    """Tells whether a path means stdin (for --input) or stdout (for --output).

    Args:
        path: the option's value.

    Returns:
        True for no path (None) or "-".
    """
    return path in (None, "-")


def input_name(path):
    """Gives how messages name the input.

    Args:
        path: the --input value.

    Returns:
        "stdin", or the path.
    """
    return "stdin" if is_stdio(path) else path


def check_input(path):
    """Checks, before the model loads, that the command can read --input.

    The messages use the tasks' wording for their input files.

    Args:
        path: the --input value; stdin passes.

    Raises:
        UsageError: `path` is a folder, missing, or not readable.
    """
    if is_stdio(path):
        return
    if os.path.isdir(path):
        raise UsageError(f"--input {path}: is a directory, not a file")
    if not os.path.isfile(path):
        raise UsageError(f"--input {path}: no such file")
    if not os.access(path, os.R_OK):
        raise UsageError(f"--input {path}: not readable (permission denied)")


def check_output(path):
    """Checks, before any work is done, that --output can be written.

    Args:
        path: the --output value; stdout passes.

    Raises:
        UsageError: `path` is a folder, or its folder is missing or not writable.
    """
    if is_stdio(path):
        return
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UsageError(f"--output {path}: is a directory, not a file")
    if not os.path.isdir(folder):
        raise UsageError(f"--output {path}: no such folder {folder}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"--output {path}: folder {folder} is not writable (permission denied)")


def read_lines(path):
    """Reads the input's lines, without the line end (`\\n` or `\\r\\n`) or a leading BOM.

    Only `\\n` ends a line, so a text keeps any other Unicode separator.

    Args:
        path: the --input value (None or "-" for stdin).

    Returns:
        A generator of (line number from 1, text).

    Raises:
        Failure: a line is not UTF-8 (the export would silently replace its
            bytes), or the file cannot be opened.
    """
    with _opened(path) as stream:
        for number, raw in enumerate(stream, 1):
            raw = raw.removesuffix(b"\n").removesuffix(b"\r")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise Failure(f"{input_name(path)} line {number} is not UTF-8 "
                              f"(byte {error.start + 1}: {error.reason})") from None
            yield number, text.removeprefix(BOM) if number == 1 else text


@contextlib.contextmanager
def _opened(path):
    if is_stdio(path):
        yield sys.stdin.buffer
        return
    try:
        stream = open(path, "rb")
    except OSError as error:
        raise Failure(f"--input {path}: {error.strerror}") from None
    with stream:
        yield stream


def interactive(path):
    """Tells whether the input is a terminal.

    A person typing waits for each answer, not for a batch to fill.

    Args:
        path: the --input value.

    Returns:
        True where the input is stdin and stdin is a terminal.
    """
    return is_stdio(path) and sys.stdin.isatty()


def batches(numbered_lines, size):
    """Splits an iterable into lists of up to `size` items, in order.

    Args:
        numbered_lines: any iterable, such as `read_lines`' pairs.
        size: the most items a list holds.

    Returns:
        A generator of lists; only the last may be shorter than `size`.
    """
    batch = []
    for item in numbered_lines:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


@contextlib.contextmanager
def output_stream(path):
    """Opens a binary stream for the answers: stdout, or a file written atomically.

    For a file, a temporary file beside `path` is renamed onto it when the
    block ends without an error, so a failed run leaves `path` as it was
    (and --output may be --input).

    Args:
        path: the --output value (None or "-" for stdout).

    Returns:
        A context manager yielding the binary stream.
    """
    if is_stdio(path):
        yield sys.stdout.buffer
        return
    with atomic_writer(path) as stream:
        yield stream


def write_lines(stream, lines):
    """Writes `lines` as UTF-8, each ended by `\\n`, and flushes.

    A reader at the other end of a pipe gets each batch as soon as it is
    answered.

    Args:
        stream: a binary stream, from `output_stream`.
        lines: the strings to write.
    """
    stream.write("".join(line + "\n" for line in lines).encode("utf-8"))
    stream.flush()
