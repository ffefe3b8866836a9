"""Seconds to export the translation task's default Transformer, with kseq's
SavedModel writer against keras' ExportArchive, each in a fresh process.
`kseq-gradients` is kseq's writer saving the gradient functions of custom-
gradient ops, as TensorFlow does by default.

The model is the quick preset's shape (2 + 2 layers, d_model 192, 4 heads,
feed-forward 768), built untrained, with a character tokenizer; the export
has the task's four signatures (serving_default and n_best with a beam
search of 4, alignment, score). Tracing, not the vocabulary, is what an
export spends its time on, so the tokenizer does not change the figure.
Reported: the export's seconds, the beam searches traced, the size of
the variables folder, and the seconds `tf.saved_model.load` takes to read it
back (what a server spends on each version it loads).

    .venv/bin/python benchmarks/export_time.py --rounds 3
    .venv/bin/python benchmarks/export_time.py --writers kseq --patience 1  # the task's search
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time


def export_once(writer, patience=None):
    import string

    import keras
    import tensorflow as tf

    from kseq.data import CharacterTokenizer
    from kseq.decoding import BeamSearch
    from kseq.decoding import beam_search
    from kseq.export import export_translator, publishing
    from kseq.models import TransformerSeq2Seq

    if writer == "keras":
        publishing.write_saved_model = write_with_export_archive
    if writer == "kseq-gradients":
        from kseq.export import saved_model_writer

        saved_model_writer.SAVE_OPTIONS = tf.saved_model.SaveOptions()
    traces = []
    search_once = beam_search.BeamSearch.__call__
    beam_search.BeamSearch.__call__ = lambda *args, **kwargs: traces.append(1) or search_once(*args, **kwargs)
    keras.utils.set_random_seed(0)
    tokenizer = CharacterTokenizer(string.ascii_lowercase)
    model = TransformerSeq2Seq(tokenizer.vocab_size, tokenizer.vocab_size, num_layers=2, d_model=192,
                               num_heads=4, ff_dim=768, max_length=256)
    ids = tokenizer.tokenize(["keras"]).to_tensor()
    model({"source_ids": ids, "target_ids": ids})
    folder = tempfile.mkdtemp()
    start = time.perf_counter()
    search = BeamSearch(128, beam_size=4, patience=patience)
    path = export_translator(model, tokenizer, tokenizer, folder, search=search)
    seconds = time.perf_counter() - start
    variables = sum(os.path.getsize(os.path.join(path, "variables", name))
                    for name in os.listdir(os.path.join(path, "variables")))
    start = time.perf_counter()
    tf.saved_model.load(path)
    load_seconds = time.perf_counter() - start
    print(f"RESULT {writer} {seconds:.1f} {len(traces)} {variables} {load_seconds:.1f}")


def write_with_export_archive(folder, endpoints, resources):
    """kseq's writer before: keras' ExportArchive."""
    import keras

    archive = keras.export.ExportArchive()
    for resource in resources:
        archive.track(resource)
    for name, (function, signature) in endpoints.items():
        archive.add_endpoint(name, function, input_signature=signature)
    archive.write_out(folder, verbose=False)


WRITERS = ("keras", "kseq", "kseq-gradients")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--writers", nargs="+", choices=WRITERS, default=["keras", "kseq"],
                        help="the writers to time, alternately (default: keras kseq)")
    parser.add_argument("--patience", type=float, default=None,
                        help="the beam's patience: 1 stops a source at 4 finished hypotheses, as the "
                             "translate task does, and n_best shares the translation's search (default: "
                             "none, the exact stop, where n_best runs a search of its own)")
    parser.add_argument("--writer", choices=WRITERS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.writer:
        return export_once(args.writer, args.patience)
    rows = []
    for round_ in range(args.rounds):
        for writer in args.writers:  # alternately, so all see the machine in the same state
            patience = [] if args.patience is None else ["--patience", str(args.patience)]
            output = subprocess.run([sys.executable, __file__, "--writer", writer, *patience], capture_output=True,
                                    text=True, check=True).stdout
            _, name, seconds, traces, size, load = next(line for line in output.splitlines()
                                                        if line.startswith("RESULT")).split()
            rows.append((name, float(seconds), float(load)))
            print(f"round {round_ + 1} {name}: {seconds} s, {traces} beam searches traced, "
                  f"variables {int(size) / 1e6:.2f} MB, loaded in {load} s", flush=True)
    for name in args.writers:
        times = sorted(seconds for writer, seconds, _ in rows if writer == name)
        loads = sorted(load for writer, _, load in rows if writer == name)
        print(f"{name}: median {times[len(times) // 2]:.1f} s to export, {loads[len(loads) // 2]:.1f} s "
              f"to load, over {len(times)} rounds")


if __name__ == "__main__":
    main()
