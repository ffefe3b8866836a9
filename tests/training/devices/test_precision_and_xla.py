"""Choosing precision and XLA: by request, or by the measured table."""

import os
import sys

import pytest

from kseq.training.devices import precision
from kseq.training.devices.precision import MEASURED_FASTEST, precision_class, resolve_precision
from kseq.training.devices.xla import (
    MEASURED, XlaCost, decide_jit_compile, enable_persistent_cache, jit_decision, keras_jit_status,
)


def test_precision_is_taken_as_asked_or_looked_up_per_device_class():
    assert resolve_precision("mixed_float16").policy == "mixed_float16"
    for device, (policy, _) in MEASURED_FASTEST.items():
        chosen = resolve_precision("auto", device=device)
        assert chosen.policy == policy and chosen.reason.startswith(f"auto on {device}")
    assert resolve_precision("auto").as_dict()["precision"] == MEASURED_FASTEST[precision_class()][0]
    with pytest.raises(ValueError, match="`precision` must be one of"):
        resolve_precision("float16")


@pytest.mark.parametrize("flags, expected", [
    ("fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni", "cpu-bf16"),
    ("fpu sse2 avx2 amx_bf16 amx_tile", "cpu-bf16"),
    ("fpu sse2 avx2 avx512f avx512_vnni", "cpu"),
])
def test_a_cpu_with_bfloat16_units_is_its_own_device_class(tmp_path, monkeypatch, flags, expected):
    assert not precision.cpu_has_bfloat16_units(str(tmp_path / "missing"))
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: test\nflags\t\t: {flags}\n\n")
    has_units = precision.cpu_has_bfloat16_units(str(cpuinfo))
    assert has_units == (expected == "cpu-bf16")
    monkeypatch.setattr(precision, "cpu_has_bfloat16_units", lambda: has_units)
    monkeypatch.setattr(precision, "device_class", lambda: "cpu")
    assert precision_class() == expected
    assert resolve_precision("auto").policy == MEASURED_FASTEST[expected][0]
    # Tasks whose models were not measured there keep the plain CPU's choice.
    unmeasured = resolve_precision("auto", bfloat16_cpu=False)
    assert unmeasured.policy == MEASURED_FASTEST["cpu"][0]
    assert unmeasured.reason.startswith(f"auto on {expected}")
    # Or whose models were measured to learn better in float32 there.
    worse = resolve_precision("auto", bfloat16_cpu="float32 learned more in the budget")
    assert worse.policy == MEASURED_FASTEST["cpu"][0]
    if expected == "cpu-bf16":
        assert worse.reason == "auto on cpu-bf16, float32 learned more in the budget"


def test_auto_xla_weighs_the_budget_against_compile_time():
    fast = {"cpu": XlaCost(1.25, 10.0, "a device where XLA is 1.25x faster")}
    # 6 shapes cost 60 s; each minute of budget saves 12 s: it pays beyond 5 minutes.
    assert decide_jit_compile("auto", 6, budget_minutes=6, device="cpu", measured=fast).use
    assert not decide_jit_compile("auto", 6, budget_minutes=4, device="cpu", measured=fast).use
    assert decide_jit_compile("auto", 6, budget_minutes=None, device="cpu", measured=fast).use
    # As measured here, neither device class trains faster under XLA.
    for device in ("cpu", "gpu"):
        assert MEASURED[device].speedup < 1
        assert not decide_jit_compile("auto", 1, budget_minutes=600, device=device).use
    assert decide_jit_compile("on", 50, budget_minutes=1).use
    assert not decide_jit_compile("off", 1, budget_minutes=None).use
    with pytest.raises(ValueError, match="`jit_compile` must be one of"):
        decide_jit_compile("yes", 1)


def test_keras_declining_xla_is_reported():
    class Declined:
        jit_compile = False

    decision = decide_jit_compile("on", 3)
    ran, reason = keras_jit_status(Declined(), decision)
    assert not ran and "keras declined XLA" in reason
    ran = jit_decision(Declined(), decision)
    assert ran.metrics() == {"jit_compile": False, "jit_compile_reason": reason, "jit_compile_requested": "on"}


def test_the_persistent_cache_goes_into_tf_xla_flags(tmp_path, monkeypatch):
    monkeypatch.setenv("TF_XLA_FLAGS", "--tf_xla_auto_jit=0")
    assert enable_persistent_cache(str(tmp_path / "a")) == str(tmp_path / "a")
    assert os.environ["TF_XLA_FLAGS"] == f"--tf_xla_auto_jit=0 --tf_xla_persistent_cache_directory={tmp_path / 'a'}"
    assert enable_persistent_cache() == str(tmp_path / "a"), "None keeps the folder already named"
    assert enable_persistent_cache(str(tmp_path / "b")) == str(tmp_path / "b"), "a named folder wins"
    assert os.environ["TF_XLA_FLAGS"] == f"--tf_xla_auto_jit=0 --tf_xla_persistent_cache_directory={tmp_path / 'b'}"
    assert os.path.isdir(tmp_path / "a") and os.path.isdir(tmp_path / "b")
    monkeypatch.setenv("TF_XLA_FLAGS", "")
    monkeypatch.setenv("KSEQ_CACHE_DIR", str(tmp_path / "kseq"))
    assert enable_persistent_cache().startswith(str(tmp_path / "kseq" / "xla" / "tf-"))


class AskedForDevices(Exception):
    """Stops a task at its first device query."""


@pytest.mark.parametrize("entry", ["main", "kseq-train"])
@pytest.mark.parametrize("name", ["translate", "language_model", "classify", "generate_reviews", "caption", "reverse"])
def test_a_task_names_the_xla_cache_before_it_first_asks_for_devices(name, entry, tmp_path, monkeypatch):
    """TensorFlow reads TF_XLA_FLAGS at its first device query and ignores
    later changes; the "auto" decisions query devices, and `kseq-train`
    lists the GPUs before the task runs (its quiet start), so each path
    must name the cache before them, or nothing compiled is ever kept."""
    import importlib

    import tensorflow as tf

    from kseq.cli import train

    flags_when_asked = []

    def list_physical_devices(device_type=None):
        flags_when_asked.append(os.environ.get("TF_XLA_FLAGS", ""))
        raise AskedForDevices

    monkeypatch.delenv("TF_XLA_FLAGS", raising=False)
    monkeypatch.setattr(tf.config, "list_physical_devices", list_physical_devices)
    monkeypatch.setattr(sys, "argv", ["kseq-train"])  # the command names its program there
    argv = ["--logdir", str(tmp_path / "runs"), "--export-dir", str(tmp_path / "export"),
            "--xla-cache", str(tmp_path / "xla")]
    with pytest.raises(AskedForDevices):
        importlib.import_module(f"kseq.tasks.{name}").main(argv) if entry == "main" else train.run(name, argv)
    assert f"--tf_xla_persistent_cache_directory={tmp_path / 'xla'}" in flags_when_asked[0].split()
