"""The commands' quiet start (kseq.cli.quiet_start): TensorFlow's start-up
lines held to TF_CPP_MIN_LOG_LEVEL by a filter process (kseq.cli.stderr_filter)
that forwards each line as it comes, so a crash's last lines reach the user.

The commands' own stderr, as a user's shell gets it, is checked in
test_cli.py and test_task_usage_errors.py (installed scripts); that `import
kseq` changes nothing of the process, in tests/test_package_import.py."""

import os
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from kseq.cli import quiet_start, servable, stderr_filter
from kseq.cli.quiet_start import held_to_log_level, probe_gpus_quietly, quiet_tensorflow_start
from kseq.cli.stderr_filter import kept_lines
from support import subprocess_env

NOTICE = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
INFO = b"I0000 00:00:1796205807.507356   15939 port.cc:153] oneDNN custom operations are on.\n"
WARNING = b"W0000 00:00:1796205807.507356   15939 some_file.cc:7] a warning\n"
ERROR = b"E0000 00:00:1796205809.764003   15939 cuda_platform.cc:52] failed call to cuInit: INTERNAL\n"
FATAL = b"F0000 00:00:1796205809.764003   15939 main.cc:1] the end\n"
PYTHON = b"/x/keras/src/y.py:74: UserWarning: I0000 looks like a log line but is not at the start\n"
TRACEBACK = b"Traceback (most recent call last):\n"
SENTENCEPIECE_INFO = b"normalizer.cc(51) LOG(INFO) precompiled_charsmap is empty. use identity normalization.\n"
SENTENCEPIECE_ERROR = b"model_interface.cc(12) LOG(ERROR) a SentencePiece error\n"
STARTUP = NOTICE + INFO + WARNING + ERROR + PYTHON + FATAL + TRACEBACK


@pytest.mark.parametrize("level, kept", [
    (0, STARTUP),
    (1, WARNING + ERROR + PYTHON + FATAL + TRACEBACK),
    (2, ERROR + PYTHON + FATAL + TRACEBACK),
    (3, PYTHON + FATAL + TRACEBACK),
])
def test_the_absl_lines_below_the_level_go_and_every_other_line_stays(level, kept):
    assert kept_lines(STARTUP, level) == kept


def test_a_line_without_its_newline_is_kept_or_dropped_as_with_one():
    assert kept_lines(INFO.rstrip(b"\n"), 2) == b""
    assert kept_lines(b"tail", 2) == b"tail"


def test_the_block_writes_to_stderr_what_the_level_keeps(monkeypatch, capfd):
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    with held_to_log_level():
        os.write(2, NOTICE + INFO + ERROR)
    assert capfd.readouterr().err.encode() == ERROR
    os.write(2, INFO)  # the descriptor is the real stderr again
    assert capfd.readouterr().err.encode() == INFO


def test_what_the_block_wrote_comes_back_when_it_raises(monkeypatch, capfd):
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    with pytest.raises(RuntimeError, match="an import failed"):
        with held_to_log_level():
            os.write(2, INFO + TRACEBACK)
            raise RuntimeError("an import failed")
    assert capfd.readouterr().err.encode() == TRACEBACK


def test_nothing_is_held_once_tensorflow_is_loaded(capfd):
    with quiet_tensorflow_start():  # tensorflow is in sys.modules here
        os.write(2, INFO)
    assert capfd.readouterr().err.encode() == INFO


def probe_printing(monkeypatch, devices):
    def listed(kind):
        os.write(2, ERROR + WARNING)
        return devices
    monkeypatch.setattr(tf.config, "list_physical_devices", listed)


def test_the_cuda_probes_failure_goes_where_no_gpu_and_no_driver_is_found(monkeypatch, capfd):
    probe_printing(monkeypatch, [])
    monkeypatch.setattr(quiet_start, "nvidia_driver_loaded", lambda: False)
    assert probe_gpus_quietly() == []
    assert capfd.readouterr().err.encode() == WARNING


def test_the_cuda_probes_failure_stays_where_a_driver_is_loaded(monkeypatch, capfd):
    probe_printing(monkeypatch, [])
    monkeypatch.setattr(quiet_start, "nvidia_driver_loaded", lambda: True)
    assert probe_gpus_quietly() == []
    assert capfd.readouterr().err.encode() == ERROR + WARNING


def test_the_cuda_probes_lines_stay_where_a_gpu_is_found(monkeypatch, capfd):
    probe_printing(monkeypatch, ["a GPU"])
    monkeypatch.setattr(quiet_start, "nvidia_driver_loaded", lambda: False)
    assert probe_gpus_quietly() == ["a GPU"]
    assert capfd.readouterr().err.encode() == ERROR + WARNING


def test_sentencepieces_lines_are_held_to_the_level_too():
    assert kept_lines(SENTENCEPIECE_INFO + SENTENCEPIECE_ERROR, 1) == SENTENCEPIECE_ERROR
    assert kept_lines(SENTENCEPIECE_INFO, 0) == SENTENCEPIECE_INFO


def test_a_signatures_first_call_is_held_to_the_level_and_later_calls_are_not(monkeypatch, capfd):
    """kseq-translate's first call builds tensorflow_text's SentencePiece op,
    which logs at INFO whatever the level; a later call's lines are not held."""
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")

    def signature(source):
        os.write(2, SENTENCEPIECE_INFO + SENTENCEPIECE_ERROR)
        return {"translation": tf.constant(["x"])}

    assert servable.call(signature, source=["a"])["translation"].tolist() == [b"x"]
    assert capfd.readouterr().err.encode() == SENTENCEPIECE_ERROR
    servable.call(signature, source=["a"])
    assert capfd.readouterr().err.encode() == SENTENCEPIECE_INFO + SENTENCEPIECE_ERROR


def test_the_commands_choose_level_2_where_the_user_chose_none(monkeypatch):
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    quiet_tensorflow_start()
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "2"
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    quiet_tensorflow_start()
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "0"


def test_the_filter_judges_each_line_whole_however_it_is_read(monkeypatch):
    monkeypatch.setattr(stderr_filter, "_READ_SIZE", 7)  # every line spans several reads
    source_read, source_write = os.pipe()
    target_read, target_write = os.pipe()
    os.write(source_write, STARTUP + INFO + b"a last line without its end")
    os.close(source_write)
    stderr_filter.forward(source_read, target_write, 2)
    os.close(source_read)
    os.close(target_write)
    with os.fdopen(target_read, "rb") as forwarded:
        assert forwarded.read() == kept_lines(STARTUP, 2) + b"a last line without its end"


def test_the_filter_process_needs_the_standard_library_alone():
    done = subprocess.run([sys.executable, "-I", "-S", stderr_filter.__file__, "1"], input=STARTUP,
                          capture_output=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, kept_lines(STARTUP, 1), b"")


def test_a_kept_line_reaches_stderr_while_the_block_still_runs(monkeypatch, capfd):
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    seen = b""
    with held_to_log_level():
        os.write(2, INFO + ERROR)
        deadline = time.monotonic() + 60
        while ERROR not in seen and time.monotonic() < deadline:
            time.sleep(0.02)
            seen += capfd.readouterr().err.encode()
        assert seen == ERROR
    assert capfd.readouterr().err == ""


# What TensorFlow prints before it aborts on a CPU without the instructions it was built for.
FATAL_START = (b"F0000 00:00:1796205807.507356   15939 cpu_feature_guard.cc:95] The TensorFlow library was "
               b"compiled to use AVX instructions, but these aren't available on your machine.\n")
CRASHING_START = """
import os, signal
from kseq.cli.quiet_start import quiet_tensorflow_start
with quiet_tensorflow_start():
    os.write(2, {written!r})
    {death}
"""


@pytest.mark.parametrize("death, signal_number", [("os.abort()", signal.SIGABRT),
                                                  ("os.kill(os.getpid(), signal.SIGSEGV)", signal.SIGSEGV)],
                         ids=["abort", "segfault"])
def test_what_a_crashing_start_wrote_reaches_the_user(death, signal_number):
    """The quiet start holds nothing back: a process that dies inside it
    (TensorFlow's abort, a segfault) leaves its last lines on stderr, less
    those the commands' level drops."""
    env = subprocess_env()
    del env["TF_CPP_MIN_LOG_LEVEL"]  # as a user's shell has it: the commands choose 2
    env.pop("PYTHONFAULTHANDLER", None)  # only what the process wrote itself
    code = CRASHING_START.format(written=NOTICE + INFO + FATAL_START, death=death)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, timeout=120)
    assert done.returncode == -signal_number, done.stderr.decode()[-2000:]
    assert done.stderr == FATAL_START


def open_descriptors():
    return sorted(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else []


@pytest.mark.parametrize("executable", ["sys.executable", "/no/such/python"])
def test_the_block_leaves_no_descriptor_open_and_runs_unfiltered_where_the_filter_cannot_start(
        monkeypatch, capfd, executable):
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    startable = executable == "sys.executable"
    if not startable:
        monkeypatch.setattr(sys, "executable", executable)
    before = open_descriptors()
    with held_to_log_level():
        os.write(2, INFO + ERROR)
    assert capfd.readouterr().err.encode() == (ERROR if startable else INFO + ERROR)
    assert open_descriptors() == before
