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
    """No path or "-": stdin for --input, stdout for --output."""
    return path in (None, "-")


def input_name(path):
    """How messages name the input."""
    return "stdin" if is_stdio(path) else path


def check_input(path):
    """Raises UsageError for an --input the command could not read, before
    the model loads (the tasks' wording for their input files)."""
    if is_stdio(path):
        return
    if os.path.isdir(path):
        raise UsageError(f"--input {path}: is a directory, not a file")
    if not os.path.isfile(path):
        raise UsageError(f"--input {path}: no such file")
    if not os.access(path, os.R_OK):
        raise UsageError(f"--input {path}: not readable (permission denied)")


def check_output(path):
    """Raises UsageError for an --output that cannot be written, before
    any work is done."""
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
    """Yields (line number from 1, text) without the line end (`\\n` or
    `\\r\\n`) or a leading BOM; only `\\n` ends a line, so a text keeps any
    other Unicode separator. Raises Failure at the first line that is not
    UTF-8, naming it: the export would silently replace its bytes."""
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
    """Whether the input is a terminal: a person typing waits for each
    answer, not for a batch to fill."""
    return is_stdio(path) and sys.stdin.isatty()


def batches(numbered_lines, size):
    """Lists of up to `size` items, in order."""
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
    """A binary stream for the answers: stdout, or a temporary file beside
    `path` renamed onto it when the block ends without an error, so a
    failed run leaves `path` as it was (and --output may be --input)."""
    if is_stdio(path):
        yield sys.stdout.buffer
        return
    with atomic_writer(path) as stream:
        yield stream


def write_lines(stream, lines):
    """Writes `lines`, each ended by `\\n`, and flushes: a reader at the
    other end of a pipe gets each batch as soon as it is answered."""
    stream.write("".join(line + "\n" for line in lines).encode("utf-8"))
    stream.flush()
