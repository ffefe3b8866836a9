"""The lines of TensorFlow's C++ logs that TF_CPP_MIN_LOG_LEVEL keeps, and
the filter process that applies it to a stream as it comes.

absl writes TensorFlow's start-up INFO lines (its "All log messages before
absl::InitializeLog() is called are written to STDERR" notice, oneDNN's,
the CUDA stub's) before it reads any level, and tensorflow_text's
SentencePiece logs at INFO whatever the level; `kept_lines` holds both to
the level. Run as a script (`python -I -S stderr_filter.py LEVEL`, by
kseq.cli.quiet_start), it copies its stdin to its stdout a complete line
at a time, less the lines the level drops, until end of file: what a
process wrote before it died reaches the user, as the process need hold
nothing back. The standard library alone, so the filter starts in a few
milliseconds without site-packages.
"""

import os
import re
import sys

# absl's line prefix: severity letter, MMDD, time, thread, file:line].
_ABSL_LINE = re.compile(rb"^([IWEF])\d{4} [\d:.]+ +\d+ \S+:\d+\] ")
# SentencePiece's, in tensorflow_text's ops: file.cc(line) LOG(SEVERITY).
_SENTENCEPIECE_LINE = re.compile(rb"^\S+\.cc\(\d+\) LOG\(([IWEF])[A-Z]*\) ")
_ABSL_NOTICE = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
_SEVERITY = {b"I": 0, b"W": 1, b"E": 2, b"F": 3}
_READ_SIZE = 65536


def kept_lines(text, min_level):
    """`text` (bytes, as written to stderr) without the absl (and
    SentencePiece) log lines whose severity is below `min_level`
    (TF_CPP_MIN_LOG_LEVEL: 0 INFO, 1 WARNING, 2 ERROR, 3 FATAL), nor absl's
    notice once any level is filtered; every other line, a Python warning or
    a traceback, as it was."""
    if min_level <= 0:
        return text
    kept = []
    for line in text.splitlines(keepends=True):
        match = _ABSL_LINE.match(line) or _SENTENCEPIECE_LINE.match(line)
        if match and _SEVERITY[match.group(1)] < min_level:
            continue
        if line.rstrip(b"\r\n") == _ABSL_NOTICE:
            continue
        kept.append(line)
    return b"".join(kept)


def forward(source, target, min_level):
    """Copies file descriptor `source` to `target` until end of file, each
    complete line as soon as it arrives, less those `kept_lines` drops; a
    last line without its end is judged at end of file.

    Where `target` cannot be written (the reader left), the rest is read
    and dropped, so the writer is never blocked on a full pipe.
    """
    pending = b""
    writable = True
    while chunk := os.read(source, _READ_SIZE):
        pending += chunk
        complete = pending.rfind(b"\n") + 1
        if complete:
            writable = writable and write_all(target, kept_lines(pending[:complete], min_level))
            pending = pending[complete:]
    if writable:
        write_all(target, kept_lines(pending, min_level))


def write_all(target, data):
    """Writes all of `data` to file descriptor `target`; False where it
    cannot be written."""
    try:
        while data:
            data = data[os.write(target, data):]
    except OSError:
        return False
    return True


if __name__ == "__main__":
    forward(0, 1, int(sys.argv[1]))  # stdin, stdout
    # Everything went out by os.write: the command waiting for this process
    # need not wait for the interpreter's teardown too.
    os._exit(0)
