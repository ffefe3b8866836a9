"""Seconds a kseq model's first `fit` takes without a strategy, and how
many times it traces the train step.

Each row is a fresh process: a model of the quick preset's translation
shape (Transformer: 2 + 2 layers, d_model 192, 4 heads, feed-forward 768;
RNN: LSTM 256 with Luong's general attention), built on one batch of 32 random pairs,
compiled as the tasks compile it (`kseq.training.task.compile_model`,
FusedAdam, masked cross-entropy, masked accuracy), then fitted for one
epoch of 4 batches. A first fit is mostly the trace of its step, so the
figure is what a user waits for before the first step, and what every test
that fits a fresh model pays. Compare trees by running the script from each
(`PYTHONPATH=<tree>`), alternated.

    .venv/bin/python benchmarks/first_fit.py --rounds 3
"""

import argparse
import json
import subprocess
import sys
import time


def first_fit(arch):
    import numpy as np

    from kseq.models import RNNSeq2Seq, TransformerSeq2Seq
    from kseq.training.objectives import FusedAdam
    from kseq.training.objectives.losses import MaskedSparseCategoricalCrossentropy
    from kseq.training.objectives.metrics import MaskedAccuracy
    from kseq.training.task import compile_model

    vocab, rows, length = 4000, 32, 24
    if arch == "transformer":
        model = TransformerSeq2Seq(vocab, vocab, num_layers=2, d_model=192, num_heads=4, ff_dim=768, dropout=0.0)
    else:
        model = RNNSeq2Seq(vocab, vocab, embed_dim=192, units=256, attention="general")
    rng = np.random.default_rng(0)
    ids = {name: rng.integers(4, vocab, (rows * 4, length)).astype("int32") for name in ("source_ids", "target_ids")}
    model({name: value[:rows] for name, value in ids.items()})
    compile_model(model, FusedAdam(1e-3), MaskedSparseCategoricalCrossentropy(), metrics=[MaskedAccuracy()])
    traces = []
    keras_step = model.train_step
    model.train_step = lambda data: traces.append(1) or keras_step(data)
    start = time.perf_counter()
    model.fit(ids, ids["target_ids"], batch_size=rows, epochs=1, verbose=0)
    return {"arch": arch, "first_fit_seconds": round(time.perf_counter() - start, 2), "train_step_traces": len(traces)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1, help="fresh processes per architecture")
    parser.add_argument("--arch", nargs="+", default=["transformer", "rnn"], choices=["transformer", "rnn"])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(first_fit(args.child)))
        return
    for _ in range(args.rounds):
        for arch in args.arch:
            done = subprocess.run([sys.executable, __file__, "--child", arch], capture_output=True, text=True,
                                  check=True)
            print(done.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
