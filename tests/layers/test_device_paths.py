import pytest
import tensorflow as tf

from kseq.layers import device_paths


def test_force_then_the_environment_then_the_devices(monkeypatch):
    monkeypatch.setattr(device_paths, "FORCE", None)
    monkeypatch.delenv(device_paths.ENVIRONMENT_VARIABLE, raising=False)
    assert device_paths.use_gpu_paths() == bool(tf.config.list_logical_devices("GPU"))
    for value, expected in (("1", True), ("0", False)):
        monkeypatch.setenv(device_paths.ENVIRONMENT_VARIABLE, value)
        assert device_paths.use_gpu_paths() is expected
        monkeypatch.setattr(device_paths, "FORCE", not expected)
        assert device_paths.use_gpu_paths() is (not expected)
        monkeypatch.setattr(device_paths, "FORCE", None)


def test_a_bad_environment_value_is_named(monkeypatch):
    monkeypatch.setattr(device_paths, "FORCE", None)
    monkeypatch.setenv(device_paths.ENVIRONMENT_VARIABLE, "yes")
    with pytest.raises(ValueError, match="KSEQ_GPU_PATHS.*'0' or '1'.*'yes'"):
        device_paths.use_gpu_paths()
