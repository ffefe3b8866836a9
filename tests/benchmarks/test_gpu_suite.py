"""benchmarks/gpu_suite.sh's train-step lease rehearsed on the CPU at tiny
sizes (GPU_SUITE_SMOKE=1): every part runs, what comes back fits the
device's 8 files, and the raw trace is among them."""

import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow  # about 3 minutes on 2 cores
def test_the_lease_runs_its_parts_and_brings_back_at_most_8_files(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    environment = dict(os.environ, OUT=str(out), GPU_SUITE_WORK=str(work), GPU_SUITE_SMOKE="1",
                       KSEQ_BUNDLE=str(tmp_path / "no-bundle"), KSEQ_BUNDLE_STORE=str(tmp_path / "parts"),
                       TORCH_HOME_RUN=str(tmp_path / "torch"), GPU_SUITE_BUDGET_S="900",
                       TF_PYTHON=os.path.join(ROOT, ".venv", "bin", "python"))
    done = subprocess.run([os.path.join(ROOT, "benchmarks", "gpu_suite.sh"), "torch-start", "lease"],
                          env=environment, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-2000:]
    files = [os.path.join(folder, name) for folder, _, names in os.walk(out) for name in names]
    assert len(files) <= 8, files
    assert sorted(os.path.relpath(f, out) for f in files if not f.endswith(".xplane.pb.gz")) == [
        "recommended.json", "recommended.log", "torch-collect.json", "trace.json", "trace.log",
        "xla-matrix.json", "xla-matrix.log"]
    assert any(f.endswith(".xplane.pb.gz") for f in files), "the raw trace comes home"
    for part in ("trace", "recommended", "xla-matrix"):
        assert json.loads((out / f"{part}.json").read_text())["status"] == "ok", part
    recommended = json.loads((out / "recommended.json").read_text())["result"]
    assert list(recommended) == ["recommended-rows.json"]
    timed = [row["config"] for row in recommended["recommended-rows.json"]["rows"]]
    assert timed == ["kseq-bfloat16", "kseq-float32", "kseq-bfloat16+compiled_blocks", "kseq-float32+compiled_blocks"]
    assert [row["compiled_blocks"] for row in recommended["recommended-rows.json"]["rows"]] == [False] * 2 + [True] * 2
    assert "bundle: SUMS or zstd/ not there yet" in done.stdout, "no bundle here: said, and the lease went on"


@pytest.mark.slow  # about 4 minutes on 2 cores
def test_the_decide_part_writes_its_rows_and_names_the_fastest(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    environment = dict(os.environ, OUT=str(out), GPU_SUITE_WORK=str(work), GPU_SUITE_SMOKE="1",
                       KSEQ_BUNDLE=str(tmp_path / "no-bundle"), GPU_SUITE_BUDGET_S="900",
                       TF_PYTHON=os.path.join(ROOT, ".venv", "bin", "python"))
    done = subprocess.run([os.path.join(ROOT, "benchmarks", "gpu_suite.sh"), "decide"],
                          env=environment, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(os.listdir(out)) == ["decide-rows.json", "decide.json", "decide.log"]
    summary = json.loads((out / "decide.json").read_text())["result"]
    configs = [row["config"] for row in summary["kseq"]]
    assert configs == ["kseq-float32", "kseq-float32+compiled_blocks+autotune_level=0",
                       "kseq-float32+compiled_blocks", "kseq-float32-xla"]
    assert summary["fastest"]["config"] in configs and summary["kseq"][0]["to_default"] == 1.0
    assert "fastest: " in (out / "decide.log").read_text()
