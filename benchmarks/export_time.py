"""Seconds to export the translation task's default Transformer, with kseq's
SavedModel writer against keras' ExportArchive, each in a fresh process.

The model is the quick preset's shape (2 + 2 layers, d_model 192, 4 heads,
feed-forward 768), built untrained, with a character tokenizer; the export
has the task's four signatures (serving_default and n_best with a beam
search of 4, alignment, score). Tracing, not the vocabulary, is what an
export spends its time on, so the tokenizer does not change the figure.
Reported: the export's seconds, the beam searches traced, and the size of
the variables folder.

    .venv/bin/python benchmarks/export_time.py --rounds 3
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time


def export_once(writer):
    import string

    import keras

    from kseq.data import CharacterTokenizer
    from kseq.decoding import BeamSearch
    from kseq.decoding import beam_search
    from kseq.export import export_translator, publishing
    from kseq.models import TransformerSeq2Seq

    if writer == "keras":
        publishing.write_saved_model = write_with_export_archive
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
    path = export_translator(model, tokenizer, tokenizer, folder, search=BeamSearch(128, beam_size=4))
    seconds = time.perf_counter() - start
    variables = sum(os.path.getsize(os.path.join(path, "variables", name))
                    for name in os.listdir(os.path.join(path, "variables")))
    print(f"RESULT {writer} {seconds:.1f} {len(traces)} {variables}")


def write_with_export_archive(folder, endpoints, resources):
    """kseq's writer before: keras' ExportArchive."""
    import keras

    archive = keras.export.ExportArchive()
    for resource in resources:
        archive.track(resource)
    for name, (function, signature) in endpoints.items():
        archive.add_endpoint(name, function, input_signature=signature)
    archive.write_out(folder, verbose=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--writer", choices=("kseq", "keras"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.writer:
        return export_once(args.writer)
    rows = []
    for round_ in range(args.rounds):
        for writer in ("keras", "kseq"):  # alternately, so both see the machine in the same state
            output = subprocess.run([sys.executable, __file__, "--writer", writer], capture_output=True,
                                    text=True, check=True).stdout
            _, name, seconds, traces, size = next(line for line in output.splitlines()
                                                  if line.startswith("RESULT")).split()
            rows.append((round_ + 1, name, float(seconds), int(traces), int(size)))
            print(f"round {round_ + 1} {name}: {seconds} s, {traces} beam searches traced, "
                  f"variables {int(size) / 1e6:.2f} MB", flush=True)
    for name in ("keras", "kseq"):
        times = sorted(seconds for _, writer, seconds, _, _ in rows if writer == name)
        print(f"{name}: median {times[len(times) // 2]:.1f} s over {len(times)} rounds")


if __name__ == "__main__":
    main()
