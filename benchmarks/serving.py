"""Serving speed and memory of an exported translator, in a TensorFlow-only process.

Loads a kseq translation SavedModel the way TF Serving runs it (TensorFlow and
tensorflow_text's compiled ops only: importing keras, keras_hub or kseq fails
in that process) and measures, for every export and every batch size:
  - sequential: one client sends requests one after another;
  - concurrent: --clients threads share the same requests;
latency p50/p95 per request, throughput in sentences/s and output tokens/s,
the serving process's CPU time per sentence (user + system of all its
threads, the thread pools' spin-waiting included), the machine's 1-minute
load average around each row (other processes slow a shared machine), and
the serving process's resident memory (VmRSS after loading, after each
export's warm-up and at the end; peak VmHWM). Requests are consecutive
English sentences of the Bible test split (kseq.data.bible, downloaded once
and cached); every row translates the same --sentences sentences. The
reference row is batch 1, sequential: what a client sending one sentence at
a time gets from the same process and graph, so every ratio is a same-run
ratio of the two choices a deployment makes, batching and concurrency.

By default the script builds two exports of a model the size of
kseq-train translate's quick preset (Transformer 2+2 layers, d_model 192,
4 heads, feed-forward 768, shared SentencePiece vocabulary of 4,000 pieces
trained on the Bible train split, max length 96), one with greedy search
and one with beam search (beam 4, length penalty 0.6). Its weights are
random, and an untrained model would decode every row to the maximum length
(the worst case), so the model used here forces each row's length instead:
a row of S source tokens gets exactly round(r * S) tokens, then EOS, where r
is the test split's ratio of reference target tokens to source tokens
(EOS is banned before that and forced then). Every step still runs the full
decoder; only which token wins is fixed, so the cost is that of a trained
model whose outputs are as long as the references on average.

    .venv/bin/python benchmarks/serving.py                              # builds the exports
    .venv/bin/python benchmarks/serving.py --export-dir savedmodels/translate/1
    .venv/bin/python benchmarks/serving.py --sentences 64 --batch-sizes 1 8
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time

BLOCKED = ("keras", "keras_hub", "kseq", "tf_keras")
QUICK_PRESET = dict(num_layers=2, d_model=192, num_heads=4, ff_dim=768, vocab_size=4000,
                    max_length=96)


# ---------------------------------------------------------------- serving side


def block_imports():
    """Makes `import keras` (and kseq, keras_hub, tf_keras) fail as if they
    were not installed: a None entry in sys.modules is Python's marker for
    that (importlib.util.find_spec then answers None, as TensorFlow asks)."""
    for name in BLOCKED:
        sys.modules[name] = None


def loaded_blocked_modules():
    """The blocked packages (or their submodules) actually imported."""
    return sorted(m for m, v in sys.modules.items() if v is not None and m.split(".")[0] in BLOCKED)


def status_kib(field):
    """VmRSS / VmHWM etc. of this process from /proc/self/status, in KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def cpu_model():
    """The CPU's model name from /proc/cpuinfo (None where absent)."""
    try:
        with open("/proc/cpuinfo") as f:
            names = (line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
            return next(names, None)
    except OSError:
        return None


def load_average():
    """The machine's 1-minute load average (other processes included)."""
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def percentile(values, q):
    """Linear-interpolated percentile (numpy's default) without numpy."""
    values = sorted(values)
    if not values:
        return None
    position = (len(values) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (position - low)


def run_requests(serve, requests, clients, timeout):
    """Sends `requests` (lists of strings) to `serve` from `clients` threads
    that take the next request from a shared counter. Returns (latencies in
    request order, wall seconds, process CPU seconds (user + system, all
    threads), output tokens)."""
    import tensorflow as tf

    latencies = [None] * len(requests)
    tokens = [0] * len(requests)
    errors = []
    lock = threading.Lock()
    next_index = [0]
    barrier = threading.Barrier(clients + 1)

    def client():
        barrier.wait()
        while True:
            with lock:
                index = next_index[0]
                next_index[0] += 1
            if index >= len(requests) or errors:
                return
            try:
                start = time.perf_counter()
                out = serve(source=tf.constant(requests[index]))
                latencies[index] = time.perf_counter() - start
                if "token_ids" in out:
                    tokens[index] = int(tf.math.count_nonzero(out["token_ids"]))
            except Exception as error:  # reported after the threads stop
                errors.append(repr(error))
                return

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    cpu_start = os.times()
    start = time.perf_counter()
    deadline = start + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.perf_counter()))
    wall = time.perf_counter() - start
    cpu_end = os.times()
    cpu = (cpu_end.user - cpu_start.user) + (cpu_end.system - cpu_start.system)
    if any(thread.is_alive() for thread in threads):
        raise TimeoutError(f"{clients} clients did not finish within {timeout} s")
    if errors:
        raise RuntimeError(f"serving failed: {errors[0]}")
    return latencies, wall, cpu, sum(tokens)


def serve_worker(config):
    """Runs in a fresh process: loads the exports with TensorFlow and
    tensorflow_text's op libraries only and measures them. Returns the
    results dict."""
    block_imports()
    import glob
    import importlib.util

    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(config["threads"])
    tf.config.threading.set_intra_op_parallelism_threads(config["threads"])
    text_dir = importlib.util.find_spec("tensorflow_text").submodule_search_locations[0]
    for library in sorted(glob.glob(os.path.join(text_dir, "python", "ops", "_*.so"))):
        tf.load_op_library(library)
    memory = {"rss_before_load_mib": status_kib("VmRSS") / 1024}
    start = time.perf_counter()
    served = {name: tf.saved_model.load(path).signatures["serving_default"]
              for name, path in config["exports"].items()}
    load_seconds = time.perf_counter() - start
    memory["rss_after_load_mib"] = status_kib("VmRSS") / 1024
    sentences = config["sentences"]
    rows = []
    for name, serve in served.items():
        for batch in config["batch_sizes"]:  # warm-up: first calls of every shape
            serve(source=tf.constant(sentences[:batch]))
        memory[f"rss_after_warmup_{name}_mib"] = status_kib("VmRSS") / 1024
        for batch in config["batch_sizes"]:
            requests = [sentences[i : i + batch] for i in range(0, len(sentences), batch)]
            for clients in (1, config["clients"]):
                load_before = load_average()
                latencies, wall, cpu, tokens = run_requests(
                    serve, requests, clients, config["timeout"]
                )
                row = dict(
                    export=name, batch_size=batch, clients=clients, requests=len(requests),
                    sentences=len(sentences), output_tokens=tokens, wall_s=round(wall, 3),
                    latency_p50_s=round(percentile(latencies, 50), 4),
                    latency_p95_s=round(percentile(latencies, 95), 4),
                    sentences_per_s=round(len(sentences) / wall, 2),
                    tokens_per_s=round(tokens / wall, 1),
                    cpu_s=round(cpu, 2), cpu_ms_per_sentence=round(1000 * cpu / len(sentences), 1),
                    load_average_1min=[load_before, load_average()],
                    rss_mib=round(status_kib("VmRSS") / 1024, 1),
                )
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    memory["rss_end_mib"] = status_kib("VmRSS") / 1024
    memory["peak_rss_vmhwm_mib"] = status_kib("VmHWM") / 1024
    loaded = loaded_blocked_modules()
    if loaded:
        raise AssertionError(f"the serving process imported {loaded}")
    return dict(rows=rows, memory={k: round(v, 1) for k, v in memory.items()},
                load_seconds=round(load_seconds, 2), tensorflow=tf.__version__,
                modules_blocked=list(BLOCKED))


# ---------------------------------------------------------------- building side


def length_forcing_transformer(length_ratio, *args, **kwargs):
    """A TransformerSeq2Seq whose searches give a row of S source tokens
    exactly round(length_ratio * S) tokens (at least 1, at most the search's
    max_length - 1) and then EOS: EOS is banned before, and the only choice
    at that step. The decoder still runs every step in full."""
    import tensorflow as tf

    from kseq.models import TransformerSeq2Seq
    from kseq.special_ids import EOS_ID

    class LengthForcingTransformer(TransformerSeq2Seq):
        def initial_state(self, encoder_outputs, source_padding_mask, max_length=None):
            state = super().initial_state(encoder_outputs, source_padding_mask, max_length)
            source_length = tf.reduce_sum(tf.cast(source_padding_mask, tf.float32), axis=1)
            tokens = tf.cast(tf.round(length_ratio * source_length), tf.int32)
            return dict(state, eos_at=tf.maximum(tokens, 1))  # (B,) output position of EOS

        def step(self, token_ids, state, index):
            logits, state = super().step(token_ids, state, index)  # (B, V)
            is_eos = tf.equal(tf.range(tf.shape(logits)[-1]), EOS_ID)[None, :]  # (1, V)
            now = tf.equal(state["eos_at"], index)[:, None]  # (B, 1)
            banned = tf.logical_or(tf.logical_and(now, ~is_eos), tf.logical_and(~now, is_eos))
            return tf.where(banned, tf.cast(-1e9, logits.dtype), logits), state

    return LengthForcingTransformer(*args, **kwargs)


def build_exports(work_dir, test_sources, test_targets, seed=0):
    """Trains the SentencePiece vocabulary, builds the length-forcing quick
    preset model and exports it with greedy and beam search. Returns
    ({name: path}, details)."""
    import keras

    from kseq.data.bible import load_bible_pairs
    from kseq.data.subword_tokenizer import SubwordTokenizer
    from kseq.decoding import BeamSearch, GreedySearch
    from kseq.export import export_translator

    preset = QUICK_PRESET
    start = time.perf_counter()
    train_sources, train_targets = load_bible_pairs("train")
    tokenizer = SubwordTokenizer.train(train_sources + train_targets, preset["vocab_size"])
    spm_seconds = time.perf_counter() - start
    limit = preset["max_length"]
    source_lengths = [min(len(r), limit) for r in tokenizer.tokenize(test_sources).to_list()]
    target_lengths = [len(r) for r in tokenizer.tokenize(test_targets).to_list()]
    ratio = sum(target_lengths) / sum(source_lengths)
    keras.utils.set_random_seed(seed)
    model = length_forcing_transformer(
        ratio, tokenizer.vocab_size, tokenizer.vocab_size, num_layers=preset["num_layers"],
        d_model=preset["d_model"], num_heads=preset["num_heads"], ff_dim=preset["ff_dim"],
        dropout=0.0, max_length=limit + 1, share_embeddings=True,
    )
    searches = {"greedy": GreedySearch(limit), "beam4": BeamSearch(limit, 4, 0.6)}
    exports = {
        name: export_translator(model, tokenizer, tokenizer, os.path.join(work_dir, name),
                                search=search, max_source_length=limit)
        for name, search in searches.items()
    }
    forced = [min(max(round(ratio * s), 1), limit - 1) for s in source_lengths]
    details = dict(
        model=dict(preset, parameters=model.count_params(), vocab_size=tokenizer.vocab_size,
                   weights="random (seed %d)" % seed),
        spm_train_seconds=round(spm_seconds, 1),
        length_ratio=round(ratio, 4),
        test_mean_source_tokens=round(sum(source_lengths) / len(source_lengths), 2),
        test_mean_reference_tokens=round(sum(target_lengths) / len(target_lengths), 2),
        test_mean_forced_tokens=round(sum(forced) / len(forced), 2),
    )
    return exports, details, forced, [min(t, limit - 1) for t in target_lengths]


def batch_maxima(lengths, batch):
    """Mean over consecutive batches of the longest row: how many steps a
    batched search loop runs."""
    maxima = [max(lengths[i : i + batch]) for i in range(0, len(lengths), batch)]
    return round(sum(maxima) / len(maxima), 2)


def markdown_table(rows):
    reference = {
        r["export"]: r for r in rows if r["batch_size"] == 1 and r["clients"] == 1
    }
    lines = [
        "| search | batch | clients | requests | p50 latency s | p95 latency s | sentences/s "
        "| tokens/s | vs batch 1 sequential | CPU ms/sentence |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        base = reference.get(r["export"])
        speedup = f"{r['sentences_per_s'] / base['sentences_per_s']:.2f}×" if base else "–"
        lines.append(
            f"| {r['export']} | {r['batch_size']} | {r['clients']} | {r['requests']} | "
            f"{r['latency_p50_s']:.3f} | {r['latency_p95_s']:.3f} | {r['sentences_per_s']:.2f} | "
            f"{r['tokens_per_s']:.0f} | {speedup} | {r['cpu_ms_per_sentence']:.0f} |"
        )
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n", 2)[2],
    )
    parser.add_argument("--export-dir", action="append",
                        help="an existing export version folder (repeatable); default: build "
                             "greedy and beam-4 exports of the quick preset's size")
    parser.add_argument("--sentences", type=int, default=256,
                        help="test sentences every row translates (default 256)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--clients", type=int, default=4, help="threads in the concurrent rows")
    parser.add_argument("--threads", type=int, default=None,
                        help="TensorFlow inter/intra-op threads (default: the usable cores)")
    parser.add_argument("--tf-default-allocator", action="store_true",
                        help="leave TensorFlow's CPU allocator (default: the BFC allocator, "
                             "as kseq.training.devices.runtime.tune_cpu_runtime sets for the recipes)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds one row may take before the run fails")
    parser.add_argument("--work-dir", help="where built exports go (default: a temporary folder)")
    parser.add_argument("--output", default=None,
                        help="results JSON (default benchmarks/results/serving/results-serving-<date>.json)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.sentences < 1 or min(args.batch_sizes) < 1 or args.clients < 1:
        parser.error("--sentences, --batch-sizes and --clients must be >= 1")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.worker:  # the TensorFlow-only serving process
        with open(args.worker) as f:
            config = json.load(f)
        results = serve_worker(config)
        with open(config["results"], "w") as f:
            json.dump(results, f)
        return results

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from kseq.data.bible import load_bible_pairs

    started = time.perf_counter()
    test_sources, test_targets = load_bible_pairs("test")
    sentences = [test_sources[i % len(test_sources)] for i in range(args.sentences)]
    with tempfile.TemporaryDirectory() as temporary:
        work_dir = args.work_dir or temporary
        details = {}
        if args.export_dir:
            exports = {}
            for i, path in enumerate(args.export_dir):  # "name/version"
                name = "/".join(os.path.normpath(path).split(os.sep)[-2:])
                exports[name if name not in exports else f"{name}#{i}"] = path
        else:
            exports, details, forced, references = build_exports(
                work_dir, test_sources, test_targets
            )
            used_forced, used_references = forced[: args.sentences], references[: args.sentences]
            details["mean_longest_row_per_batch"] = {
                str(b): {"forced": batch_maxima(used_forced, b),
                         "reference": batch_maxima(used_references, b)}
                for b in args.batch_sizes
            }
            print(f"built exports in {time.perf_counter() - started:.0f} s: {details}", flush=True)
        threads = args.threads or len(os.sched_getaffinity(0))
        config = dict(exports=exports, sentences=sentences, batch_sizes=args.batch_sizes,
                      clients=args.clients, threads=threads, timeout=args.timeout,
                      results=os.path.join(temporary, "results.json"))
        config_path = os.path.join(temporary, "config.json")
        with open(config_path, "w") as f:
            json.dump(config, f)
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        if not args.tf_default_allocator:
            env["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
        process = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--worker", config_path],
            env=env, timeout=args.timeout * 20,
        )
        if process.returncode:
            sys.exit(f"the serving process failed (exit {process.returncode})")
        with open(config["results"]) as f:
            served = json.load(f)
    import tensorflow as tf

    results = dict(
        date=datetime.date.today().isoformat(), command=" ".join([sys.executable] + sys.argv),
        machine=dict(platform=platform.platform(), processor=cpu_model() or platform.processor(),
                     cpus=len(os.sched_getaffinity(0)),
                     gpus=len(tf.config.list_physical_devices("GPU"))),
        tensorflow=served["tensorflow"], threads=threads,
        allocator="default" if args.tf_default_allocator else "bfc",
        exports={k: (v if args.export_dir else os.path.basename(os.path.dirname(v)))
                 for k, v in exports.items()},
        sentences=args.sentences, batch_sizes=args.batch_sizes, clients=args.clients,
        **details, load_seconds=served["load_seconds"], memory=served["memory"],
        modules_blocked_in_serving_process=served["modules_blocked"],
        rows=served["rows"], total_seconds=round(time.perf_counter() - started, 1),
    )
    output = args.output or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "results", "serving", f"results-serving-{results['date']}.json"
    )
    with open(output, "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
    print(markdown_table(results["rows"]))
    print(f"memory (MiB): {results['memory']}")
    print(f"wrote {output} ({results['total_seconds']} s in all)")
    return results


if __name__ == "__main__":
    main()
