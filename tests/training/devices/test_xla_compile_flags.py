"""kseq's XLA compile settings: each its own switch, the user's flags kept,
and every flag one this TensorFlow's XLA accepts (an unknown one aborts)."""

import os
import subprocess
import sys

import pytest

from kseq.training.devices.xla_compile_flags import ENVIRONMENT_VARIABLE, chosen_settings, configure_compilation


def test_the_defaults_split_code_generation_and_keep_the_autotune_cache(tmp_path):
    environment = {}
    lines = dict(configure_compilation(str(tmp_path), cores=16, environment=environment))
    assert environment["XLA_FLAGS"].split() == [
        "--xla_gpu_enable_llvm_module_compilation_parallelism=true", "--xla_gpu_force_compilation_parallelism=16",
        f"--xla_gpu_per_fusion_autotune_cache_dir={tmp_path}/autotune"]
    assert (tmp_path / "autotune").is_dir(), "XLA needs the folder to exist"
    assert "16 cores" in lines["parallel_codegen"] and "off" in lines["kernel_cache"]
    assert lines["autotune_level"].startswith("off (XLA's own)")


def test_each_setting_has_its_switch_and_a_users_flag_wins(tmp_path):
    environment = {ENVIRONMENT_VARIABLE: "parallel_codegen=0, kernel_cache=1,autotune_level=0",
                   "XLA_FLAGS": "--xla_gpu_per_fusion_autotune_cache_dir=/mine"}
    lines = dict(configure_compilation(str(tmp_path), cores=4, environment=environment))
    assert environment["XLA_FLAGS"].split() == [
        "--xla_gpu_per_fusion_autotune_cache_dir=/mine", f"--xla_gpu_kernel_cache_file={tmp_path}/kernels",
        "--xla_gpu_autotune_level=0"]
    assert lines["autotune_cache"] == "as XLA_FLAGS sets it (--xla_gpu_per_fusion_autotune_cache_dir=/mine)"
    assert lines["parallel_codegen"].startswith("off")


@pytest.mark.parametrize("value", ["fast=1", "kernel_cache=yes", "autotune_level=7", "parallel_codegen"])
def test_a_bad_switch_is_named(value):
    with pytest.raises(ValueError, match=f"{ENVIRONMENT_VARIABLE}.*got '{value}'"):
        chosen_settings({ENVIRONMENT_VARIABLE: value})


def test_this_xla_accepts_every_flag(tmp_path):
    environment = {ENVIRONMENT_VARIABLE: "kernel_cache=1,autotune_level=1"}
    configure_compilation(str(tmp_path), cores=2, environment=environment)
    program = ("import tensorflow as tf\n"
               "print(float(tf.function(lambda x: tf.reduce_sum(x * x), jit_compile=True)(tf.ones((3, 3)))))")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, XLA_FLAGS=environment["XLA_FLAGS"]))
    assert done.returncode == 0 and done.stdout.strip() == "9.0", done.stderr[-2000:]
