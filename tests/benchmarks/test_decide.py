"""benchmarks/decide_summary.py's table and train_step.py's configurations,
without running a step."""

import json

import pytest

from support import load_benchmark


def write(path, rows, failed=()):
    path.write_text(json.dumps(dict(rows=rows, failed=list(failed))))
    return str(path)


def test_the_summary_compares_each_row_with_the_default_and_pytorch(tmp_path):
    summary = load_benchmark("decide_summary")
    torch = write(tmp_path / "torch.json", [dict(config="torch-bfloat16-compile", ms_per_step=35.0),
                                            dict(config="torch-bfloat16", ms_per_step=56.0)])
    default = write(tmp_path / "default.json", [dict(config="kseq-bfloat16", ms_per_step=154.0)])
    compiled = write(tmp_path / "compiled.json", [dict(config="kseq-bfloat16+compiled_blocks+autotune_level=0",
                                                       ms_per_step=140.0),
                                                  dict(config="kseq-bfloat16+compiled_blocks", ms_per_step=42.0)],
                     [dict(config="kseq-bfloat16-xla", stopped_after_s=90)])
    result = summary.summarize([torch], [default, compiled, str(tmp_path / "cut-short.json")])
    assert result["default_ms"] == 154.0
    assert [row["to_default"] for row in result["kseq"]] == [1.0, round(140 / 154, 3), round(42 / 154, 3)]
    assert result["fastest"]["config"] == "kseq-bfloat16+compiled_blocks"
    assert result["fastest"]["to_torch_compiled"] == 1.2 and result["fastest"]["to_torch_eager"] == 0.75
    printed = summary.lines(result)
    assert printed[-1] == "fastest: kseq-bfloat16+compiled_blocks at 42.0 ms a step, 1.2x compiled PyTorch's"
    assert any("kseq-bfloat16-xla" in line and "stopped after 90 s" in line for line in printed)


def test_configs_name_compiled_blocks_and_compile_settings():
    train_step = load_benchmark("train_step")
    parsed = train_step.parse_config("kseq-bfloat16+compiled_blocks+autotune_level=0")
    assert parsed == dict(model="kseq", precision="bfloat16", xla=False, compiled_blocks=True,
                          compile=["autotune_level=0"])
    assert train_step.compiles(parsed) and train_step.compiles(train_step.parse_config("kseq-float32-xla"))
    assert not train_step.compiles(train_step.parse_config("kseq-float32"))
    # The paths removed after 0fd0d8a are no configuration now; compiled blocks are kseq's model's.
    for bad in ("kseq-bf16", "kseq-float32+layer_norm", "kseq-bfloat16+compiled_loss", "kseq-float32-jit",
                "hub-float32+compiled_blocks"):
        with pytest.raises(SystemExit, match="--configs"):
            train_step.parse_config(bad)
