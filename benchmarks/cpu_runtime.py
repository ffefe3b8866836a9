"""What kseq.training.devices.runtime.tune_cpu_runtime buys: train-step throughput on CPU.

Trains the translation recipe's quick-preset Transformer on the same N
bucketed Bible batches (cached, so both runs see identical batches in the
same order) in two fresh processes: TensorFlow's defaults, and after
`tune_cpu_runtime()` (BFC allocator, one inter- and intra-op thread per
core). Each process runs the batches once to trace every shape, then times
a second pass. Reported: real (non-PAD) target tokens per second, wall time,
user and system CPU time, minor page faults.

    .venv/bin/python benchmarks/cpu_runtime.py            # about 5 minutes on 2 cores
    .venv/bin/python benchmarks/cpu_runtime.py --batches 20   # smoke test
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def child(mode, batches):
    import numpy as np
    import tensorflow as tf

    from kseq.training.devices.runtime import tune_cpu_runtime

    if mode == "tuned":
        tune_cpu_runtime()
    import keras

    import kseq
    from kseq.data.bible import load_bible_pairs
    from kseq.data.bucketing import bucketed_pair_dataset
    from kseq.data.subword_tokenizer import SubwordTokenizer

    keras.utils.set_random_seed(0)
    sources, targets = load_bible_pairs("train")
    tokenizer = SubwordTokenizer.train(sources + targets, 4000)
    dataset, _ = bucketed_pair_dataset(sources, targets, tokenizer, tokenizer,
                                       token_budget=2560, max_length=96, seed=0)
    dataset = dataset.take(batches).cache()
    tokens = sum(int(np.sum(labels.numpy() != 0)) for _, labels in dataset)
    with tf.distribute.MirroredStrategy().scope():
        model = kseq.models.TransformerSeq2Seq(
            tokenizer.vocab_size, tokenizer.vocab_size, num_layers=2, d_model=192, num_heads=4,
            ff_dim=768, dropout=0.0, max_length=97, share_embeddings=True)
        model.compile(keras.optimizers.Adam(1e-4, clipnorm=1.0),
                      kseq.losses.MaskedSparseCategoricalCrossentropy(label_smoothing=0.1))
    model.fit(dataset, epochs=1, verbose=0)  # traces every bucket shape
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    model.fit(dataset, epochs=1, verbose=0)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({
        "mode": mode, "batches": batches, "real_target_tokens": tokens, "wall_s": round(wall, 2),
        "tokens_per_s": round(tokens / wall), "user_s": round(after.ru_utime - before.ru_utime, 1),
        "sys_s": round(after.ru_stime - before.ru_stime, 1),
        "minor_faults": after.ru_minflt - before.ru_minflt,
    }))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=120)
    parser.add_argument("--child", choices=["default", "tuned"], help=argparse.SUPPRESS)
    parser.add_argument("--output", default=os.path.join(ROOT, "benchmarks", "results", "training-speed",
                                                         "results-cpu-runtime.json"))
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.batches)
    results = []
    for mode in ("default", "tuned"):
        output = subprocess.run(
            [sys.executable, __file__, "--child", mode, "--batches", str(args.batches)],
            capture_output=True, text=True, check=True,
        ).stdout
        results.append(json.loads(output.strip().splitlines()[-1]))
        print(results[-1], flush=True)
    speedup = results[1]["tokens_per_s"] / results[0]["tokens_per_s"]
    print(f"tuned / default: {speedup:.2f}x real target tokens per second")
    with open(args.output, "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(),
                   "results": results, "speedup": round(speedup, 2)}, f, indent=2)


if __name__ == "__main__":
    main()
