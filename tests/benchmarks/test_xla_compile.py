"""benchmarks/xla_compile.py: HLO counting on a toy step, its log reading, and
the matrix's bookkeeping (timeouts, the budget) with fake settings."""

import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from support import load_benchmark

xla_compile = load_benchmark("xla_compile")

MODULE = """HloModule toy, entry_computation_layout={(f32[4]{0})->f32[]}

%fused_computation (param_0: f32[4]) -> f32[4] {
  %param_0 = f32[4]{0} parameter(0)
  ROOT %multiply = f32[4]{0} multiply(%param_0, %param_0), metadata={op_type="Mul" op_name="square"}
}

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %sum = f32[] add(%x, %y)
}

ENTRY %main (a: f32[4]) -> f32[] {
  %a = f32[4]{0} parameter(0), metadata={op_type="_Arg"}
  %fusion = f32[4]{0} fusion(%a), kind=kLoop, calls=%fused_computation, metadata={op_type="Mul"}
  %zero = f32[] constant(0)
  ROOT %reduce = f32[] reduce(%fusion, %zero), dimensions={0}, to_apply=%add, metadata={op_type="Sum"}
}
"""


def test_hlo_stats_counts_instructions_computations_and_fusions():
    assert xla_compile.hlo_stats(MODULE) == dict(instructions=9, computations=3, fusions=1, entry_instructions=4)
    assert xla_compile.hlo_by_op_type(MODULE, top=2) == [("(none)", 5), ("Mul", 2)]


def test_hlo_counting_of_a_toy_train_step():
    weights = tf.Variable(tf.random.stateless_normal((16, 8), seed=(1, 2)))

    @tf.function(jit_compile=True)
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.softmax(tf.tanh(x @ weights)) ** 2)
        weights.assign_sub(0.1 * tape.gradient(loss, weights))
        return loss

    x = tf.ones((4, 16))
    ir = step.experimental_get_compiler_ir(x)
    before, after = xla_compile.hlo_stats(ir(stage="hlo")), xla_compile.hlo_stats(ir(stage="optimized_hlo"))
    assert before["instructions"] > 20 and after["instructions"] > 0
    assert before["fusions"] == 0 < after["fusions"]
    # Fusion gathers the step's element-wise work: fewer instructions at the top level.
    assert after["entry_instructions"] < before["entry_instructions"]
    assert dict(xla_compile.hlo_by_op_type(ir(stage="hlo"), top=30)).get("MatMul", 0) > 0


@pytest.mark.slow
def test_measure_variant_of_the_plain_step_at_a_toy_size():
    size = dict(layers=1, d=16, heads=2, ff=32, vocab=64, batch=2, source=5, target=6, dropout=0.1)
    row = xla_compile.measure_variant("plain", size, steps=2)
    assert row["graph_ops"] > 100 and row["hlo"]["instructions"] > 1000
    assert row["optimized_hlo"]["fusions"] > 0 and row["first_call_s"] > row["step_ms"] / 1000
    assert row["loss"] > 0


LOG = """W0000 00:00:1000.000000    1 cuda_platform.cc:52] failed call to cuInit
I0000 00:00:1000.500000    1 xla_compiler.cc:820] XlaCompiler::CompileFunction __inference_step_1
I0000 00:00:1003.000000    1 hlo_pass_pipeline.cc:169] HLO pass: dce time: 500 ms (500000 us) (cumulative: 1 s)
I0000 00:00:1010.000000    1 hlo_pass_pipeline.cc:169] HLO pass: fusion time: 4 s (4000000 us) (cumulative: 5 s)
I0000 00:00:1011.000000    1 hlo_pass_pipeline.cc:169] HLO pass: dce time: 100 ms (100000 us) (cumulative: 5 s)
I0000 00:00:1030.000000    1 cpu_compiler.cc:2063] Compiling [a_step_1] for CPU using JIT time: 20 s (20000000 us)
I0000 00:00:1031.000000    1 device_compiler.h:208] Compiled cluster using XLA!  This line is logged at most once.
I0000 00:00:1031.000000    1 device_compiler.h:538] Compilation of XLA executable time: 30.5 s (30500000 us)
I0000 00:00:1040.000000    1 device_compiler.h:538] Compilation of XLA executable time: 2 s (2000000 us)
"""


def test_parse_xla_log_splits_the_first_compilation_into_phases():
    found = xla_compile.parse_xla_log(LOG)
    assert found["xla_ran"] and found["xla_compilations"] == 2 and found["xla_compile_s"] == [30.5, 2.0]
    assert found["phases"] == dict(tf_to_hlo_s=2.0, hlo_passes_s=8.5, codegen_s=20.0)
    assert found["slowest_passes"] == [("fusion", 4.0, 1), ("dce", 0.6, 2)]
    assert found["timers"] == [("Compiling [...] for CPU using JIT", 20.0, 1)]


def test_parse_xla_log_of_a_process_stopped_while_compiling():
    stopped = "\n".join(LOG.splitlines()[:4])
    found = xla_compile.parse_xla_log(stopped)
    assert not found["xla_ran"] and found["xla_compilations"] == 0
    assert found["phases"] == dict(tf_to_hlo_s=2.0, hlo_passes_s=7.5, last_pass="fusion", since_last_pass_s=0.0)
    assert xla_compile.parse_xla_log("no logs at all")["phases"] == {}
    from_cache = "\n".join(LOG.splitlines()[:2] + LOG.splitlines()[-2:-1])
    assert xla_compile.parse_xla_log(from_cache)["phases"] == dict(loaded_without_hlo_passes=True)


def fake_run(tmp_path, name, code):
    return dict(argv=[sys.executable, "-c", code], env=dict(os.environ), log=str(tmp_path / name))


FAST = ("import sys; print('FIRST_STEP {\"first_step_s\": 0.1}'); "
        "print('RESULT {\"first_step_s\": 0.1, \"compile_s\": 0.05, \"step_ms\": 2.0}'); "
        "print('I0000 00:00:5.0 1 device_compiler.h:208] Compiled cluster using XLA!', file=sys.stderr)")
SLOW = "import time; print('FIRST_STEP {\"first_step_s\": 0.2}', flush=True); time.sleep(60)"


def test_matrix_records_a_timeout_and_skips_what_the_budget_leaves_out(tmp_path):
    plan = [dict(name="fast", runs=[fake_run(tmp_path, "fast", FAST)], notes=["a note"]),
            dict(name="fails", runs=[fake_run(tmp_path, "fails", "import sys; sys.exit('broken')")]),
            dict(name="slow", runs=[fake_run(tmp_path, "slow", SLOW)]),
            dict(name="later", runs=[fake_run(tmp_path, "later-1", FAST), fake_run(tmp_path, "later-2", FAST)])]
    plan[2]["timeout"] = 3  # its own timeout, under --setting-timeout's
    output, lines = tmp_path / "matrix.json", []
    record = xla_compile.run_matrix(plan, setting_timeout=30, budget_s=5, output=str(output), meta=dict(size="toy"),
                                    on_row=lines.append, minimum_s=2)
    rows = {row["setting"]: row for row in record["rows"]}
    assert [row["status"] for row in record["rows"]] == ["ok", "failed", "timeout", "skipped"]
    fast = rows["fast"]["runs"][0]
    assert fast["result"]["step_ms"] == 2.0 and fast["xla"]["xla_ran"] and rows["fast"]["notes"] == ["a note"]
    assert rows["fails"]["runs"][0]["log_tail"][-1] == "broken"
    slow = rows["slow"]["runs"][0]
    assert slow["timeout_s"] == 3 and slow["result"] is None and slow["first_step"] == {"first_step_s": 0.2} and slow["seconds"] < 10
    assert [run["status"] for run in rows["later"]["runs"]] == ["skipped", "skipped"]
    assert json.loads(output.read_text())["rows"][2]["status"] == "timeout"
    assert json.loads(output.read_text())["size"] == "toy" and len(lines) == 4


def test_a_cached_setting_skips_its_second_run_when_the_first_did_not_finish(tmp_path):
    plan = [dict(name="cache", runs=[fake_run(tmp_path, "cache-1", "import sys; sys.exit(3)"),
                                     fake_run(tmp_path, "cache-2", FAST)])]
    row = xla_compile.run_matrix(plan, setting_timeout=30, budget_s=60, on_row=lambda line: None)["rows"][0]
    assert row["status"] == "failed" and row["runs"][0]["returncode"] == 3
    assert row["runs"][1] == dict(status="skipped", reason="the run before did not finish")


def test_matrix_plan_runs_cached_settings_twice_with_checked_flags(tmp_path):
    class Args:
        settings = xla_compile.settings_with_timeouts("jit-autotune-cache:90,nojit,autojit")
        model, size, precision, steps = "kseq", "tiny", "float32", 3

    plan = xla_compile.matrix_plan(Args, str(tmp_path), gpu=False)
    cached, nojit, autojit = plan
    assert (cached["timeout"], nojit["timeout"]) == (90.0, None)
    assert len(cached["runs"]) == 2 and os.path.isdir(tmp_path / "jit-autotune-cache-cache")
    assert f"--xla_gpu_per_fusion_autotune_cache_dir={tmp_path}/jit-autotune-cache-cache" in \
        cached["runs"][0]["env"]["XLA_FLAGS"]
    assert cached["notes"] and not nojit["notes"] and len(nojit["runs"]) == 1
    assert "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit" in autojit["runs"][0]["env"]["TF_XLA_FLAGS"]
    gpu_plan = xla_compile.matrix_plan(Args, str(tmp_path), gpu=True)
    assert "cpu_global_jit" not in gpu_plan[2]["runs"][0]["env"]["TF_XLA_FLAGS"] and not gpu_plan[0]["notes"]


def test_bad_names_and_precision_are_refused_with_the_option_named():
    with pytest.raises(SystemExit, match="--settings: expected names from"):
        xla_compile.settings_with_timeouts("jit,warp-speed:30")
    with pytest.raises(SystemExit, match="expected NAME or NAME:SECONDS, got jit:soon"):
        xla_compile.settings_with_timeouts("jit:soon")
    with pytest.raises(ValueError, match="--precision: the plain variants run float32 only"):
        xla_compile.make_step("plain", xla_compile.SIZES["tiny"], precision="bfloat16")


@pytest.mark.slow  # a TensorFlow process of its own: 10-20 s
def test_every_flag_of_the_matrix_is_one_tensorflow_accepts(tmp_path):
    """XLA aborts the process on a flag it does not know: all of the
    matrix's flags together, on a tiny compiled function."""
    xla_flags, tf_xla_flags = [], []
    for setting in xla_compile.SETTINGS.values():
        fill = dict(cache=str(tmp_path), cores=2)
        xla_flags += [flag.format(**fill) for flag in setting.get("xla_flags", ())]
        tf_xla_flags += list(setting.get("tf_xla_flags", ())) + list(setting.get("cpu_tf_xla_flags", ()))
    tf_xla_flags.append(f"--tf_xla_persistent_cache_directory={tmp_path}")  # kseq's enable_persistent_cache
    env = dict(os.environ, XLA_FLAGS=" ".join(xla_flags), TF_XLA_FLAGS=" ".join(tf_xla_flags))
    code = "import tensorflow as tf; print(float(tf.function(lambda x: x * 2, jit_compile=True)(tf.ones(()))))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "2.0", done.stderr[-2000:]
