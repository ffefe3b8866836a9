"""The Transformer train step at fixed shapes: precision x XLA, kseq against
KerasHub layers of the same size, as tokens/s and MFU against matmul peaks
measured in the same run. Sized for a GPU by default (the base model);
`--size quick` is the CPU quick preset.

Every configuration runs in a fresh process (a dtype policy and XLA are
process-wide choices): it builds the model, compiles it as
kseq-train translate does (kseq's FusedAdam, keras' Adam for KerasHub's layers, on
the Transformer schedule with one global gradient norm clipped to 1,
label-smoothed masked cross-entropy), trains `--warmup` steps (tracing,
compilation, allocator) and then times `--steps` steps on one random batch of
fixed shape. Configurations are `<model>-<precision>[-xla]`: model `kseq`
(TransformerSeq2Seq, shared embeddings) or `hub` (KerasHub
TokenAndPositionEmbedding + TransformerEncoder/Decoder + Dense), precision
`float32` (TF32 on Ampere and later GPUs unless --no-tf32), `bfloat16` or
`float16` (keras' mixed policies). `+compiled_blocks` after it builds kseq's
model with `compiled_blocks=True` (each stack's blocks through one XLA
function, the step around them uncompiled), and each `+NAME=VALUE` sets an
XLA compile setting of `kseq.training.devices.xla_compile_flags`
(`+autotune_level=0`); configs that compile (`-xla`, `+compiled_blocks`) get
kseq's compile flags and the persistent cache in `--xla-cache`. A row's
`first_step_s` counts from its process's start to its first step's end.

MFU counts the model's matmul FLOPs (kseq's `transformer_flops`: 3x the
forward pass, causal self-attention counted whole) against the best of
float32 (or TF32) and bfloat16/float16 square matmuls measured first.

    .venv/bin/python benchmarks/train_step.py                     # on a GPU, base size
    .venv/bin/python benchmarks/train_step.py --size quick --configs kseq-float32,kseq-bfloat16
    .venv/bin/python benchmarks/train_step.py --size tiny --steps 3 --warmup 1   # smoke test
    .venv/bin/python benchmarks/train_step.py --configs kseq-bfloat16 --profile /tmp/trace
    .venv/bin/python benchmarks/train_step.py --size deep-tiny --configs kseq-float32 --profile /tmp/ops  # ops a step
    .venv/bin/python benchmarks/train_step.py --configs kseq-bfloat16 --profile /tmp/trace --trace-out $OUT
    .venv/bin/python benchmarks/train_step.py --size tiny --configs kseq-float32,\
        kseq-float32+compiled_blocks+autotune_level=0

--profile DIR also traces 5 timed steps of the first configuration with the
TensorFlow profiler (open DIR in TensorBoard's Profile tab) and prints, read
by benchmarks/trace_report.py, the op types that took the most GPU kernel
time (host op time without a GPU), TensorFlow ops and kernels a step and the
GPU's busy share. --trace-out DIR2 copies the raw trace into DIR2 gzipped
(`train-step-CONFIG-SIZE.xplane.pb.gz`, in numbered 15 MiB parts where
larger) with trace_report's JSON beside it; read it anywhere with
`benchmarks/trace_report.py DIR2 --steps 5`.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for trace_report

import trace_report  # noqa: E402

START = time.perf_counter()

SIZES = {  # layers, d_model, heads, ff, vocab, batch, source length, target length, dropout
    "base": dict(layers=6, d=512, heads=8, ff=2048, vocab=16000, batch=384, source=56, target=64, dropout=0.1),
    # The translation recipe's quick preset, which trains without dropout.
    "quick": dict(layers=2, d=192, heads=4, ff=768, vocab=4000, batch=64, source=40, target=40, dropout=0.0),
    "tiny": dict(layers=1, d=32, heads=2, ff=64, vocab=500, batch=8, source=12, target=12, dropout=0.1),
    # base's depth and variables at tiny widths: its profile on a CPU counts the ops a GPU would launch.
    "deep-tiny": dict(layers=6, d=64, heads=8, ff=128, vocab=1000, batch=8, source=12, target=12, dropout=0.1),
}
PROFILED_STEPS = 5
POLICIES = {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}
DEFAULT_CONFIGS = ("kseq-float32", "kseq-bfloat16", "kseq-float32-xla", "kseq-bfloat16-xla",
                   "hub-float32", "hub-bfloat16-xla")


def transformer_flops(size):
    """Training FLOPs of one step: 3x the forward matmuls (2 per multiply-add)."""
    d, ff, s, t = size["d"], size["ff"], size["source"], size["target"]
    encoder = 4 * 2 * s * d * d + 2 * 2 * s * s * d + 2 * 2 * s * d * ff
    decoder = (4 * 2 * t * d * d + 2 * 2 * t * t * d + 2 * 2 * t * d * d + 2 * 2 * s * d * d
               + 2 * 2 * t * s * d + 2 * 2 * t * d * ff)
    return 3 * size["batch"] * (size["layers"] * (encoder + decoder) + 2 * t * d * size["vocab"])


def matmul_peaks(n, seconds=2.0):
    """Best TFLOP/s of an n x n @ n x n matmul per dtype, in a tf.function."""
    import tensorflow as tf

    peaks = {}
    for name, dtype in (("float32", tf.float32), ("bfloat16", tf.bfloat16), ("float16", tf.float16)):
        a, b = (tf.cast(tf.random.normal((n, n)), dtype) for _ in range(2))
        matmul = tf.function(lambda a, b: tf.matmul(a, b))
        # Waiting on one element, not `.numpy()` of the product: copying the whole
        # n x n result to the host every few calls measured a fifth of the GPU's peak.
        for _ in range(3):
            matmul(a, b)[0, 0].numpy()
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            out = matmul(a, b)
            calls += 1
            if calls % 8 == 0:
                out[0, 0].numpy()
        out[0, 0].numpy()
        peaks[name] = round(2 * n**3 * calls / (time.perf_counter() - start) / 1e12, 3)
    return peaks


def build(model_name, size, policy, compiled_blocks=False):
    import keras

    import kseq

    if model_name == "kseq":
        # The argument only where asked for: xla_compile.py builds older kseqs too.
        blocks = dict(compiled_blocks=True) if compiled_blocks else {}
        return kseq.models.TransformerSeq2Seq(
            size["vocab"], size["vocab"], num_layers=size["layers"], d_model=size["d"],
            num_heads=size["heads"], ff_dim=size["ff"], dropout=size["dropout"],
            max_length=max(size["source"], size["target"]) + 1, share_embeddings=True, dtype=policy, **blocks)
    import keras_hub

    keras.config.set_dtype_policy(policy)  # functional layers take the global policy
    length = max(size["source"], size["target"])
    source = keras.Input((None,), dtype="int32", name="source_ids")
    target = keras.Input((None,), dtype="int32", name="target_ids")
    embedding = keras_hub.layers.TokenAndPositionEmbedding(size["vocab"], length, size["d"], mask_zero=True)
    x = embedding(source)
    for _ in range(size["layers"]):
        x = keras_hub.layers.TransformerEncoder(size["ff"], size["heads"], dropout=size["dropout"])(x)
    y = embedding(target)
    for _ in range(size["layers"]):
        y = keras_hub.layers.TransformerDecoder(size["ff"], size["heads"], dropout=size["dropout"])(y, x)
    logits = keras.layers.Dense(size["vocab"], dtype="float32")(y)
    return keras.Model({"source_ids": source, "target_ids": target}, logits)


def parse_config(config):
    """`<model>-<precision>[-xla][+compiled_blocks][+setting=value...]` ->
    dict(model, precision, xla, compiled_blocks, compile): the compile
    settings as a list."""
    head, *extras = config.split("+")
    model_name, precision, *rest = head.split("-")
    names = [extra for extra in extras if "=" not in extra]
    if (model_name not in ("kseq", "hub") or precision not in POLICIES or rest not in ([], ["xla"])
            or names not in ([], ["compiled_blocks"])):
        raise SystemExit(f"--configs: expected <kseq|hub>-<{'|'.join(POLICIES)}>[-xla][+compiled_blocks]"
                         f"[+setting=value]; got {config!r}")
    if names and model_name != "kseq":
        raise SystemExit(f"--configs {config!r}: compiled blocks are kseq's model's")
    return dict(model=model_name, precision=precision, xla=bool(rest), compiled_blocks=bool(names),
                compile=[extra for extra in extras if "=" in extra])


def compiles(parsed):
    """Whether a parsed config compiles anything with XLA."""
    return parsed["xla"] or parsed["compiled_blocks"]


def compiled_model(config, size, clip="global"):
    """`config`'s model compiled as the recipe compiles it, with one random
    batch of `size`'s shapes repeated: (model, optimizer, data)."""
    import numpy as np
    import tensorflow as tf

    parsed = parse_config(config)
    import keras

    import kseq
    from kseq.training.devices.distribution import clip_after_all_reduce

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    batch = {"source_ids": rng.integers(4, size["vocab"], (size["batch"], size["source"]), dtype="int32"),
             "target_ids": rng.integers(4, size["vocab"], (size["batch"], size["target"]), dtype="int32")}
    labels = rng.integers(4, size["vocab"], (size["batch"], size["target"]), dtype="int32")
    data = tf.data.Dataset.from_tensors((batch, labels)).repeat().prefetch(2)
    model = build(parsed["model"], size, POLICIES[parsed["precision"]], parsed["compiled_blocks"])
    # kseq's models train with its FusedAdam, as the recipe does; KerasHub's with keras' Adam.
    adam = kseq.optimizers.FusedAdam if parsed["model"] == "kseq" else keras.optimizers.Adam
    clipping = {"variable": dict(clipnorm=1.0), "global": dict(global_clipnorm=1.0), "none": {}}[clip]
    optimizer = adam(kseq.schedules.TransformerSchedule(size["d"], 4000), beta_2=0.98, epsilon=1e-9, **clipping)
    model.compile(clip_after_all_reduce(optimizer),
                  kseq.losses.MaskedSparseCategoricalCrossentropy(label_smoothing=0.1),
                  jit_compile=parsed["xla"])
    return model, optimizer, data


def timed_steps(model, data, steps):
    """Trains `steps` + 1 steps: (seconds a step from the first step's end, the last loss)."""
    import keras

    # Each step's end is when its loss can be read. keras reads it in a side
    # thread (an `async_safe` callback), so the steps are queued without a
    # wait per step, as in the recipe; timing from the first step's end
    # leaves fit's set-up out.
    ends = []
    timer = keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: ends.append(
        (float(logs["loss"]), time.perf_counter())))
    timer.async_safe = True
    model.fit(data, steps_per_epoch=steps + 1, epochs=1, verbose=0, callbacks=[timer])
    ends.sort(key=lambda end: end[1])
    return (ends[-1][1] - ends[0][1]) / steps, ends[-1][0]


def child(config, size, steps, warmup, profile, clip="global", trace_out=None, trace_name=None):
    import keras
    import tensorflow as tf

    parsed = parse_config(config)
    model, optimizer, data = compiled_model(config, size, clip)
    start = time.perf_counter()
    first = []
    first_step = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda b, logs: first or first.append(time.perf_counter()))
    model.fit(data, steps_per_epoch=warmup, epochs=1, verbose=0, callbacks=[first_step])
    warmup_seconds = time.perf_counter() - start
    seconds, loss = timed_steps(model, data, steps)
    result = dict(config=config, optimizer=type(optimizer).__name__, jit_compile=bool(model.jit_compile), ms_per_step=round(1000 * seconds, 2),
                  target_tokens_per_s=round(size["batch"] * size["target"] / seconds),
                  model_tflops=round(transformer_flops(size) / seconds / 1e12, 2),
                  warmup_s=round(warmup_seconds, 1), first_step_s=round(first[0] - START, 1),
                  final_loss=round(loss, 4), parameters=model.count_params(), compiled_blocks=parsed["compiled_blocks"],
                  compile_settings=parsed["compile"], xla_flags=os.environ.get("XLA_FLAGS", ""))
    if profile:
        tf.profiler.experimental.start(profile)
        start = time.perf_counter()
        model.fit(data, steps_per_epoch=PROFILED_STEPS, epochs=1, verbose=0)
        result["profiled_ms_per_step"] = round(1000 * (time.perf_counter() - start) / PROFILED_STEPS, 1)
        tf.profiler.experimental.stop()
        result.update(profile_summary(profile, trace_name or config, trace_out))
    return result


def profile_summary(logdir, name, trace_out=None):
    """The figures train_step prints from the newest trace under `logdir`
    (benchmarks/trace_report.py reads it).

    Args:
        logdir: the folder given to the profiler.
        name: the configuration's name, for the files written.
        trace_out: where to copy the raw trace (gzipped, in parts over
            trace_report.PART_BYTES) and write the report's JSON; None: nowhere.

    Returns:
        A dict: top_ops, ops_per_step, and on a GPU kernels_per_step,
        kernel_ms_per_step, gpu_busy_share, memcpy_ms_per_step; with
        `trace_out`, trace_files and trace_report (the JSON's path).
    """
    path = trace_report.find_trace(os.path.join(logdir, "plugins", "profile"))
    summary = {}
    if trace_out:
        # Saved before the analysis, so that a trace this reader fails on still comes back.
        summary["trace_files"] = trace_report.save_trace(path, trace_out, name)
        if len(summary["trace_files"]) > 1:
            summary["trace_note"] = (f"gzipped trace split into {len(summary['trace_files'])} parts of "
                                     f"{trace_report.PART_BYTES // 2**20} MiB; trace_report.py reads them from the .part000")
            if len(summary["trace_files"]) > 7:
                summary["trace_note"] += "; over 7 parts: a device returning 8 files will not bring them all back"
    try:
        space, _ = trace_report.load_space(path)
        report = trace_report.build_report(space, PROFILED_STEPS)
    except Exception as error:  # noqa: BLE001 - the timing row and the saved trace matter more
        summary["trace_error"] = repr(error)[:1000]
        return summary
    gpu, host = (report["gpu"] or [None])[0], report["host"]
    ranking = (gpu or host or {}).get("by_op_type", [])
    summary["top_ops"] = [(entry["name"], round(entry["ms"], 1)) for entry in ranking]
    if host:
        summary["ops_per_step"] = round(host["ops_per_step"])
    if gpu:
        summary.update(kernels_per_step=round(gpu["kernels_per_step"]), kernel_ms_per_step=round(gpu["kernel_ms_per_step"], 1),
                       gpu_busy_share=gpu["busy_share"], memcpy_ms_per_step=gpu["memcpy"]["ms_per_step"])
    if report["unread_gpu_planes"]:
        summary["unread_gpu_planes"] = report["unread_gpu_planes"]
    if trace_out:
        summary["trace_report"] = os.path.join(trace_out, name + ".trace-report.json")
        with open(summary["trace_report"], "w") as f:
            json.dump(dict(trace=path, trace_files=summary["trace_files"], note=summary.get("trace_note"), **report), f, indent=1)
    return summary


def print_profile(row):
    """The profiled configuration's few lines: top ops, ops and kernels a step, busy share, files."""
    where = "GPU kernel" if "kernels_per_step" in row else "host op"
    for name, ms in row.get("top_ops", [])[:10]:
        print(f"    {name:50s} {ms:10.1f} ms of {where} time over {PROFILED_STEPS} steps")
    for message in row.get("profiler_messages", []):
        if "Profiler session" not in message:  # the routine start and stop lines stay in the JSON only
            print(f"    profiler: {message}")
    if "ops_per_step" in row:
        print(f"    {row['ops_per_step']} TensorFlow ops a step (profiled)")
    if "kernels_per_step" in row:
        print(f"    profiled: {row['profiled_ms_per_step']} ms a step, {row['kernels_per_step']} kernels taking "
              f"{row['kernel_ms_per_step']} ms, GPU busy {row['gpu_busy_share']:.1%} of its active span, "
              f"memcpy {row['memcpy_ms_per_step']} ms")
    for key in ("unread_gpu_planes", "trace_error", "trace_note", "trace_files", "trace_report"):
        if key in row:
            print(f"    {key}: {row[key]}")
    sys.stdout.flush()


def child_environment(config, xla_cache):
    """The environment of a config's process: for a config that compiles,
    its compile settings, kseq's XLA compile flags (`configure_compilation`)
    and the persistent cache in `xla_cache` (default: a new folder)."""
    from kseq.training.devices.xla_compile_flags import ENVIRONMENT_VARIABLE, configure_compilation

    parsed = parse_config(config)
    environment = dict(os.environ)
    if not compiles(parsed):
        return environment
    cache = xla_cache or tempfile.mkdtemp(prefix="train_step_xla_")
    environment[ENVIRONMENT_VARIABLE] = ",".join(parsed["compile"])
    environment["TF_XLA_FLAGS"] = (environment.get("TF_XLA_FLAGS", "") +
                                   f" --tf_xla_persistent_cache_directory={cache}").strip()
    configure_compilation(cache, environment=environment)
    return environment


def run_child(config, args, profile):
    """Runs `config` in a process of its own: ([(config, row)], [failure]), one of them empty."""
    command = [sys.executable, __file__, "--child", config, "--size", args.size, "--steps", str(args.steps),
               "--warmup", str(args.warmup), "--clip", args.clip] + (["--no-tf32"] if args.no_tf32 else [])
    environment = child_environment(config, args.xla_cache)
    if profile:
        command += ["--profile", args.profile] + (["--trace-out", args.trace_out] if args.trace_out else [])
        environment["TF_CPP_MIN_LOG_LEVEL"] = "0"  # the profiler's own messages
    timeout = args.config_timeout
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environment)
        stdout, error, returncode = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as stopped:
        # A stopped configuration must not cost the ones after it their turn.
        stdout, error = (text.decode(errors="replace") if isinstance(text, bytes) else text or ""
                         for text in (stopped.stdout, stopped.stderr))
        returncode = f"stopped after {timeout} s (start, warm-up and compilation included)"
    rows = [json.loads(line[7:]) for line in stdout.splitlines() if line.startswith("RESULT ")]
    if not rows:
        failure = dict(config=config, returncode=returncode, error=error[-3000:])
        if isinstance(returncode, str):
            failure = dict(config=config, stopped_after_s=timeout, error=error[-1500:])
        print(f"{config}: failed ({returncode})\n{error[-1500:]}", flush=True)
        return [], [failure]
    row = rows[0]
    if profile:
        # Why a trace holds no GPU events (CUPTI not found, say) is only in the child's log.
        row["profiler_messages"] = [line[-300:] for line in error.splitlines()
                                    if any(word in line.lower() for word in ("cupti", "profiler", "tracer"))][-20:]
        if "trace_report" in row:  # the messages travel with the trace
            with open(row["trace_report"]) as f:
                saved = json.load(f)
            with open(row["trace_report"], "w") as f:
                json.dump(dict(saved, profiler_messages=row["profiler_messages"]), f, indent=1)
    return [(config, row)], []


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n", 1)[1])
    parser.add_argument("--size", choices=sorted(SIZES), default="base")
    parser.add_argument("--configs", default=",".join(DEFAULT_CONFIGS))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--peak-size", type=int, help="matmul size for the peaks (8192 on a GPU)")
    parser.add_argument("--clip", choices=("variable", "global", "none"), default="global",
                        help="clip all gradients together to norm 1 (global_clipnorm, as the recipes do), "
                             "each to norm 1 (clipnorm), or none")
    parser.add_argument("--no-tf32", action="store_true", help="float32 matmuls without TF32")
    parser.add_argument("--profile", help="trace the first configuration's steps into this folder")
    parser.add_argument("--trace-out", help="with --profile: copy the raw trace here gzipped (in 15 MiB parts "
                                            "where larger) with its report as JSON, named by configuration")
    parser.add_argument("--config-timeout", type=float,
                        help="stop a configuration after this many seconds and go on with the next")
    parser.add_argument("--xla-cache", help="the persistent XLA cache of configs that compile "
                                            "(default: a new folder a config)")
    parser.add_argument("--output", help="JSON results, rewritten after each configuration")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trace_out and not args.profile:
        parser.error("--trace-out: needs --profile DIR (the trace it copies)")
    configs = args.configs.split(",")
    for config in configs:
        parse_config(config)  # a typo stops the run before any configuration runs
    import tensorflow as tf

    if args.no_tf32:
        tf.config.experimental.enable_tensor_float_32_execution(False)
    size = SIZES[args.size]
    if args.child:
        row = child(args.child, size, args.steps, args.warmup, args.profile, args.clip, args.trace_out,
                    f"train-step-{args.child}-{args.size}")
        print("RESULT " + json.dumps(row), flush=True)
        return
    gpus = tf.config.list_physical_devices("GPU")
    device = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU") if gpus else platform.processor() or "CPU"
    peaks = matmul_peaks(args.peak_size or (8192 if gpus else 1024))
    print(f"device: {device}; TF32 {'on' if tf.config.experimental.tensor_float_32_execution_enabled() else 'off'}; "
          f"matmul peaks (TFLOP/s): {peaks}; model FLOPs per step: {transformer_flops(size) / 1e12:.2f} T")
    rows, failed = [], []

    def write_output():  # after every configuration: a run stopped midway keeps what it measured
        if not args.output:
            return
        with open(args.output + ".tmp", "w") as f:
            json.dump(dict(device=device, size=args.size, shapes=size, peaks_tflops=peaks,
                           date=time.strftime("%Y-%m-%d"), tensorflow=tf.__version__, clip=args.clip, rows=rows, failed=failed),
                      f, indent=2)
        os.replace(args.output + ".tmp", args.output)

    for index, config in enumerate(configs):
        results, failures = run_child(config, args, profile=bool(args.profile) and index == 0)
        failed += failures
        for config, row in results:
            compute = parse_config(config)["precision"]
            row["mfu"] = round(row["model_tflops"] / peaks[compute], 3)
            rows.append(row)
            print(f"{config:22s} {row['ms_per_step']:9.2f} ms  {row['target_tokens_per_s']:>10,} tgt tok/s  "
                  f"{row['model_tflops']:7.2f} TFLOP/s  MFU {row['mfu']:.1%} of {compute} peak  "
                  f"XLA ran: {row['jit_compile']}  warm-up {row['warmup_s']} s  first step {row['first_step_s']} s",
                  flush=True)
            print_profile(row)
        write_output()
    write_output()


if __name__ == "__main__":
    main()
