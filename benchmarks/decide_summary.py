"""The table `gpu_suite.sh decide` ends with: every kseq row beside
PyTorch's, compiled blocks and whole-step XLA against kseq's default of the
same call, and the fastest configuration with its ratio to compiled PyTorch.

Reads benchmarks/torch_transformer.py's and benchmarks/train_step.py's JSON
outputs (any that exist; a part stopped midway leaves what it measured) and
writes one JSON: {"torch": rows, "kseq": rows, "failed": [...],
"default_ms", "fastest": {"config", "ms_per_step", "ratio_to_torch_compiled",
"ratio_to_torch_eager"}, "targets": {...}}. The standard library only, so
that any python runs it.

    python3 benchmarks/decide_summary.py --torch torch.json --kseq default.json compiled-*.json --output decide-rows.json
"""

import argparse
import json
import os

TORCH_COMPILED, TORCH_EAGER = "torch-bfloat16-compile", "torch-bfloat16"
# Issue 58's targets: ratios to PyTorch of the same call, and the first step.
TARGETS = dict(to_torch_compiled=1.25, to_torch_eager_without_xla=1.25, bf16_peak_share=0.25, first_step_s=60.0)


def load(path):
    """A results file's JSON, or None where it is missing or cut short."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def summarize(torch_paths, kseq_paths):
    """The decision table from the results files; see the module docstring."""
    torch_rows, kseq_rows, failed = [], [], []
    for path in torch_paths:
        data = load(path) or {}
        torch_rows += data.get("rows", [])
        failed += [dict(f, file=os.path.basename(path)) for f in data.get("failed", [])]
    for path in kseq_paths:
        data = load(path) or {}
        kseq_rows += [dict(row, file=os.path.basename(path)) for row in data.get("rows", [])]
        failed += [dict(f, file=os.path.basename(path)) for f in data.get("failed", [])]
    torch_ms = {row["config"]: row["ms_per_step"] for row in torch_rows}
    # kseq's default: the first row measured without compiled blocks or XLA.
    default = next((row["ms_per_step"] for row in kseq_rows if "+" not in row["config"]
                    and not row["config"].endswith("-xla")), None)
    for row in kseq_rows:
        row["to_default"] = round(row["ms_per_step"] / default, 3) if default else None
        for name, config in (("to_torch_compiled", TORCH_COMPILED), ("to_torch_eager", TORCH_EAGER)):
            row[name] = round(row["ms_per_step"] / torch_ms[config], 3) if config in torch_ms else None
    fastest = min(kseq_rows, key=lambda row: row["ms_per_step"], default=None)
    summary = dict(torch=torch_rows, kseq=kseq_rows, failed=failed, default_ms=default, targets=TARGETS)
    if fastest:
        summary["fastest"] = {key: fastest.get(key) for key in (
            "config", "ms_per_step", "mfu", "first_step_s", "to_default", "to_torch_compiled", "to_torch_eager")}
    return summary


def lines(summary):
    """The table as printed lines, the fastest configuration last."""
    out = [f"{'configuration':58s} {'ms a step':>10s} {'x default':>9s} {'x torch.compile':>15s} "
           f"{'first step s':>12s}"]
    for row in summary["torch"]:
        out.append(f"{row['config']:58s} {row['ms_per_step']:10.2f}")
    for row in summary["kseq"]:
        ratio = row["to_torch_compiled"]
        out.append(f"{row['config']:58s} {row['ms_per_step']:10.2f} {row['to_default'] or 0:9.3f} "
                   f"{ratio if ratio is not None else '-':>15} {row.get('first_step_s', '-'):>12}")
    for fail in summary["failed"]:
        reason = f"stopped after {fail['stopped_after_s']} s" if "stopped_after_s" in fail else "failed"
        out.append(f"{fail['config']:58s} {reason}")
    fastest = summary.get("fastest")
    if fastest:
        ratio = fastest["to_torch_compiled"]
        out.append(f"fastest: {fastest['config']} at {fastest['ms_per_step']} ms a step, "
                   + (f"{ratio}x compiled PyTorch's" if ratio is not None else "no compiled PyTorch row to compare"))
    else:
        out.append("fastest: no kseq row finished")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n", 1)[1])
    parser.add_argument("--torch", nargs="*", default=[], help="torch_transformer.py outputs")
    parser.add_argument("--kseq", nargs="*", default=[], help="train_step.py outputs, in the order they ran")
    parser.add_argument("--output", help="the summary's JSON")
    args = parser.parse_args()
    summary = summarize(args.torch, args.kseq)
    print("\n".join(lines(summary)), flush=True)
    if args.output:
        with open(args.output + ".tmp", "w") as f:
            json.dump(summary, f, indent=1)
        os.replace(args.output + ".tmp", args.output)


if __name__ == "__main__":
    main()
