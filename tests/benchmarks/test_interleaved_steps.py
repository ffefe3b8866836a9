"""benchmarks/interleaved_steps.py: configurations timed in rotated turns in one process."""

import pytest

from support import load_benchmark


@pytest.mark.e2e
def test_every_configuration_is_timed_each_round_in_a_rotated_order():
    interleaved = load_benchmark("interleaved_steps")
    configs = ["kseq-float32", "kseq-float32+compiled_blocks"]  # models side by side, one compiling its blocks
    result = interleaved.run(configs, interleaved.train_step.SIZES["tiny"], rounds=3, steps=2, warmup=1,
                             clip="global")
    assert result["rounds"] == [configs, configs[::-1], configs]
    rows = {row["config"]: row for row in result["rows"]}
    assert list(rows) == configs and rows["kseq-float32"]["ratio_to_first"] == 1.0
    for row in rows.values():
        assert len(row["round_ms"]) == 3 and all(ms > 0 for ms in row["round_ms"])
        assert min(row["round_ms"]) <= row["median_ms"] <= max(row["round_ms"])
        assert row["final_loss"] > 0


def test_a_repeated_configuration_or_compile_setting_is_refused():
    interleaved = load_benchmark("interleaved_steps")
    with pytest.raises(SystemExit, match="each configuration once"):
        interleaved.check_configs(["kseq-float32", "kseq-float32"])
    with pytest.raises(SystemExit, match="compile settings are the process's own"):
        interleaved.check_configs(["kseq-float32", "kseq-float32+compiled_blocks+autotune_level=0"])
    interleaved.check_configs(["kseq-float32", "kseq-float32+compiled_blocks", "kseq-float32-xla"])
