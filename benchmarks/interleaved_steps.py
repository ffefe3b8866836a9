"""Train-step variants timed in turns in one process: A/B on a machine whose speed drifts.

On the shared CPU VMs a machine's matmul rate moved by 3x within an hour
(benchmarks/RESULTS.md, "Machines and noise"), so configurations timed one
after another (`train_step.py`) compare the hour as much as the code. Here
every configuration is built and warmed up in one process, then all are
timed in rounds: each round trains `--steps` steps of each, in an order
rotated from round to round, so that neighbours in time are compared. The
figure kept is each configuration's median over rounds of its time divided
by the first configuration's in the same round.

Configurations are `train_step.py`'s (`kseq-bfloat16`, `kseq-float32-xla`,
`kseq-bfloat16+compiled_blocks`, ...) without XLA compile settings
(`+name=value`), which are the process's: a precision, XLA and compiled
blocks are each model's own, so the models live side by side. Those that
compile (`-xla`, `+compiled_blocks`) compile in this process, without a
persistent cache, during their warm-up.

    .venv/bin/python benchmarks/interleaved_steps.py --size quick \\
        --configs kseq-bfloat16,kseq-bfloat16+compiled_blocks,kseq-bfloat16-xla --rounds 6 --steps 20
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import train_step  # noqa: E402


def check_configs(configs):
    """Each config parsed; SystemExit where one repeats or sets XLA flags."""
    if len(set(configs)) != len(configs):
        raise SystemExit(f"--configs: each configuration once; got {','.join(configs)}")
    for config in configs:
        if train_step.parse_config(config)["compile"]:
            raise SystemExit(f"--configs {config!r}: XLA's compile settings are the process's own, not a "
                             "configuration's (use train_step.py)")


def cpu_description():
    """The CPU's model name and its bfloat16 flags, from /proc/cpuinfo."""
    try:
        info = open("/proc/cpuinfo").read()
    except OSError:
        return {"model": platform.processor() or "unknown"}
    fields = dict(line.split(":", 1) for line in info.split("\n\n")[0].splitlines() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    flags = set(fields.get("flags", "").split())
    return {"model": fields.get("model name", "unknown"),
            **{flag: flag in flags for flag in ("avx2", "avx512f", "avx512_bf16", "amx_bf16")}}


def rotated(items, by):
    by %= len(items)
    return items[by:] + items[:by]


def run(configs, size, rounds, steps, warmup, clip):
    """Builds and warms up every config, then times them in `rounds` rotated turns.

    Returns:
        A dict: rows (config, median_ms, ratio_to_first (median of per-round
        ratios), round_ms, final_loss) and rounds (each round's order).
    """
    import keras

    models = {}
    for config in configs:
        model, _, data = train_step.compiled_model(config, size, clip)
        model.fit(data, steps_per_epoch=warmup, epochs=1, verbose=0)
        models[config] = (model, data)
    times = {config: [] for config in configs}
    losses, orders = {}, []
    for index in range(rounds):
        order = rotated(configs, index)
        orders.append(order)
        for config in order:
            seconds, losses[config] = train_step.timed_steps(*models[config], steps)
            times[config].append(seconds)
    keras.backend.clear_session()
    first = times[configs[0]]
    rows = [dict(config=config, median_ms=round(1000 * statistics.median(times[config]), 2),
                 ratio_to_first=round(statistics.median(t / f for t, f in zip(times[config], first)), 4),
                 round_ms=[round(1000 * t, 2) for t in times[config]], final_loss=round(losses[config], 4))
            for config in configs]
    return dict(rows=rows, rounds=orders)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n", 1)[1])
    parser.add_argument("--size", choices=sorted(train_step.SIZES), default="quick")
    parser.add_argument("--configs", required=True, help="comma-separated; the first is the reference")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=20, help="timed steps of each config a round")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--clip", choices=("variable", "global", "none"), default="global")
    parser.add_argument("--output", help="JSON results")
    args = parser.parse_args()
    configs = args.configs.split(",")
    check_configs(configs)
    if args.rounds < 1 or args.steps < 1:
        parser.error("--rounds and --steps: at least 1")
    import tensorflow as tf

    from kseq.training.devices.runtime import tune_cpu_runtime

    tune_cpu_runtime()  # as the tasks start
    size = train_step.SIZES[args.size]
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    result = run(configs, size, args.rounds, args.steps, args.warmup, args.clip)
    for row in result["rows"]:
        print(f"{row['config']:40s} {row['median_ms']:9.2f} ms (median)  x{row['ratio_to_first']:.3f} of "
              f"{configs[0]} (median of {args.rounds} paired rounds)  rounds: {row['round_ms']}")
    if args.output:
        with open(args.output, "w") as f:
            json.dump(dict(date=started, cpu=cpu_description(),
                           tensorflow=tf.__version__, size=args.size, steps=args.steps, clip=args.clip, **result),
                      f, indent=2)


if __name__ == "__main__":
    main()
