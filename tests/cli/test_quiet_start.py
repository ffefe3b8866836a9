"""TensorFlow's start-up lines held to TF_CPP_MIN_LOG_LEVEL (kseq._quiet_start).

The commands' own stderr, as a user's shell gets it, is checked in
test_cli.py and test_task_usage_errors.py (installed scripts)."""

import os

import pytest
import tensorflow as tf

from kseq import _quiet_start
from kseq.cli import servable
from kseq._quiet_start import kept_lines, probe_gpus_quietly, quiet_tensorflow_start

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
    with _quiet_start._stderr_filtered(lambda text: kept_lines(text, 2)):
        os.write(2, NOTICE + INFO + ERROR)
    assert capfd.readouterr().err.encode() == ERROR
    os.write(2, INFO)  # the descriptor is the real stderr again
    assert capfd.readouterr().err.encode() == INFO


def test_what_the_block_wrote_comes_back_when_it_raises(capfd):
    with pytest.raises(RuntimeError, match="an import failed"):
        with _quiet_start._stderr_filtered(lambda text: kept_lines(text, 2)):
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
    monkeypatch.setattr(_quiet_start, "nvidia_driver_loaded", lambda: False)
    assert probe_gpus_quietly() == []
    assert capfd.readouterr().err.encode() == WARNING


def test_the_cuda_probes_failure_stays_where_a_driver_is_loaded(monkeypatch, capfd):
    probe_printing(monkeypatch, [])
    monkeypatch.setattr(_quiet_start, "nvidia_driver_loaded", lambda: True)
    assert probe_gpus_quietly() == []
    assert capfd.readouterr().err.encode() == ERROR + WARNING


def test_the_cuda_probes_lines_stay_where_a_gpu_is_found(monkeypatch, capfd):
    probe_printing(monkeypatch, ["a GPU"])
    monkeypatch.setattr(_quiet_start, "nvidia_driver_loaded", lambda: False)
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
