"""The Transformer train step at fixed shapes: precision x XLA, kseq against
KerasHub layers of the same size, as tokens/s and MFU against matmul peaks
measured in the same run. Sized for a GPU by default (the base model);
`--size quick` is the CPU quick preset.

Every configuration runs in a fresh process (a dtype policy and XLA are
process-wide choices): it builds the model, compiles it as
recipes/translate.py does (kseq's FusedAdam, keras' Adam for KerasHub's layers, on
the Transformer schedule with one global gradient norm clipped to 1,
label-smoothed masked cross-entropy), trains `--warmup` steps (tracing,
compilation, allocator) and then times `--steps` steps on one random batch of
fixed shape. Configurations are `<model>-<precision>[-xla]`: model `kseq`
(TransformerSeq2Seq, shared embeddings) or `hub` (KerasHub
TokenAndPositionEmbedding + TransformerEncoder/Decoder + Dense), precision
`float32` (TF32 on Ampere and later GPUs unless --no-tf32), `bfloat16` or
`float16` (keras' mixed policies).

MFU counts the model's matmul FLOPs (kseq's `transformer_flops`: 3x the
forward pass, causal self-attention counted whole) against the best of
float32 (or TF32) and bfloat16/float16 square matmuls measured first.

    .venv/bin/python benchmarks/train_step.py                     # on a GPU, base size
    .venv/bin/python benchmarks/train_step.py --size quick --configs kseq-float32,kseq-bfloat16
    .venv/bin/python benchmarks/train_step.py --size tiny --steps 3 --warmup 1   # smoke test
    .venv/bin/python benchmarks/train_step.py --configs kseq-bfloat16 --profile /tmp/trace
    .venv/bin/python benchmarks/train_step.py --size deep-tiny --configs kseq-float32 --profile /tmp/ops  # ops a step

--profile DIR also traces 5 timed steps of the first configuration with the
TensorFlow profiler (open DIR in TensorBoard's Profile tab) and prints the
ops that took the most device time.
"""

import argparse
import collections
import glob
import json
import os
import platform
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

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


def build(model_name, size, policy):
    import keras

    import kseq

    if model_name == "kseq":
        return kseq.models.TransformerSeq2Seq(
            size["vocab"], size["vocab"], num_layers=size["layers"], d_model=size["d"],
            num_heads=size["heads"], ff_dim=size["ff"], dropout=size["dropout"],
            max_length=max(size["source"], size["target"]) + 1, share_embeddings=True, dtype=policy)
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


def child(config, size, steps, warmup, profile, clip="global"):
    import numpy as np
    import tensorflow as tf

    model_name, precision, *rest = config.split("-")
    import keras

    import kseq
    from kseq.training.devices.distribution import clip_after_all_reduce

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    batch = {"source_ids": rng.integers(4, size["vocab"], (size["batch"], size["source"]), dtype="int32"),
             "target_ids": rng.integers(4, size["vocab"], (size["batch"], size["target"]), dtype="int32")}
    labels = rng.integers(4, size["vocab"], (size["batch"], size["target"]), dtype="int32")
    data = tf.data.Dataset.from_tensors((batch, labels)).repeat().prefetch(2)
    model = build(model_name, size, POLICIES[precision])
    # kseq's models train with its FusedAdam, as the recipe does; KerasHub's with keras' Adam.
    adam = kseq.optimizers.FusedAdam if model_name == "kseq" else keras.optimizers.Adam
    clipping = {"variable": dict(clipnorm=1.0), "global": dict(global_clipnorm=1.0), "none": {}}[clip]
    optimizer = adam(kseq.schedules.TransformerSchedule(size["d"], 4000), beta_2=0.98, epsilon=1e-9, **clipping)
    model.compile(clip_after_all_reduce(optimizer),
                  kseq.losses.MaskedSparseCategoricalCrossentropy(label_smoothing=0.1),
                  jit_compile="xla" in rest)
    start = time.perf_counter()
    model.fit(data, steps_per_epoch=warmup, epochs=1, verbose=0)
    warmup_seconds = time.perf_counter() - start
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
    seconds = (ends[-1][1] - ends[0][1]) / steps
    result = dict(config=config, optimizer=type(optimizer).__name__, jit_compile=bool(model.jit_compile), ms_per_step=round(1000 * seconds, 2),
                  target_tokens_per_s=round(size["batch"] * size["target"] / seconds),
                  model_tflops=round(transformer_flops(size) / seconds / 1e12, 2),
                  warmup_s=round(warmup_seconds, 1), final_loss=round(ends[-1][0], 4),
                  parameters=model.count_params())
    if profile:
        tf.profiler.experimental.start(profile)
        start = time.perf_counter()
        model.fit(data, steps_per_epoch=PROFILED_STEPS, epochs=1, verbose=0)
        result["profiled_ms_per_step"] = round(1000 * (time.perf_counter() - start) / PROFILED_STEPS, 1)
        tf.profiler.experimental.stop()
        space = load_profile(profile)
        result["top_ops"] = top_ops(space)
        result["ops_per_step"] = round(sum(1 for _ in op_events(space)) / PROFILED_STEPS)
        result.update(kernel_time(space))
    return result


def load_profile(logdir):
    """The newest trace the TensorFlow profiler wrote under `logdir` (an XSpace)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    path = sorted(glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb")))[-1]
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    return space


def kernel_time(space):
    """A GPU's kernels per profiled step: how many, and their milliseconds
    summed over its streams. Far fewer milliseconds than the step's means
    the GPU waits for the host to launch them."""
    count, picoseconds = 0, 0
    for plane in space.planes:
        if plane.name.startswith("/device:GPU"):
            for line in plane.lines:
                if line.name.startswith("Stream") and "Memcpy" not in line.name:
                    count += len(line.events)
                    picoseconds += sum(event.duration_ps for event in line.events)
    if not count:
        return {}
    return dict(kernels_per_step=round(count / PROFILED_STEPS), kernel_ms_per_step=round(picoseconds / 1e9 / PROFILED_STEPS, 1))


def op_events(space):
    """(op type, picoseconds) of each TensorFlow op execution: a GPU's
    "TensorFlow Ops"/"XLA Ops" lines, else the CPU's ("node:Type" events on
    the tf_Compute threads)."""
    gpu = [plane for plane in space.planes if plane.name.startswith("/device:GPU")]
    for plane in gpu or [plane for plane in space.planes if plane.name.startswith("/host:CPU")]:
        for line in plane.lines:
            if line.name not in ("TensorFlow Ops", "XLA Ops") if gpu else not line.name.startswith("tf_Compute"):
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if gpu or (":" in name and "::" not in name and not name.startswith("__")):
                    yield name.split(":")[-1], event.duration_ps


def top_ops(space, count=15):
    """(op type, milliseconds) summed over a profile's op executions, the most first."""
    totals = collections.Counter()
    for name, picoseconds in op_events(space):
        totals[name] += picoseconds / 1e9
    return [(name, round(ms, 1)) for name, ms in totals.most_common(count)]


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
    parser.add_argument("--config-timeout", type=float,
                        help="stop a configuration after this many seconds and go on with the next")
    parser.add_argument("--output", help="JSON results, rewritten after each configuration")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    import tensorflow as tf

    if args.no_tf32:
        tf.config.experimental.enable_tensor_float_32_execution(False)
    size = SIZES[args.size]
    if args.child:
        print("RESULT " + json.dumps(child(args.child, size, args.steps, args.warmup, args.profile, args.clip)))
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

    for index, config in enumerate(args.configs.split(",")):
        command = [sys.executable, __file__, "--child", config, "--size", args.size, "--steps", str(args.steps),
                   "--warmup", str(args.warmup), "--clip", args.clip] + (["--no-tf32"] if args.no_tf32 else [])
        environment = None
        if args.profile and index == 0:
            command += ["--profile", args.profile]
            environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0")  # the profiler's own messages
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=args.config_timeout, env=environment)
        except subprocess.TimeoutExpired as stopped:
            # A stopped configuration must not cost the ones after it their turn.
            error = stopped.stderr.decode(errors="replace") if isinstance(stopped.stderr, bytes) else stopped.stderr
            print(f"{config}: stopped after {args.config_timeout} s (start, warm-up and compilation included)\n"
                  f"{(error or '')[-1500:]}", flush=True)
            failed.append(dict(config=config, stopped_after_s=args.config_timeout))
            write_output()
            continue
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if done.returncode or not lines:
            print(f"{config}: failed\n{done.stderr[-3000:]}", flush=True)
            failed.append(dict(config=config, returncode=done.returncode, error=done.stderr[-3000:]))
            write_output()
            continue
        row = json.loads(lines[-1][7:])
        if args.profile and index == 0:
            # Why a trace holds no GPU events (CUPTI not found, say) is only in the child's log.
            row["profiler_messages"] = [line[-300:] for line in done.stderr.splitlines()
                                        if any(word in line.lower() for word in ("cupti", "profiler", "tracer"))][-20:]
        compute = config.split("-")[1]
        row["mfu"] = round(row["model_tflops"] / peaks[compute], 3)
        rows.append(row)
        print(f"{config:22s} {row['ms_per_step']:9.2f} ms  {row['target_tokens_per_s']:>10,} tgt tok/s  "
              f"{row['model_tflops']:7.2f} TFLOP/s  MFU {row['mfu']:.1%} of {compute} peak  "
              f"XLA ran: {row['jit_compile']}  warm-up {row['warmup_s']} s", flush=True)
        for name, ms in row.get("top_ops", []):
            print(f"    {name:50s} {ms:10.1f} ms over {PROFILED_STEPS} steps")
        for message in row.get("profiler_messages", []):
            print(f"    profiler: {message}")
        if "ops_per_step" in row:
            print(f"    {row['ops_per_step']} TensorFlow ops a step (profiled)")
        if "kernels_per_step" in row:
            print(f"    profiled: {row['profiled_ms_per_step']} ms a step, {row['kernels_per_step']} kernels "
                  f"taking {row['kernel_ms_per_step']} ms", flush=True)
        write_output()
    write_output()


if __name__ == "__main__":
    main()
