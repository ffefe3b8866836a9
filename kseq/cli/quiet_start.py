"""The commands' quiet start: TensorFlow's start-up lines held to
TF_CPP_MIN_LOG_LEVEL, and its CUDA probe's failure on a machine without
NVIDIA's driver.

Loading TensorFlow's C++ libraries logs through absl before absl is set up,
and absl then writes every message to stderr whatever TF_CPP_MIN_LOG_LEVEL
says (its notice, then the oneDNN and CUDA-stub INFO lines, twice: once a
library), so every command, a one-line usage error included, would begin
with six such lines. The commands choose level 2 (errors) where the user
chose none, and load TensorFlow with their stderr sent through a filter
process (kseq.cli.stderr_filter) that forwards, line by line as they come,
the lines the level keeps. The process holds nothing back: where loading
TensorFlow kills it (a segfault, TensorFlow's abort on a CPU without the
instructions it was built for), what it wrote still reaches the user.
`held_to_log_level` does the same for an export's first call in the
commands, `probe_gpus_quietly` for the CUDA probe of a command's start.

The library itself changes nothing of the process: this is the commands'.
"""

import contextlib
import os
import re
import subprocess
import sys
import tempfile

from kseq.cli import stderr_filter

LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"
# Errors only: the commands' own lines are what a user reads.
COMMANDS_LEVEL = "2"
# How long the end of a block waits for the filter to forward the last lines
# (it ends at once unless a process the block started holds the pipe still).
_FILTER_WAIT_S = 10


def _min_level():
    try:
        return int(os.environ.get(LEVEL_VARIABLE, "0"))
    except ValueError:  # TensorFlow reads a bad value as 0 too
        return 0


def _filter_process(min_level, source, target):
    """Starts kseq/cli/stderr_filter.py reading file descriptor `source`
    and writing to `target`; None where it cannot start (kseq run from a
    zip, no interpreter to run as in an embedding program)."""
    script = stderr_filter.__file__
    if not os.path.isfile(script):
        return None
    try:
        # -I -S: no site-packages, nothing from the environment, a start of
        # milliseconds. Its own session: a Ctrl-C meant for the command does
        # not end the filter before the command's last lines are through.
        return subprocess.Popen([sys.executable, "-I", "-S", script, str(min_level)],
                                stdin=source, stdout=target, start_new_session=True)
    except (OSError, ValueError):
        return None


def _duplicated_stderr():
    """File descriptor 2 duplicated, Python's buffered stderr flushed first;
    None where there is no fd 2 or no sys.stderr."""
    try:
        sys.stderr.flush()
        return os.dup(2)
    except (OSError, ValueError, AttributeError):
        return None


@contextlib.contextmanager
def _stderr_through_filter(min_level):
    """Runs its block with file descriptor 2 sent through a filter process
    that writes to the real stderr each line `stderr_filter.kept_lines`
    keeps at `min_level`, as it comes; at the block's end fd 2 is restored
    and the filter's last lines are waited for, so the order of lines is
    kept. Runs the block unfiltered where stderr cannot be duplicated or
    the filter cannot start."""
    saved = _duplicated_stderr()
    if saved is None:
        yield
        return
    read_end, write_end = os.pipe()
    process = _filter_process(min_level, read_end, saved)
    os.close(read_end)
    if process is None:
        os.close(write_end)
        os.close(saved)
        yield
        return
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()  # Python's own lines of the block, in order
        os.dup2(saved, 2)  # the pipe's last writer closed: the filter reads its end
        os.close(saved)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(_FILTER_WAIT_S)


@contextlib.contextmanager
def held_to_log_level():
    """Runs its block with what it writes to stderr held to
    TF_CPP_MIN_LOG_LEVEL (as the filter process forwards it): for a first
    call that builds ops whose C++ logs ignore the level (tensorflow_text's
    SentencePiece says "precompiled_charsmap is empty" at INFO for kseq's
    identity-normalised models). Does nothing at level 0."""
    min_level = _min_level()
    if min_level <= 0:
        yield
        return
    with _stderr_through_filter(min_level):
        yield


def quiet_tensorflow_start():
    """The commands' start, around what first imports TensorFlow:
    TF_CPP_MIN_LOG_LEVEL set to 2 where the user set none, and the block's
    stderr `held_to_log_level`; nothing is filtered once TensorFlow is
    loaded (the level is chosen even so)."""
    os.environ.setdefault(LEVEL_VARIABLE, COMMANDS_LEVEL)
    return contextlib.nullcontext() if "tensorflow" in sys.modules else held_to_log_level()


@contextlib.contextmanager
def _stderr_held(filtered):
    """Runs its block with file descriptor 2 sent to a temporary file, then
    writes `filtered(bytes written)` to the real stderr: for a filter that
    needs the block's outcome. Runs the block unfiltered where stderr
    cannot be duplicated."""
    saved = _duplicated_stderr()
    if saved is None:
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            stderr_filter.write_all(2, filtered(held.read()))


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
    is news and is kept. (Which lines go is known only once the GPUs are
    listed, so these few are held until then.)

    Returns:
        The physical GPU devices.
    """
    import tensorflow as tf

    found = []

    def filtered(text):
        if found or nvidia_driver_loaded():
            return text
        return b"".join(line for line in text.splitlines(keepends=True) if not _NO_CUDA_DRIVER.match(line))

    with _stderr_held(filtered):
        found.extend(tf.config.list_physical_devices("GPU"))
    return found
