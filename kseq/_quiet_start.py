"""TensorFlow's start-up lines, held to TF_CPP_MIN_LOG_LEVEL, and its
CUDA probe's failure on a machine without NVIDIA's driver.

Loading TensorFlow's C++ libraries logs through absl before absl is set up,
and absl then writes every message to stderr whatever TF_CPP_MIN_LOG_LEVEL
says (its "All log messages before absl::InitializeLog() is called are
written to STDERR" notice, then the oneDNN and CUDA-probe INFO lines, twice:
once a library). Every kseq command, a one-line usage error included, began
with those six lines. Here the import's stderr goes to a file, and what it
wrote comes back less the absl lines below the level asked for.
`held_to_log_level` does the same for an export's first call in the
commands, `probe_gpus_quietly` for the CUDA probe of a command's start.
"""

import contextlib
import os
import re
import sys
import tempfile

# absl's line prefix: severity letter, MMDD, time, thread, file:line].
_ABSL_LINE = re.compile(rb"^([IWEF])\d{4} [\d:.]+ +\d+ \S+:\d+\] ")
# SentencePiece's, in tensorflow_text's ops: file.cc(line) LOG(SEVERITY).
_SENTENCEPIECE_LINE = re.compile(rb"^\S+\.cc\(\d+\) LOG\(([IWEF])[A-Z]*\) ")
_ABSL_NOTICE = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
_SEVERITY = {b"I": 0, b"W": 1, b"E": 2, b"F": 3}


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


def _min_level():
    try:
        return int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0"))
    except ValueError:  # TensorFlow reads a bad value as 0 too
        return 0


@contextlib.contextmanager
def _stderr_filtered(filtered):
    """Runs its block with file descriptor 2 sent to a temporary file, then
    writes `filtered(bytes written)` to the real stderr. Runs the block
    unfiltered where stderr cannot be duplicated."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no fd 2, or no sys.stderr
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()  # Python's own lines of the block, in order
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            text = filtered(held.read())
            while text:
                text = text[os.write(2, text):]


@contextlib.contextmanager
def held_to_log_level():
    """Runs its block with what it writes to stderr held back, then writes
    back what TF_CPP_MIN_LOG_LEVEL keeps: for a first call that builds ops
    whose C++ logs ignore the level (tensorflow_text's SentencePiece says
    "precompiled_charsmap is empty" at INFO for kseq's identity-normalised
    models). Does nothing at level 0."""
    min_level = _min_level()
    if min_level <= 0:
        yield
        return
    with _stderr_filtered(lambda text: kept_lines(text, min_level)):
        yield


def quiet_tensorflow_start():
    """`held_to_log_level` for the first import of TensorFlow; nothing once
    TensorFlow is loaded."""
    return contextlib.nullcontext() if "tensorflow" in sys.modules else held_to_log_level()


_NO_CUDA_DRIVER = re.compile(rb"^E\d{4} [\d:.]+ +\d+ \S+:\d+\] failed call to cuInit: ")


def nvidia_driver_loaded():
    """Whether NVIDIA's kernel driver is loaded (Linux: /proc/driver/nvidia)."""
    return os.path.exists("/proc/driver/nvidia")


def probe_gpus_quietly():
    """Lists the GPUs, which loads CUDA's driver where TensorFlow was built
    with CUDA, at a known point: a command's start.

    On a machine without an NVIDIA driver that load fails, and TensorFlow
    says so in an ERROR line ("failed call to cuInit: ... UNKNOWN ERROR
    (303)") at every run of every command, where the run's own lines say it
    trains on the CPU. That line is dropped when no GPU was found and no
    driver is loaded (/proc/driver/nvidia); with a driver there, a failure
    is news and is kept.

    Returns:
        The physical GPU devices.
    """
    import tensorflow as tf

    found = []

    def filtered(text):
        if found or nvidia_driver_loaded():
            return text
        return b"".join(line for line in text.splitlines(keepends=True) if not _NO_CUDA_DRIVER.match(line))

    with _stderr_filtered(filtered):
        found.extend(tf.config.list_physical_devices("GPU"))
    return found
