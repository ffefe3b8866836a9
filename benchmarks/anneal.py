"""The learning rate annealed to the end of the budget (`--anneal`) against
today's schedule, task by task, on this machine.

Every run is a `kseq-train TASK` process of this checkout, one at a time,
with `--anneal 0` (today's schedule) and `--anneal SHARE` for each share
asked, off and on back to back so that both see the machine in the same
state. Groups (`--groups`, in this order):

- `main`: `kseq-train translate` on its default data (Bible en->fr) at
  each `--minutes` and `--seeds`: steps, test BLEU and chrF.
- `opennmt`: OpenNMT-tf 2.32's 12 minutes beside them, trained and scored
  as benchmarks/RESULTS.md's earlier comparisons were (`opennmt_tf.py
  serving-models --minutes 12 --save-steps 100`, then `translate_speed.py
  --opennmt-dir ... --rounds 1`: its SavedModel's beam 4 on the same test
  split). Run `opennmt_tf.py setup` once first (and have ctranslate2,
  `kseq[ctranslate2]`, which translate_speed.py also times); the data is
  prepared here with the first main run's SentencePiece model.
- `user`: a user's exact-match pairs (`user_tasks.py TASK`, 30,000
  training pairs) through `kseq-train translate --train-tsv ...` at the
  default budget, for each seed: test exact match.
- `others`: the other tasks at their defaults (seeds `--others-seeds`): `language_model`,
  `generate_reviews` and `caption` train for a 5-minute budget (the
  language model and the captioner train two models each), `classify`
  for 10 epochs of streamed data, whose steps are not known before
  training, so it anneals only with `--max-minutes` (give it through
  `--others-args`): test perplexity, label agreement, content accuracy,
  test accuracy.

Each run's metrics.json gives the rows: steps, the scores, the anneal's
plan (its last step, the estimates) and what the stopping did (the best
evaluation's step, falls back to the best weights, patience); the JSON
(`--output`) also names the CPU (lscpu's model name, its bfloat16 flags),
the commit, and the load before and after each run. A Markdown table is
printed at the end.

    .venv/bin/python benchmarks/anneal.py \\
        --output benchmarks/results/translation-quality/results-anneal-$(date +%F).json  # about 4 hours
    .venv/bin/python benchmarks/anneal.py --groups main --minutes 6 --seeds 0 --shares 0.1,0.2,0.3
    .venv/bin/python benchmarks/anneal.py --groups main,user --minutes 0.3 --seeds 0 --user-pairs 2000 \\
        --main-args "--train-tsv T --valid-tsv V --test-tsv T --num-layers 1 --d-model 32" \\
        --output /tmp/anneal-smoke.json              # smoke test of the script
"""

import argparse
import datetime
import json
import os
import pathlib
import shlex
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
GROUPS = ("main", "opennmt", "user", "others")
OTHER_TASKS = ("language_model", "generate_reviews", "caption", "classify")
# What each task's metrics.json says of its quality; the first is the one the table shows.
SCORES = {
    "translate": ("test_bleu", "test_chrf", "test_exact_match"),
    "language_model": ("test_perplexity", "baseline_test_perplexity"),
    "generate_reviews": ("agreement_overall", "test_perplexity"),
    "caption": ("content_accuracy_attention", "content_accuracy_plain", "test_bleu_attention", "test_bleu_plain"),
    "classify": ("test_accuracy",),
}
PLAN = ("lr_anneal", "lr_anneal_reason", "lr_anneal_total_steps", "lr_anneal_estimates", "lr_anneal_patience_step")


def machine():
    """The CPU as lscpu names it, its bfloat16 flags, its cores, and the software."""
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")),
                 None)
    flags = set(pathlib.Path("/proc/cpuinfo").read_text().split()) if os.path.exists("/proc/cpuinfo") else set()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    return {"cpu": model, "bfloat16_flags": sorted(flags & {"avx512_bf16", "amx_bf16"}),
            "avx512f": "avx512f" in flags, "cores": len(os.sched_getaffinity(0)), "commit": commit,
            "python": sys.version.split()[0], "date": datetime.datetime.now().isoformat(timespec="minutes")}


def kseq_train(task, folder, argv, log):
    """Runs `kseq-train TASK` of this checkout in `folder`; returns its metrics.json and seconds."""
    logdir, export = folder / "runs", folder / "export"
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-c", "from kseq.cli import train; train.main()", task, "--logdir", str(logdir),
               "--export-dir", str(export), *argv]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    load = os.getloadavg()[0]
    start = time.monotonic()
    with open(log, "w") as output:
        subprocess.run(command, stdout=output, stderr=subprocess.STDOUT, env=env, cwd=folder, check=True)
    seconds = time.monotonic() - start
    metrics = json.loads((logdir / "metrics.json").read_text())
    return metrics, {"command": shlex.join(["kseq-train", task, *argv]), "seconds": round(seconds, 1),
                     "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2), "log": str(log)}


def row(group, task, share, seed, metrics, run, minutes=None):
    """One run's row: its settings, scores, anneal plan and stopping."""
    found = {"group": group, "task": task, "anneal": share, "seed": seed, "minutes": minutes, **run}
    found["steps"] = metrics.get("steps")
    found.update({key: metrics[key] for key in SCORES[task] if key in metrics})
    found.update({key: metrics[key] for key in PLAN if key in metrics})
    best = metrics.get("best_weights") or {}
    found.update(best_step=best.get("best_step", metrics.get("best_step")), reverts=best.get("reverts"),
                 lr_factor=best.get("lr_factor"), evaluations=best.get("evaluations", metrics.get("evaluations")),
                 stopped_early=best.get("stopped_early", metrics.get("stopped_early")),
                 averaged=(metrics.get("averaging") or {}).get("averaged"))
    if task == "caption":  # two models: each one's steps and plan
        found["models"] = {name: {key: model.get(key) for key in ("steps", "best_step", *PLAN)}
                           for name, model in metrics.get("models", {}).items()}
    return found


def off_and_on(shares):
    return [0.0, *shares]


def main_group(args, work, rows):
    for minutes in args.minutes:
        for seed in args.seeds:
            for share in off_and_on(args.shares):
                name = f"main-{minutes:g}min-seed{seed}-anneal{share:g}"
                argv = ["--max-minutes", f"{minutes:g}", "--seed", str(seed), "--anneal", f"{share:g}",
                        *shlex.split(args.main_args)]
                metrics, run = kseq_train("translate", work / name, argv, work / f"{name}.log")
                rows.append(row("main", "translate", share, seed, metrics, run, minutes))
                print(json.dumps(rows[-1]), flush=True)


def opennmt_group(args, work, rows):
    """OpenNMT-tf's 12 minutes on the first main run's vocabulary, scored on the test split."""
    tokenizer = next(work.glob("main-*/runs/spm.model"), None)
    if tokenizer is None:
        raise SystemExit("the opennmt group needs a main run's spm.model first: run the main group before it")
    script, data, onmt = ROOT / "benchmarks" / "opennmt_tf.py", work / "opennmt-data", work / "opennmt"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    load, start = os.getloadavg()[0], time.monotonic()
    subprocess.run([sys.executable, str(script), "prepare", "--data", str(data), "--tokenizer", str(tokenizer)],
                   check=True, env=env)
    trained = subprocess.run([sys.executable, str(script), "serving-models", "--data", str(data), "--work", str(onmt),
                              "--minutes", f"{args.opennmt_minutes:g}", "--save-steps", "100"],
                             check=True, env=env, capture_output=True, text=True).stdout
    scored = work / "opennmt-scores.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "translate_speed.py"), "--opennmt-dir", str(onmt),
                    "--spm-model", str(data / "spm.model"), "--rounds", "1", "--output", str(scored)],
                   check=True, env=env)
    beam = next(found for found in json.loads(scored.read_text())["rows"] if "SavedModel" in found["engine"])
    exported = json.loads(trained[trained.rindex("\n{") + 1:] if "\n{" in trained else trained)["exported_checkpoint"]
    rows.append({"group": "opennmt", "task": "OpenNMT-tf 2.32", "minutes": args.opennmt_minutes,
                 "steps": int(exported.rsplit("-", 1)[-1]), "test_bleu": beam["bleu"], "test_chrf": beam["chrf"],
                 "seconds": round(time.monotonic() - start, 1), "load_before": round(load, 2),
                 "load_after": round(os.getloadavg()[0], 2)})
    print(json.dumps(rows[-1]), flush=True)


def user_group(args, work, rows):
    pairs = work / f"user-{args.user_task}"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "user_tasks.py"), args.user_task, str(pairs),
                    "--train", str(args.user_pairs)], check=True)
    files = ["--train-tsv", str(pairs / "train.tsv"), "--valid-tsv", str(pairs / "valid.tsv"),
             "--test-tsv", str(pairs / "test.tsv")]
    for seed in args.seeds:
        for share in off_and_on(args.shares):
            name = f"user-{args.user_task}-seed{seed}-anneal{share:g}"
            argv = [*files, "--seed", str(seed), "--anneal", f"{share:g}", *shlex.split(args.user_args)]
            metrics, run = kseq_train("translate", work / name, argv, work / f"{name}.log")
            rows.append(row("user", "translate", share, seed, metrics, run))
            print(json.dumps(rows[-1]), flush=True)


def others_group(args, work, rows):
    for task in args.other_tasks:
        for seed in args.others_seeds:
            for share in off_and_on(args.shares):
                name = f"{task}-seed{seed}-anneal{share:g}"
                argv = ["--seed", str(seed), "--anneal", f"{share:g}", *shlex.split(args.others_args.get(task, ""))]
                if task == "generate_reviews":  # one classifier (trained by the first run) judges every run's samples
                    argv = ["--classifier-export", str(work / "classify-export"), *argv]
                metrics, run = kseq_train(task, work / name, argv, work / f"{name}.log")
                rows.append(row("others", task, share, seed, metrics, run))
                print(json.dumps(rows[-1]), flush=True)


def table(rows):
    """Markdown: each run's steps, first score and anneal plan."""
    lines = ["| group | task | minutes | seed | anneal | steps | score | second score | anneal's last step | "
             "best step | seconds |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for found in rows:
        keys = SCORES.get(found["task"], ("test_bleu", "test_chrf"))
        keys = ("test_exact_match", *keys) if found["group"] == "user" else keys
        scores = [found[key] for key in keys if key in found]
        scores += [None, None]
        lines.append(f"| {found['group']} | {found['task']} | {found.get('minutes') or ''} | {found.get('seed', '')} | "
                     f"{found.get('anneal', '')} | {found.get('steps')} | {scores[0]} | {scores[1]} | "
                     f"{found.get('lr_anneal_total_steps') or ''} | {found.get('best_step') or ''} | "
                     f"{found.get('seconds')} |")
    return lines


def floats(text):
    return [float(value) for value in text.split(",") if value]


def ints(text):
    return [int(value) for value in text.split(",") if value]


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__.split("\n", 2)[2],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", default=",".join(GROUPS), help="comma-separated, of %(default)s")
    parser.add_argument("--minutes", type=floats, default=[6.0, 12.0], help="main: budgets (default: 6,12)")
    parser.add_argument("--seeds", type=ints, default=[0, 1],
                        help="main and user: seeds (default: 0,1)")
    parser.add_argument("--others-seeds", type=ints, default=[0],
                        help="others: seeds (default: 0)")
    parser.add_argument("--shares", type=floats, default=[0.2],
                        help="--anneal values run beside --anneal 0 (default: 0.2)")
    parser.add_argument("--main-args", default="", help="more kseq-train translate options for the main group")
    parser.add_argument("--opennmt-minutes", type=float, default=12.0, help="OpenNMT-tf's budget (default: 12)")
    parser.add_argument("--user-task", default="numbers", choices=("numbers", "dates"))
    parser.add_argument("--user-pairs", type=int, default=30000, help="training pairs (default: 30000)")
    parser.add_argument("--user-args", default="", help="more kseq-train translate options for the user group")
    parser.add_argument("--other-tasks", type=lambda text: text.split(","), default=list(OTHER_TASKS))
    parser.add_argument("--others-args", type=json.loads, default={},
                        help='more options per task, as JSON: \'{"caption": "--max-minutes 1"}\'')
    parser.add_argument("--work", type=pathlib.Path, help="run folders (default: a new folder under /tmp)")
    parser.add_argument("--output", help="the JSON of every row (default: <work>/anneal.json)")
    args = parser.parse_args(argv)
    args.groups = args.groups.split(",")
    unknown = sorted(set(args.groups) - set(GROUPS)) + sorted(set(args.other_tasks) - set(OTHER_TASKS))
    if unknown or not args.shares or not all(0 < share < 1 for share in args.shares):
        parser.error(f"--groups of {GROUPS}, --other-tasks of {OTHER_TASKS}, --shares in (0, 1); got {unknown}, "
                     f"{args.shares}")
    return args


def main(argv=None):
    args = parse(argv)
    work = args.work or pathlib.Path(f"/tmp/kseq-anneal-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    work.mkdir(parents=True, exist_ok=True)
    output = pathlib.Path(args.output or work / "anneal.json")
    report = {"machine": machine(), "argv": sys.argv[1:], "rows": []}
    steps = {"main": main_group, "opennmt": opennmt_group, "user": user_group, "others": others_group}
    for group in GROUPS:
        if group in args.groups:
            steps[group](args, work, report["rows"])
            output.write_text(json.dumps(report, indent=1))  # each group's rows as soon as they are in
    report["table"] = table(report["rows"])
    output.write_text(json.dumps(report, indent=1))
    print("\n".join([f"{report['machine']['cpu']} ({', '.join(report['machine']['bfloat16_flags']) or 'no bf16'})",
                     *report["table"], f"rows: {output}"]))


if __name__ == "__main__":
    main()
