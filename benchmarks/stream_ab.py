"""A language model's train steps on streamed files against the same streams
held in memory: one process, one model configuration, the two pipelines
alternating, so that the machine's noise falls on both.

For a text file of one document a line (e.g. `scale.py --task
language_model` writes the Bible's verses repeated into the kseq cache),
fits `recipes/language_model.py`'s default model for `--seconds` on each
pipeline in turn, `--trials` times, and prints train steps/s after the
first 30 steps: the streamed side pays for tokenizing its next window in
the background inside that time, the in-memory side tokenized everything
before it began.

    .venv/bin/python benchmarks/stream_ab.py ~/.cache/kseq/bench-scale/language_model-train-x1000000.txt
"""

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT]

import keras  # noqa: E402

from kseq.data.corpus import scan_corpus  # noqa: E402
from kseq.data.streams import join_documents, stream_batches, streamed_stream_batches  # noqa: E402
from kseq.data.subword_tokenizer import SubwordTokenizer  # noqa: E402
from kseq.training.loop.fit import EpochFit  # noqa: E402
from kseq.tasks import language_model  # noqa: E402
from kseq.training.devices.runtime import tune_cpu_runtime  # noqa: E402

WARM_STEPS = 30


class StepRate(keras.callbacks.Callback):
    """Train steps/s after the first `WARM_STEPS` (tracing and the first batches left out)."""

    def on_train_begin(self, logs=None):
        self.steps, self.start = 0, None

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1
        if self.steps == WARM_STEPS:
            self.start = time.monotonic()

    def rate(self):
        return (self.steps - WARM_STEPS) / (time.monotonic() - self.start)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", help="a text file, one document a line")
    parser.add_argument("--seconds", type=float, default=45.0, help="training time of each fit")
    parser.add_argument("--trials", type=int, default=2, help="fits of each pipeline")
    args = parser.parse_args(argv)
    tune_cpu_runtime()
    scan = scan_corpus([args.path], fields=1)
    tokenizer = SubwordTokenizer.train(scan.sample[0][:30000], vocab_size=4000)
    options = language_model.parse_args(["--train-txt", args.path])
    valid = stream_batches(join_documents(tokenizer.tokenize(scan.sample[0][:500])), 8, options.bptt)
    with open(args.path, encoding="utf-8") as f:
        in_memory = stream_batches(join_documents(tokenizer.tokenize([line.rstrip("\n") for line in f])),
                                   options.batch_size, options.bptt, drop_remainder=True)
    rates = {"in memory": [], "streamed": []}
    for _ in range(args.trials):
        for side in rates:
            fit = EpochFit(tempfile.mkdtemp(), max_minutes=args.seconds / 60, eval_every="1000000")
            model = language_model.build_model(options, tokenizer.vocab_size, carry_state=True)
            train = in_memory if side == "in memory" else streamed_stream_batches(
                scan, tokenizer, fit.position, options.batch_size, options.bptt, epochs=options.epochs)
            meter = StepRate()
            fit.fit(model, {"train": train, "valid": valid}, options.epochs, [meter], verbose=0)
            rates[side].append(round(meter.rate(), 2))
            print(f"{side}: {rates[side][-1]} steps/s", flush=True)
    for side, values in rates.items():
        print(f"{side}: {values}, mean {sum(values) / len(values):.2f} steps/s")


if __name__ == "__main__":
    main()
