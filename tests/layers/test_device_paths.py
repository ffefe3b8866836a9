import pytest

from kseq.layers import device_paths


def test_no_path_is_on_by_default_on_any_device(monkeypatch):
    """No GPU run has shown a path faster than the one it replaces: none is a default, GPU or not."""
    monkeypatch.setattr(device_paths, "FORCE", None)
    monkeypatch.delenv(device_paths.ENVIRONMENT_VARIABLE, raising=False)
    assert device_paths.enabled_paths() == frozenset()
    assert not device_paths.use_gpu_paths()
    assert not any(device_paths.uses(name) for name in device_paths.PATHS)


def test_force_then_the_environment_each_path_its_own_switch(monkeypatch):
    monkeypatch.setattr(device_paths, "FORCE", None)
    for value, expected in (("1", set(device_paths.PATHS)), ("0", set()),
                            ("layer_norm", {"layer_norm"}),
                            (" compiled_blocks, bias_gradients ", {"compiled_blocks", "bias_gradients"})):
        monkeypatch.setenv(device_paths.ENVIRONMENT_VARIABLE, value)
        assert device_paths.enabled_paths() == expected
        assert {name for name in device_paths.PATHS if device_paths.uses(name)} == expected
    monkeypatch.setenv(device_paths.ENVIRONMENT_VARIABLE, "1")
    for force, expected in ((False, set()), (True, set(device_paths.PATHS)), (["step_dropout"], {"step_dropout"})):
        monkeypatch.setattr(device_paths, "FORCE", force)
        assert device_paths.enabled_paths() == expected
    assert device_paths.use_gpu_paths()


def test_a_bad_value_or_name_is_named(monkeypatch):
    monkeypatch.setattr(device_paths, "FORCE", None)
    monkeypatch.setenv(device_paths.ENVIRONMENT_VARIABLE, "yes")
    with pytest.raises(ValueError, match="KSEQ_GPU_PATHS.*'0', '1' or path names.*layer_norm.*got unknown 'yes'"):
        device_paths.enabled_paths()
    monkeypatch.setattr(device_paths, "FORCE", ["layer_norm", "fast"])
    with pytest.raises(ValueError, match="FORCE.*got unknown 'fast'"):
        device_paths.enabled_paths()
    with pytest.raises(KeyError, match="no device path 'fast'"):
        device_paths.uses("fast")
