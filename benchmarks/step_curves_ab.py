"""Do the train curves of every few steps cost the default task train steps?

Runs `kseq-train translate` (the quick preset on the Bible data, or the
arguments after `--`) with a time budget, alternating two source trees in
fresh processes: `--before`, a tree without the curves (e.g. commit 737798c,
exported with `git archive`), and `--after`, this one. Each run's trained
phase (phases.json, read as soon as training is recorded; the run is
stopped there) gives the steps trained, the seconds inside train steps and
the seconds of `fit`; the script prints steps a second of each, per run and
the median of each side, and writes them as JSON.

    mkdir -p /tmp/kseq-before && git archive 737798c | tar -x -C /tmp/kseq-before
    .venv/bin/python benchmarks/step_curves_ab.py --before /tmp/kseq-before --runs 2 --max-minutes 2
    .venv/bin/python benchmarks/step_curves_ab.py --before /tmp/kseq-before --runs 1 --max-minutes 0.5  # a try
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def one_run(tree, folder, minutes, extra):
    """Trains once with `tree` first on the path, stopped once training is
    recorded (decoding, test and export measure nothing here);
    -> the trained phase's timing entries and steps a second."""
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    command = "import sys; from kseq.cli.train import main; sys.exit(main())"  # kseq-train, from `tree`
    argv = [sys.executable, "-c", command, "translate", "--max-minutes", str(minutes),
            "--logdir", os.path.join(folder, "runs"), "--export-dir", os.path.join(folder, "export"), *extra]
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    log = folder + ".log"
    with open(log, "w") as out:
        # Started in the run's folder: `python -c` puts the working directory first on the path.
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=folder)
        metrics = None
        while metrics is None and process.poll() is None:
            time.sleep(1.0)
            metrics = trained_metrics(os.path.join(folder, "runs", "phases.json"))
        process.kill()
        process.wait()
    metrics = metrics or trained_metrics(os.path.join(folder, "runs", "phases.json"))
    if metrics is None:
        raise SystemExit(f"{tree}: kseq-train ended before training was recorded; see {log}")
    row = {key: metrics[key] for key in ("steps", "train_step_seconds", "fit_seconds", "train_seconds")}
    row["steps_per_train_step_second"] = round(metrics["steps"] / metrics["train_step_seconds"], 3)
    row["steps_per_fit_second"] = round(metrics["steps"] / metrics["fit_seconds"], 3)
    row["log_every"] = metrics.get("log_every")  # None: a tree without the curves
    return row


def trained_metrics(path):
    """The metrics of the "trained" phase in a run's phases.json, or None before it is recorded."""
    try:
        with open(path) as f:
            return json.load(f).get("trained", {}).get("metrics")
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the source tree without the curves")
    parser.add_argument("--after", default=ROOT, help="the source tree with them (default: this one)")
    parser.add_argument("--runs", type=int, default=2, help="runs of each side, alternated")
    parser.add_argument("--max-minutes", type=float, default=2.0, help="each run's training budget")
    parser.add_argument("--out", default=None, help="write the rows as JSON to this file")
    parser.add_argument("extra", nargs="*", help="further kseq-train translate arguments, after --")
    args = parser.parse_args()
    scratch, rows = tempfile.mkdtemp(prefix="step-curves-ab-"), []
    for index in range(args.runs):
        for side, tree in (("before", args.before), ("after", args.after)):
            row = {"side": side, "run": index, **one_run(tree, os.path.join(scratch, f"{side}-{index}"),
                                                          args.max_minutes, args.extra)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    for side in ("before", "after"):
        mine = [row for row in rows if row["side"] == side]
        print(f"{side}: median {statistics.median(r['steps_per_train_step_second'] for r in mine):.3f} steps/s "
              f"of train step, {statistics.median(r['steps_per_fit_second'] for r in mine):.3f} of fit, "
              f"steps {[r['steps'] for r in mine]}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"max_minutes": args.max_minutes, "extra": args.extra, "rows": rows}, f, indent=1)
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
