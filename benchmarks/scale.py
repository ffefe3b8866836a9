"""How training meets a large corpus: start-up, memory, speed.

For training files of 125k, 1M and 4M lines (the default data's training
lines repeated, generated once into the kseq cache: the Bible's pairs for
translation, its English verses for the language model, Rotten Tomatoes'
snippets for the classifier), runs `kseq-train <task>` on the file for
`--minutes` (the classifier, which has no time budget, is stopped then) as a
user would and measures, per run:
seconds from the start of the process to "training begins" (the
"evaluation and checkpoints" line) and to the end of the first train step,
peak resident memory (the process's ru_maxrss), and train steps/s in the
minute after the first half minute (from the progress lines, every 30 s;
no evaluation runs in between). Each run is stopped once training ends.
`--baseline TREE` runs a second checkout (e.g. `git worktree add /tmp/old
<commit>`) the same way, alternating with this one, so that both sides
share the machine's state.

    .venv/bin/python benchmarks/scale.py --output benchmarks/results/scale/results-scale-$(date +%F).json
    .venv/bin/python benchmarks/scale.py --sizes 125000 --minutes 0.5      # a smoke test
    .venv/bin/python benchmarks/scale.py --baseline /tmp/old --sizes 125000,1000000
    .venv/bin/python benchmarks/scale.py --task classify --sizes 125000,1000000 --baseline /tmp/old
"""

import argparse
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


TASKS = {  # task: (its training-file option, its other file options, its time budget option)
    "translate": ("--train-tsv", ("--valid-tsv", "--test-tsv"), "--max-minutes"),
    "classify": ("--train-tsv", ("--valid-tsv", "--test-tsv"), None),
    "language_model": ("--train-txt", ("--valid-txt", "--test-txt"), "--max-minutes"),
}
# `kseq-train` of the tree on PYTHONPATH (the installed command is the environment's own checkout's).
KSEQ_TRAIN = [sys.executable, "-c", "from kseq.cli.train import main; main()"]


def split_file(task, split):
    """The default data's split as the task's file (in the kseq cache)."""
    sys.path.insert(0, ROOT)
    if task == "classify":
        from kseq.data.rotten_tomatoes import split_file as rotten_tomatoes_file

        return rotten_tomatoes_file(split)
    from kseq.data.bible import bible_split_file, bible_text_file

    return bible_text_file(split) if task == "language_model" else bible_split_file(split)


def corpus_file(pairs, folder, task="translate"):
    """A file of `pairs` training lines: the task's default ones, repeated in order."""
    path = os.path.join(folder, f"{task}-train-x{pairs}.txt")
    if not os.path.exists(path):
        with open(split_file(task, "train"), encoding="utf-8") as f:
            lines = f.readlines()
        temporary = path + ".tmp"
        with open(temporary, "w", encoding="utf-8") as out:
            for index in range(pairs):
                out.write(lines[index % len(lines)])
        os.replace(temporary, path)
    return path


def small_file(folder, split, task="translate", count=64):
    path = os.path.join(folder, f"{task}-{split}-{count}.txt")
    with open(split_file(task, split), encoding="utf-8") as f:
        lines = f.readlines()[:count]
    with open(path, "w", encoding="utf-8") as out:
        out.writelines(lines)
    return path


def measure(tree, train, valid, test, minutes, workdir, timeout, cache, task="translate"):
    """One run of `tree`'s task with `cache` as its kseq cache: its
    timings, peak memory and step rate."""
    os.makedirs(workdir, exist_ok=True)
    train_option, (valid_option, test_option), budget = TASKS[task]
    command = [*KSEQ_TRAIN, task, train_option, train,
               valid_option, valid, test_option, test,
               "--logdir", os.path.join(workdir, "runs"), "--export-dir", os.path.join(workdir, "export"),
               "--eval-every", "1000000"]  # no evaluation inside the minute: steps/s is training's
    command += [budget, str(minutes)] if budget else []
    if budget is None:  # stopped once its first train step is `minutes` old
        timeout = min(timeout, 60.0 * minutes + 300.0)
    environment = dict(os.environ, PYTHONPATH=tree, PYTHONUNBUFFERED="1", KSEQ_CACHE_DIR=cache)
    # A fresh wrapper per run: its ru_maxrss of children is this run's alone.
    wrapper = ("import resource, subprocess, sys; process = subprocess.Popen(sys.argv[1:]); "
               "signal = __import__('signal'); signal.signal(signal.SIGTERM, lambda *a: process.kill()); "
               "process.wait(); print('PEAK_KIB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "
               "flush=True)")
    start = time.monotonic()
    process = subprocess.Popen([sys.executable, "-c", wrapper, *command], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env=environment, cwd=workdir)
    seen = {"begins": None, "first_step": None}
    rates, peak, tail, stopped = [], None, [], False
    for line in process.stdout:
        now = time.monotonic() - start
        tail = (tail + [line])[-30:]
        if line.startswith("evaluation and checkpoints") and seen["begins"] is None:
            seen["begins"] = now
        if "the first train step of this run" in line:
            seen["first_step"] = now
            if budget is None:
                timeout = min(timeout, now + 60.0 * minutes)
        progress = re.match(r"step (\d+): loss [\d.]+, ([\d.]+) steps/s", line)
        if progress:
            rates.append((now, int(progress.group(1)), float(progress.group(2))))
        if re.match(r"trained \d+ steps", line) or "time limit of" in line or now > timeout:
            if not stopped:
                process.send_signal(signal.SIGTERM)  # the wrapper kills the run and reports its peak
                stopped = True
        if line.startswith("PEAK_KIB"):
            peak = int(line.split()[1])
    process.wait()
    error = None if peak and (rates or seen["first_step"]) else "".join(tail[-12:])
    steps = rates[-1][1] if rates else None
    # The first progress line's rate includes tracing the step: the later ones are training alone.
    later = rates[1:] or rates
    rate = round(sum(r for _, _, r in later) / len(later), 2) if later else None
    return {"seconds_to_training": _round(seen["begins"]), "seconds_to_first_step": _round(seen["first_step"]),
            "peak_rss_mib": round(peak / 1024) if peak else None, "steps_per_second": rate,
            "steps_at_last_progress_line": steps, "error": error}


def _round(value):
    return None if value is None else round(value, 1)


def cpu_description():
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        model = re.search(r"model name\s*:\s*(.*)", info).group(1)
        flags = " ".join(sorted({flag for flag in ("avx512_bf16", "amx_bf16", "avx512f") if f" {flag}" in info}))
    except (OSError, AttributeError):
        model = platform.processor()
    return f"{model}, {os.cpu_count()} cores, flags: {flags or 'no AVX-512'}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n", 2)[2])
    parser.add_argument("--task", default="translate", choices=sorted(TASKS), help="the task to run")
    parser.add_argument("--sizes", default="125000,1000000,4000000", help="training lines of each file")
    parser.add_argument("--minutes", type=float, default=1.5, help="--max-minutes of each run")
    parser.add_argument("--baseline", help="a second checkout to run the same way (e.g. a git worktree)")
    parser.add_argument("--data", default=None, help="where the generated files go (default: the kseq cache)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds before a run is stopped")
    parser.add_argument("--second-run", action="store_true", help="run each again on the cache the first made")
    parser.add_argument("--output", help="write the rows as JSON here")
    args = parser.parse_args(argv)
    sys.path.insert(0, ROOT)
    from kseq.data.pypi_data import cache_root

    folder = args.data or os.path.join(cache_root(), "bench-scale")
    os.makedirs(folder, exist_ok=True)
    valid, test = small_file(folder, "valid", args.task), small_file(folder, "test", args.task)
    trees = [("kseq", ROOT)] + ([("baseline", os.path.abspath(args.baseline))] if args.baseline else [])
    rows = []
    for pairs in (int(size) for size in args.sizes.split(",")):
        train = corpus_file(pairs, folder, args.task)
        for name, tree in trees:
            # A new cache: the first run on these files, scan and vocabulary included; then, with
            # --second-run, the same command again, as a user's next run finds the cache.
            with tempfile.TemporaryDirectory(prefix="kseq-scale-") as workdir:
                for run in ("first", "second") if args.second_run else ("first",):
                    result = measure(tree, train, valid, test, args.minutes, os.path.join(workdir, run),
                                     args.timeout, os.path.join(workdir, "cache"), args.task)
                    row = {"task": args.task, "pairs": pairs, "file_mib": round(os.path.getsize(train) / 2**20), "side": name,
                           "run": run, **result}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    print(f"\n{'pairs':>9} {'side':>8} {'run':>6} {'to training':>12} {'to step 1':>10} {'peak MiB':>9} "
          f"{'steps/s':>8}")
    for row in rows:
        print(f"{row['pairs']:>9,} {row['side']:>8} {row['run']:>6} {row['seconds_to_training'] or '-':>12} "
              f"{row['seconds_to_first_step'] or '-':>10} {row['peak_rss_mib'] or '-':>9} "
              f"{row['steps_per_second'] or '-':>8}" + (" (failed)" if row["error"] else ""))
    if args.output:
        with open(args.output, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d"), "cpu": cpu_description(), "minutes": args.minutes,
                       "baseline": args.baseline, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
