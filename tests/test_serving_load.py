"""An exported translator under concurrent load, served by TensorFlow alone.

The export is loaded in a fresh interpreter with TensorFlow and
tensorflow_text's compiled ops only (keras, keras_hub and kseq cannot be
imported there), as TF Serving runs it, and called from several threads at
once with mixed batch sizes. Every concurrent answer must equal the
sequential answer to the same request, nothing may raise or hang, and the
process's resident memory must not keep growing once warm.
"""

import json
import os
import random
import subprocess
import sys

import pytest

from kseq.data.subword_tokenizer import SubwordTokenizer
from kseq.decoding import BeamSearch, GreedySearch
from kseq.export import export_translator
from kseq.models import TransformerSeq2Seq

THREADS, CALLS_PER_THREAD, ROUNDS = 8, 25, 2
BATCH_SIZES = (1, 8, 64)

# Runs in the serving process. argv: export path, JSON config.
SERVE_CONCURRENTLY = r"""
import glob, importlib.util, json, os, sys, threading, time
BLOCKED = ("keras", "keras_hub", "kseq", "tf_keras")
for name in BLOCKED:
    sys.modules[name] = None  # import fails as if not installed
import tensorflow as tf
text_dir = importlib.util.find_spec("tensorflow_text").submodule_search_locations[0]
for library in glob.glob(os.path.join(text_dir, "python", "ops", "_*.so")):
    tf.load_op_library(library)

def rss_kib():
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS:")).split()[1])

config = json.loads(sys.argv[2])
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
requests = config["requests"]

def call(texts):
    out = serve(source=tf.constant(texts, tf.string))
    return {"translation": [t.decode("utf-8") for t in out["translation"].numpy()],
            "token_ids": out["token_ids"].numpy().tolist()}

# Warm-up round, sequential: also the expected answer to every request.
expected = [call(texts) for texts in requests]
rss = {"after_warmup": rss_kib()}
mismatches, errors, seconds = [], [], []

def client(thread):
    try:
        for c in range(config["calls"]):
            index = (thread * 7 + c) % len(requests)  # threads start at different requests
            if call(requests[index]) != expected[index]:
                mismatches.append((thread, c, index))
    except Exception as error:
        errors.append(f"thread {thread}: {error!r}")

for round_ in range(config["rounds"]):
    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(t,), daemon=True)
               for t in range(config["threads"])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, start + config["round_timeout"] - time.perf_counter()))
    if any(thread.is_alive() for thread in threads):
        errors.append(f"round {round_} still running after {config['round_timeout']} s")
        break
    seconds.append(time.perf_counter() - start)
    rss[f"after_round_{round_}"] = rss_kib()

print(json.dumps({
    "loaded": sorted(m for m, v in sys.modules.items()
                     if v is not None and m.split(".")[0] in BLOCKED),
    "rss_kib": rss, "mismatches": mismatches, "errors": errors, "round_seconds": seconds,
}))
sys.stdout.flush()
os._exit(0)  # do not wait for a hung daemon thread
"""


def sentence(rng, words):
    return " ".join(rng.choice(words) for _ in range(rng.randint(1, 12)))


@pytest.fixture(scope="module")
def tokenizer_and_texts():
    rng = random.Random(0)
    words = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 8)))
             for _ in range(200)]
    corpus = [sentence(rng, words) for _ in range(2000)]
    tokenizer = SubwordTokenizer.train(corpus, vocab_size=400)
    # Requests of every batch size, several of each; "" and unseen
    # characters ("é", "Ω" go through byte fallback) among them.
    requests = []
    for batch in BATCH_SIZES:
        for _ in range(3):
            requests.append([sentence(rng, words) for _ in range(batch)])
    requests[0] = [""]
    requests[4][3] = "déjà vu Ω"
    return tokenizer, requests


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_concurrent_serving_matches_sequential_without_keras_or_leaks(
    search, tokenizer_and_texts, tmp_path
):
    tokenizer, requests = tokenizer_and_texts
    model = TransformerSeq2Seq(
        tokenizer.vocab_size, tokenizer.vocab_size, num_layers=2, d_model=32, num_heads=2,
        ff_dim=64, dropout=0.0, max_length=32,
    )
    chosen = GreedySearch(8) if search == "greedy" else BeamSearch(8, beam_size=3)
    path = export_translator(model, tokenizer, tokenizer, str(tmp_path / search), search=chosen,
                             max_source_length=16)
    config = dict(requests=requests, threads=THREADS, calls=CALLS_PER_THREAD, rounds=ROUNDS,
                  round_timeout=60)
    process = subprocess.run(
        [sys.executable, "-c", SERVE_CONCURRENTLY, path, json.dumps(config)],
        capture_output=True, text=True, timeout=240,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
    )
    assert process.returncode == 0, process.stderr[-3000:]
    report = json.loads(process.stdout.strip().splitlines()[-1])
    print(report)
    assert report["loaded"] == [], "served with keras/kseq imported"
    assert report["errors"] == []
    assert report["mismatches"] == [], "a concurrent answer differs from the sequential one"
    assert len(report["round_seconds"]) == ROUNDS
    # Measured on 2026-11-22 (2 CPU cores, 6 runs of each search): RSS was
    # 760-775 MiB after the warm-up and moved -1.9 to +3.0 MiB by the end of
    # the concurrent rounds (swings of up to 7 MiB between rounds, from
    # per-thread malloc arenas). 32 MiB is about 10x the largest growth seen
    # and still catches a leak of 80 KiB per call over the 400 concurrent
    # calls (a function traced or an executor built per call costs more).
    rss = report["rss_kib"]
    growth_mib = (rss[f"after_round_{ROUNDS - 1}"] - rss["after_warmup"]) / 1024
    assert growth_mib < 32, f"resident memory grew {growth_mib:.1f} MiB under load: {rss}"
