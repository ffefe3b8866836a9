"""Training throughput and model FLOPs utilisation (MFU) on this machine.

Every configuration trains on the default translation data (Bible verses,
English -> French, `kseq.data.bible.load_bible_pairs("train")`) with one
SentencePiece vocabulary of 4,000 pieces, trained once and saved to a temp
file that every run loads, so only the model and the batching differ. Each
configuration runs in its own fresh process (peak RSS, VmHWM, is per run),
after `kseq.training.devices.runtime.tune_cpu_runtime()`, under a one-device MirroredStrategy
as `kseq-train translate` uses on a CPU, with `jit_compile=False` (the
recipe's CPU setting) and no metrics but the loss.

The batches: the first N batches (--batches) of
`bucketed_pair_dataset(..., token_budget=2560, max_length=96, seed=0)`, built
once in a preparation process and saved, so every run sees exactly the same
sentence pairs. Each run feeds them to `model.fit` from a cached `tf.data`
set, runs one pass to trace and warm up (allocator, caches), then times a
second pass (wall clock). Configurations:

1. `peak`: float32 `tf.matmul` in a `tf.function` at a few sizes (1024^3 and
   the shapes of the Transformer train step), 2*M*N*K FLOPs each; the best
   sustained GFLOP/s is the machine's dense peak used for MFU. Also bfloat16
   at 1024^3 and the logits shape: the peak for runs in mixed_bfloat16.
2. `kseq`: `kseq.models.TransformerSeq2Seq`, the quick preset of
   kseq-train translate (2+2 layers, d_model 192, 4 heads, ff 768, dropout 0,
   shared embeddings, max_length 97), at the recipe's precision ("auto":
   mixed_bfloat16 on a CPU with bfloat16 units, else float32), kseq's
   `FusedAdam` (beta_2 0.98, epsilon 1e-9, clipnorm 1.0) on
   `TransformerSchedule(192, 400)`,
   `MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)`, the bucketed
   batches as they are. `kseq_float32`: the same in float32. `kseq_xla`: the
   same as `kseq` with `jit_compile=True` (`kseq-train translate
   --jit-compile on`); its warm-up pass includes one XLA compilation per
   batch shape.
3. `hub64`, `hub26`: the reference, KerasHub layers of the same size
   (`TokenAndPositionEmbedding` with `mask_zero=True` for each language,
   2 `TransformerEncoder` + 2 `TransformerDecoder`, 4 heads, intermediate 768,
   dropout 0, a `Dense` over the same 4,000 ids) fed as the keras-io example
   feeds it: the same sentence pairs, every one padded to 96 tokens, batches
   of a fixed size (64 as in keras-io; 26 = 2560 // 97, so a batch holds
   about as many padded tokens as kseq's), in float32 with keras' Adam (same
   settings) and kseq's loss (the Dense gives logits; keras-io's softmax
   then log would be the same work).
   Keras compiles without XLA on a CPU-only machine by default
   (`jit_compile="auto"`), so that is the reference; `hub64_xla` is the same
   with `jit_compile=True`, for the XLA-to-XLA comparison.
4. `rnn_luong`, `rnn_bahdanau`: `kseq.models.RNNSeq2Seq(4000, 4000,
   embed_dim=256, units=256, cell="lstm", attention="general"|"bahdanau")`;
   `keras_lstm`: an attention-free Keras LSTM encoder-decoder of the same size
   (Embedding + LSTM(256, return_state=True), its states initialising an
   LSTM(256, return_sequences=True) decoder, Dense(4000)); all three on the
   bucketed batches, Adam(1e-3, clipnorm 1.0) (kseq's FusedAdam and the
   recipe's precision for kseq's two, keras' Adam in float32 for keras'),
   the same loss.

Reported per run: real (non-PAD) target tokens/s (the same sentences, so the
same real tokens, in every training run), padded target tokens/s (label
positions), steps/s, peak RSS, CPU time; for the Transformers the useful
FLOPs of the timed pass, counted from the batch shapes (see `transformer_flops`)
and divided by the time and by the measured matmul peak (MFU).

    .venv/bin/python benchmarks/training.py                    # about 15 minutes on 2 cores
    .venv/bin/python benchmarks/training.py --batches 3 --peak-seconds 0.5 \\
        --output /tmp/training-smoke.json                      # smoke test, about 3.5 minutes
    .venv/bin/python benchmarks/training.py --batches 3 --peak-seconds 0.5 \\
        --configs peak,kseq --output /tmp/training-smoke.json  # about 75 s

Most of a short run is fixed cost per process: importing TensorFlow and
tracing the train step (the smoke run's 3-batch warm-up passes took
14-20 s for each Transformer, 5-7 s for each RNN); the 75 s is the sum of
that smoke run's prepare, peak and kseq processes, not a separate run.

The JSON (--output) has machine info, load averages sampled during each run,
versions and every raw number; a Markdown table is printed at the end.
"""

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from load_sampler import LoadSampler  # noqa: E402

VOCAB_SIZE = 4000
TOKEN_BUDGET = 2560
MAX_LENGTH = 96
# The quick preset of kseq-train translate.
D_MODEL, NUM_HEADS, FF_DIM, NUM_LAYERS = 192, 4, 768, 2
RNN_SIZE = 256
CONFIGS = ("peak", "kseq", "kseq_float32", "kseq_xla", "hub64", "hub64_xla", "hub26", "rnn_luong",
           "rnn_bahdanau", "keras_lstm")
TRANSFORMERS = ("kseq", "kseq_float32", "kseq_xla", "hub64", "hub64_xla", "hub26")
# kseq's models train at the recipes' precision ("auto": kseq.training.devices.precision);
# the references, and kseq_float32, in float32 (keras' default).
RECIPE_PRECISION = ("kseq", "kseq_xla", "rnn_luong", "rnn_bahdanau")
LABELS = {
    "kseq": "kseq TransformerSeq2Seq, bucketed (budget 2560)",
    "kseq_float32": "kseq TransformerSeq2Seq, bucketed, float32",
    "kseq_xla": "kseq TransformerSeq2Seq, bucketed, XLA",
    "hub64": "KerasHub Transformer, pad to 96, batch 64",
    "hub64_xla": "KerasHub Transformer, pad to 96, batch 64, XLA",
    "hub26": "KerasHub Transformer, pad to 96, batch 26",
    "rnn_luong": "kseq RNNSeq2Seq LSTM + Luong general, bucketed",
    "rnn_bahdanau": "kseq RNNSeq2Seq LSTM + Bahdanau, bucketed",
    "keras_lstm": "Keras LSTM enc-dec, no attention, bucketed",
}


# ----------------------------------------------------------------------------
# FLOP counting (pure Python, used by the parent and the children)

def transformer_flops(source_lengths, target_lengths, d=D_MODEL, ff=FF_DIM, layers=NUM_LAYERS,
                      vocab=VOCAB_SIZE):
    """Forward matmul FLOPs (2 per multiply-add) of the encoder-decoder for
    rows of the given source and target lengths (each row on its own, so
    pass the padded width for "padded-shape" FLOPs, the real length for
    "real-token" FLOPs). Counted: Q, K, V and output projections, Q K^T and
    A V of every attention (the decoder's causal self-attention counted as
    the full T x T product, as a dense kernel computes it), the feed-forward
    layers, and the output projection over the vocabulary. Not counted:
    embedding lookups, softmax, LayerNorm, residuals, loss, optimizer (not
    matmuls). A training step is counted as 3x the forward pass."""
    total = 0
    for s, t in zip(source_lengths, target_lengths):
        s, t = int(s), int(t)
        encoder = 4 * 2 * s * d * d + 2 * 2 * s * s * d + 2 * 2 * s * d * ff
        decoder = (4 * 2 * t * d * d + 2 * 2 * t * t * d  # self-attention
                   + 2 * 2 * t * d * d + 2 * 2 * s * d * d + 2 * 2 * t * s * d  # cross-attention
                   + 2 * 2 * t * d * ff)  # feed-forward
        total += layers * (encoder + decoder) + 2 * t * d * vocab
    return total


# ----------------------------------------------------------------------------
# Children (each a fresh process)

def peak_rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return None


def versions():
    import keras
    import numpy as np
    import tensorflow as tf

    result = {"python": platform.python_version(), "tensorflow": tf.__version__,
              "keras": keras.__version__, "numpy": np.__version__}
    try:
        import keras_hub

        result["keras_hub"] = keras_hub.__version__
    except ImportError:
        pass
    return result


def child_prepare(workdir, batches):
    """Trains the vocabulary, builds the first `batches` bucketed batches and
    saves both to `workdir` (spm.model, batches.npz)."""
    import numpy as np

    from kseq.data.bible import load_bible_pairs
    from kseq.data.bucketing import bucketed_pair_dataset
    from kseq.data.subword_tokenizer import SubwordTokenizer

    sources, targets = load_bible_pairs("train")
    start = time.perf_counter()
    tokenizer = SubwordTokenizer.train(sources + targets, VOCAB_SIZE)
    tokenizer_seconds = time.perf_counter() - start
    tokenizer.save(os.path.join(workdir, "spm.model"))
    dataset, report = bucketed_pair_dataset(sources, targets, tokenizer, tokenizer,
                                            token_budget=TOKEN_BUDGET, max_length=MAX_LENGTH, seed=0)
    arrays = {}
    for i, (inputs, labels) in enumerate(dataset.take(batches)):
        arrays[f"source_{i}"] = inputs["source_ids"].numpy()
        arrays[f"target_{i}"] = inputs["target_ids"].numpy()
        arrays[f"labels_{i}"] = labels.numpy()
    count = len(arrays) // 3
    np.savez(os.path.join(workdir, "batches.npz"), **arrays)
    return {"pairs": len(sources), "pipeline": str(report), "vocab_size": tokenizer.vocab_size,
            "tokenizer_train_s": round(tokenizer_seconds, 1), "batches": count,
            "batches_per_epoch": int(dataset.cardinality().numpy())}


def load_batches(workdir):
    """[(source (B, S), target_ids (B, T), labels (B, T))] int32 arrays."""
    import numpy as np

    data = np.load(os.path.join(workdir, "batches.npz"))
    count = len(data.files) // 3
    return [(data[f"source_{i}"], data[f"target_{i}"], data[f"labels_{i}"]) for i in range(count)]


def child_peak(seconds):
    """Best sustained float32 matmul GFLOP/s per shape, one matmul per call of
    a tf.function, inputs resident, best of 3 timed windows of `seconds`."""
    import tensorflow as tf

    shapes = [  # (name, batch, M, K, N, transpose_a)
        ("1024x1024 @ 1024x1024", 1, 1024, 1024, 1024, False),
        ("2048x2048 @ 2048x2048", 1, 2048, 2048, 2048, False),
        ("2560x192 @ 192x768 (feed-forward in)", 1, 2560, 192, 768, False),
        ("2560x768 @ 768x192 (feed-forward out)", 1, 2560, 768, 192, False),
        ("2560x192 @ 192x192 (attention projection)", 1, 2560, 192, 192, False),
        ("2560x192 @ 192x576 (fused Q/K/V projection)", 1, 2560, 192, 576, False),
        ("(2560x192)^T @ 2560x192 (projection weight gradient)", 1, 192, 2560, 192, True),
        ("(2560x192)^T @ 2560x576 (fused Q/K/V weight gradient)", 1, 192, 2560, 576, True),
        ("2560x192 @ 192x4000 (logits)", 1, 2560, 192, 4000, False),
        ("(2560x192)^T @ 2560x768 (weight gradient)", 1, 192, 2560, 768, True),
        ("256 x (40x48 @ 48x40) (attention scores, B 64 x H 4)", 256, 40, 48, 40, False),
    ]
    results = []
    for name, batch, m, k, n, transpose_a in shapes:
        rates = matmul_rates(tf, tf.float32, batch, m, k, n, transpose_a, seconds)
        results.append({"shape": name, "batch": batch, "m": m, "k": k, "n": n,
                        "gflops_best": round(max(rates), 1),
                        "gflops_windows": [round(r, 1) for r in rates]})
    best = max(results, key=lambda r: r["gflops_best"])
    bfloat16 = [round(max(matmul_rates(tf, tf.bfloat16, 1, m, k, n, False, seconds)), 1)
                for m, k, n in ((1024, 1024, 1024), (2560, 192, 4000))]
    return {"shapes": results, "peak_gflops": best["gflops_best"], "peak_shape": best["shape"],
            "peak_gflops_bfloat16": max(bfloat16), "bfloat16_gflops": bfloat16}


def matmul_rates(tf, dtype, batch, m, k, n, transpose_a, seconds):
    """GFLOP/s of 3 timed windows of one (batched) matmul in a tf.function."""
    a_shape = (k, m) if transpose_a else (m, k)
    a = tf.cast(tf.random.normal(a_shape if batch == 1 else (batch,) + a_shape), dtype)
    b = tf.cast(tf.random.normal((k, n) if batch == 1 else (batch, k, n)), dtype)

    @tf.function
    def matmul(a, b):
        return tf.matmul(a, b, transpose_a=transpose_a)

    for _ in range(3):
        matmul(a, b).numpy()
    flops = 2 * batch * m * n * k
    rates = []
    for _ in range(3):
        calls, start = 0, time.perf_counter()
        while True:
            out = matmul(a, b)
            calls += 1
            if calls % 4 == 0:
                out.numpy()
                elapsed = time.perf_counter() - start
                if elapsed >= seconds:
                    break
        rates.append(flops * calls / elapsed / 1e9)
    return rates


def make_optimizer(keras, kseq, transformer, reference):
    """The recipe's optimizer: kseq's FusedAdam for kseq's models (as
    kseq-train translate), keras' Adam for the references (as keras-io)."""
    from kseq.training.devices.distribution import clip_after_all_reduce

    adam = keras.optimizers.Adam if reference else kseq.optimizers.FusedAdam
    if transformer:
        rate = kseq.schedules.TransformerSchedule(D_MODEL, 400)
        optimizer = adam(rate, beta_2=0.98, epsilon=1e-9, clipnorm=1.0)
    else:  # kseq-train translate's rate for --arch rnn
        optimizer = adam(1e-3, clipnorm=1.0)
    return clip_after_all_reduce(optimizer)


def build_model(name, keras, kseq, dtype):
    if name == "kseq":
        return kseq.models.TransformerSeq2Seq(
            VOCAB_SIZE, VOCAB_SIZE, num_layers=NUM_LAYERS, d_model=D_MODEL, num_heads=NUM_HEADS,
            ff_dim=FF_DIM, dropout=0.0, max_length=MAX_LENGTH + 1, share_embeddings=True, dtype=dtype)
    if name.startswith("hub"):
        import keras_hub

        source = keras.Input((None,), dtype="int32", name="source_ids")
        target = keras.Input((None,), dtype="int32", name="target_ids")
        x = keras_hub.layers.TokenAndPositionEmbedding(VOCAB_SIZE, MAX_LENGTH, D_MODEL,
                                                       mask_zero=True)(source)
        for _ in range(NUM_LAYERS):
            x = keras_hub.layers.TransformerEncoder(FF_DIM, NUM_HEADS, dropout=0.0)(x)
        y = keras_hub.layers.TokenAndPositionEmbedding(VOCAB_SIZE, MAX_LENGTH, D_MODEL,
                                                       mask_zero=True)(target)
        for _ in range(NUM_LAYERS):
            y = keras_hub.layers.TransformerDecoder(FF_DIM, NUM_HEADS, dropout=0.0)(y, x)
        logits = keras.layers.Dense(VOCAB_SIZE)(y)
        return keras.Model({"source_ids": source, "target_ids": target}, logits, name="keras_hub")
    if name.startswith("rnn_"):
        return kseq.models.RNNSeq2Seq(VOCAB_SIZE, VOCAB_SIZE, embed_dim=RNN_SIZE, units=RNN_SIZE,
                                      cell="lstm", attention=name[4:].replace("luong", "general"),
                                      dtype=dtype)
    if name == "keras_lstm":
        source = keras.Input((None,), dtype="int32", name="source_ids")
        target = keras.Input((None,), dtype="int32", name="target_ids")
        x = keras.layers.Embedding(VOCAB_SIZE, RNN_SIZE, mask_zero=True)(source)
        _, h, c = keras.layers.LSTM(RNN_SIZE, return_state=True)(x)
        y = keras.layers.Embedding(VOCAB_SIZE, RNN_SIZE, mask_zero=True)(target)
        y = keras.layers.LSTM(RNN_SIZE, return_sequences=True)(y, initial_state=[h, c])
        logits = keras.layers.Dense(VOCAB_SIZE)(y)
        return keras.Model({"source_ids": source, "target_ids": target}, logits, name="keras_lstm")
    raise ValueError(name)


def pad_to(rows, width):
    import numpy as np

    out = np.zeros((len(rows), width), np.int32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def child_train(name, workdir):
    base, xla = name.removesuffix("_xla").removesuffix("_float32"), name.endswith("_xla")
    import numpy as np
    import tensorflow as tf

    from kseq.training.devices.runtime import tune_cpu_runtime

    tuned = tune_cpu_runtime()
    import keras

    import kseq

    keras.utils.set_random_seed(0)
    batches = load_batches(workdir)
    if base.startswith("hub"):
        # keras-io's pipeline: every pair padded to 96 tokens, fixed batches.
        batch_size = int(base[3:])
        rows = [(s[s != 0], t[t != 0], l[l != 0]) for source, target, labels in batches
                for s, t, l in zip(source, target, labels)]
        sources = pad_to([r[0] for r in rows], MAX_LENGTH)
        targets = pad_to([r[1] for r in rows], MAX_LENGTH)
        labels = pad_to([r[2] for r in rows], MAX_LENGTH)
        batches = [(sources[i:i + batch_size], targets[i:i + batch_size], labels[i:i + batch_size])
                   for i in range(0, len(rows), batch_size)]
        dataset = tf.data.Dataset.from_tensor_slices(
            ({"source_ids": sources, "target_ids": targets}, labels)).batch(batch_size)
    else:
        def generate():
            for source, target, labels in batches:
                yield {"source_ids": source, "target_ids": target}, labels

        spec = tf.TensorSpec((None, None), tf.int32)
        dataset = tf.data.Dataset.from_generator(
            generate, output_signature=({"source_ids": spec, "target_ids": spec}, spec))
    dataset = dataset.cache().prefetch(tf.data.AUTOTUNE)

    real_tokens = int(sum(np.count_nonzero(labels) for _, _, labels in batches))
    padded_tokens = int(sum(labels.size for _, _, labels in batches))
    source_real = int(sum(np.count_nonzero(source) for source, _, _ in batches))
    source_padded = int(sum(source.size for source, _, _ in batches))
    result = {"config": name, "steps": len(batches), "real_target_tokens": real_tokens,
              "padded_target_tokens": padded_tokens, "real_source_tokens": source_real,
              "padded_source_tokens": source_padded, "tune_cpu_runtime": tuned,
              "batch_shapes": sorted({f"{s.shape[0]}x{s.shape[1]}/{t.shape[1]}" for s, t, _ in batches})}
    if name in TRANSFORMERS:
        real_forward = sum(transformer_flops(np.count_nonzero(source, 1), np.count_nonzero(labels, 1))
                           for source, _, labels in batches)
        padded_forward = sum(transformer_flops([source.shape[1]] * len(source),
                                               [labels.shape[1]] * len(labels))
                             for source, _, labels in batches)
        result["train_flops_real"] = 3 * real_forward
        result["train_flops_padded"] = 3 * padded_forward

    from kseq.training.devices.precision import resolve_precision

    precision = resolve_precision("auto").policy if name in RECIPE_PRECISION else "float32"
    result["precision"] = precision
    with tf.distribute.MirroredStrategy().scope():
        model = build_model(base, keras, kseq, precision)
        reference = base.startswith("hub") or base == "keras_lstm"
        model.compile(make_optimizer(keras, kseq, name in TRANSFORMERS, reference),
                      kseq.losses.MaskedSparseCategoricalCrossentropy(label_smoothing=0.1),
                      jit_compile=xla)
    start = time.perf_counter()
    warm = model.fit(dataset, epochs=1, verbose=0)  # traces, fills the cache and the allocator
    result["warmup_pass_s"] = round(time.perf_counter() - start, 2)
    result["parameters"] = int(model.count_params())
    step_ends = []
    timer = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: step_ends.append(time.perf_counter()))
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    history = model.fit(dataset, epochs=1, verbose=0, callbacks=[timer])
    wall = time.perf_counter() - start
    # Seconds of each timed step (from the previous step's end), to spot stalls.
    result["step_seconds"] = [round(b - a, 3) for a, b in zip([start] + step_ends, step_ends)]
    after = resource.getrusage(resource.RUSAGE_SELF)
    result.update({
        "timed_pass_s": round(wall, 3),
        "real_target_tokens_per_s": round(real_tokens / wall, 1),
        "padded_target_tokens_per_s": round(padded_tokens / wall, 1),
        "steps_per_s": round(len(batches) / wall, 3),
        "user_cpu_s": round(after.ru_utime - before.ru_utime, 1),
        "sys_cpu_s": round(after.ru_stime - before.ru_stime, 1),
        "minor_faults": after.ru_minflt - before.ru_minflt,
        "cores_busy": round((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) / wall, 2),
        "loss_warmup_pass": round(float(warm.history["loss"][-1]), 4),
        "loss_timed_pass": round(float(history.history["loss"][-1]), 4),
        "peak_rss_mib": peak_rss_mib(),
    })
    # Where the time goes, roughly: the forward pass and the loss alone (no
    # gradient, no update) over the same batches, traced on a first pass.
    loss = model.loss

    @tf.function(reduce_retracing=True)
    def forward(inputs, labels):
        return loss(labels, model(inputs, training=False))

    for inputs, labels in dataset:
        forward(inputs, labels)
    start = time.perf_counter()
    for inputs, labels in dataset:
        value = forward(inputs, labels)
    value.numpy()
    result["forward_loss_pass_s"] = round(time.perf_counter() - start, 3)
    result["forward_share_of_step"] = round(result["forward_loss_pass_s"] / wall, 3)
    result["peak_rss_mib_after_forward"] = peak_rss_mib()
    if "train_flops_real" in result:
        result["achieved_gflops_real"] = round(result["train_flops_real"] / wall / 1e9, 1)
        result["achieved_gflops_padded"] = round(result["train_flops_padded"] / wall / 1e9, 1)
    return result


def child_main(args):
    if args.child == "prepare":
        result = child_prepare(args.workdir, args.batches)
    elif args.child == "peak":
        from kseq.training.devices.runtime import tune_cpu_runtime

        tuned = tune_cpu_runtime()
        result = child_peak(args.peak_seconds)
        result["tune_cpu_runtime"] = tuned
        result["peak_rss_mib"] = peak_rss_mib()
    else:
        result = child_train(args.child, args.workdir)
    result["versions"] = versions()
    print("RESULT " + json.dumps(result), flush=True)


# ----------------------------------------------------------------------------
# Parent

def run_child(name, args, workdir):
    command = [sys.executable, os.path.abspath(__file__), "--child", name, "--workdir", workdir,
               "--batches", str(args.batches), "--peak-seconds", str(args.peak_seconds)]
    load, start = LoadSampler(), time.perf_counter()
    process = subprocess.run(command, capture_output=True, text=True)
    seconds, load = time.perf_counter() - start, load.finish()
    lines = [line for line in process.stdout.splitlines() if line.startswith("RESULT ")]
    if process.returncode or not lines:
        sys.stderr.write(process.stdout[-4000:] + process.stderr[-8000:])
        raise SystemExit(f"configuration {name!r} failed (exit {process.returncode})")
    result = json.loads(lines[-1][len("RESULT "):])
    result["process_wall_s"] = round(seconds, 1)
    result["load_average_1min"] = load
    return result


def machine_info():
    model = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        memory_kib = int(f.readline().split()[1])
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu_model": model, "cpus": os.cpu_count(), "cpus_usable": affinity,
            "memory_gib": round(memory_kib / 2**20, 1), "machine": platform.machine(),
            "kernel": platform.release(), "gpu": "none"}


def run_peak(results, name):
    """The matmul peak for the precision `name` ran at (float32 or bfloat16)."""
    peak = results.get("peak", {})
    if results[name].get("precision", "float32") == "mixed_bfloat16":
        return peak.get("peak_gflops_bfloat16")
    return peak.get("peak_gflops")


def table(results):
    reference = results.get("hub64")
    lstm = results.get("keras_lstm")
    rows = ["| configuration | precision | steps | real target tokens | s (warm-up pass) | s (timed pass) "
            "| real target tokens/s | padded target tokens/s | steps/s | peak RSS MiB | vs KerasHub b64 "
            "| vs Keras LSTM | GFLOP/s padded / real | MFU padded / real |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, label in LABELS.items():
        r = results.get(name)
        if r is None:
            continue
        vs_ref = (f"{r['real_target_tokens_per_s'] / reference['real_target_tokens_per_s']:.2f}x"
                  if reference and name in TRANSFORMERS else "-")
        vs_lstm = (f"{r['real_target_tokens_per_s'] / lstm['real_target_tokens_per_s']:.2f}x"
                   if lstm and name in ("rnn_luong", "rnn_bahdanau", "keras_lstm") else "-")
        if "achieved_gflops_real" in r:
            gflops = f"{r['achieved_gflops_padded']:.1f} / {r['achieved_gflops_real']:.1f}"
            peak = run_peak(results, name)
            mfu = (f"{r['achieved_gflops_padded'] / peak:.0%} / {r['achieved_gflops_real'] / peak:.0%}"
                   if peak else "-")
        else:
            gflops = mfu = "-"
        rows.append(
            f"| {label} | {r.get('precision', 'float32')} | {r['steps']} | {r['real_target_tokens']:,} "
            f"| {r['warmup_pass_s']:.1f} "
            f"| {r['timed_pass_s']:.1f} "
            f"| {r['real_target_tokens_per_s']:,.0f} | {r['padded_target_tokens_per_s']:,.0f} "
            f"| {r['steps_per_s']:.2f} | {r['peak_rss_mib']:,.0f} | {vs_ref} | {vs_lstm} "
            f"| {gflops} | {mfu} |")
    return "\n".join(rows)


def free_path(stem, suffix):
    """stem + suffix, or stem-runN + suffix: an earlier result is never overwritten."""
    path, n = stem + suffix, 2
    while os.path.exists(path):
        path, n = f"{stem}-run{n}{suffix}", n + 1
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n", 2)[2])
    parser.add_argument("--batches", type=int, default=24,
                        help="bucketed batches (kseq steps) per pass; sets the sentence pairs "
                             "every configuration trains on (default 24)")
    parser.add_argument("--peak-seconds", type=float, default=2.0,
                        help="length of each of the 3 timed windows per matmul shape (default 2)")
    parser.add_argument("--configs", default=",".join(CONFIGS),
                        help=f"comma-separated subset of {','.join(CONFIGS)}")
    parser.add_argument("--output", help="JSON results (default: benchmarks/results/training-speed/"
                                          "results-training-DATE.json, or -runN.json if that exists)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child_main(args)
    args.output = args.output or free_path(
        os.path.join(ROOT, "benchmarks", "results", "training-speed", f"results-training-{time.strftime('%Y-%m-%d')}"),
        ".json")
    configs = [c for c in args.configs.split(",") if c]
    unknown = set(configs) - set(CONFIGS)
    if unknown:
        parser.error(f"unknown configurations: {sorted(unknown)}")

    started, results = time.time(), {}
    info = {"date": time.strftime("%Y-%m-%d"), "started_utc": time.strftime("%H:%M:%S", time.gmtime()),
            "command": " ".join([".venv/bin/python", "benchmarks/training.py"] + sys.argv[1:]),
            "machine": machine_info(), "load_average_at_start": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="kseq-training-") as workdir:
        prepared = run_child("prepare", args, workdir)
        print(f"prepared: {prepared['batches']} batches of {prepared['batches_per_epoch']} per epoch; "
              f"{prepared['pipeline']}; vocabulary {prepared['vocab_size']} "
              f"({prepared['tokenizer_train_s']} s)", flush=True)
        for name in configs:
            results[name] = run_child(name, args, workdir)
            shown = {k: v for k, v in results[name].items() if k not in ("versions", "shapes")}
            print(f"{name}: {json.dumps(shown)}", flush=True)
            if name == "peak":
                for shape in results[name]["shapes"]:
                    print(f"  {shape['shape']}: {shape['gflops_best']} GFLOP/s", flush=True)
    peak = results.get("peak", {}).get("peak_gflops")
    summary = {}
    if "kseq" in results and "hub64" in results:
        summary["kseq_vs_keras_hub_b64_real_tokens"] = round(
            results["kseq"]["real_target_tokens_per_s"] / results["hub64"]["real_target_tokens_per_s"], 2)
    if "kseq_xla" in results and "hub64_xla" in results:
        summary["kseq_xla_vs_keras_hub_b64_xla_real_tokens"] = round(
            results["kseq_xla"]["real_target_tokens_per_s"]
            / results["hub64_xla"]["real_target_tokens_per_s"], 2)
    if "kseq" in results and "hub26" in results:
        summary["kseq_vs_keras_hub_b26_real_tokens"] = round(
            results["kseq"]["real_target_tokens_per_s"] / results["hub26"]["real_target_tokens_per_s"], 2)
    if "kseq" in results and "kseq_float32" in results:
        summary["kseq_vs_kseq_float32_real_tokens"] = round(
            results["kseq"]["real_target_tokens_per_s"] / results["kseq_float32"]["real_target_tokens_per_s"], 2)
    for name in TRANSFORMERS:
        if name in results and run_peak(results, name):
            peak = run_peak(results, name)
            summary[f"{name}_mfu_padded"] = round(results[name]["achieved_gflops_padded"] / peak, 3)
            summary[f"{name}_mfu_real"] = round(results[name]["achieved_gflops_real"] / peak, 3)
    for name in ("rnn_luong", "rnn_bahdanau"):
        if name in results and "keras_lstm" in results:
            summary[f"{name}_vs_keras_lstm_real_tokens"] = round(
                results[name]["real_target_tokens_per_s"] / results["keras_lstm"]["real_target_tokens_per_s"], 2)
    markdown = table(results)
    info.update({"total_s": round(time.time() - started, 1), "load_average_at_end": os.getloadavg(),
                 "prepared": prepared, "versions": prepared.get("versions"),
                 "peak_gflops": peak, "summary": summary, "results": results, "table": markdown})
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(info, f, indent=2)
    if peak:
        print(f"\nmatmul peak: {peak} GFLOP/s float32 ({results['peak']['peak_shape']}), "
              f"{results['peak']['peak_gflops_bfloat16']} bfloat16")
    print(json.dumps(summary, indent=2))
    print("\n" + markdown)
    print(f"\nwrote {args.output} ({info['total_s'] / 60:.1f} minutes)")


if __name__ == "__main__":
    main()
