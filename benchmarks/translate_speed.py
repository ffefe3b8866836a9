"""Translation speed on the Bible's 624 test verses, batches of 32, 2 threads:
kseq's SavedModel through kseq-translate's own loop, kseq's CTranslate2
export, and OpenNMT-tf 2.32's model of the same size as a SavedModel and as
its own CTranslate2 export. Each row: sentences/s and target pieces/s (EOS
and padding left out, over the wall time of the whole pass, loading
excluded) and the pass's test BLEU and chrF against the references.

- `--model DIR` (one or more): a kseq translation export; rows for its
  batches sorted by length (kseq-translate's default, a window of 64
  batches' lines) and in input order (`--no-sort`).
- `--run LOGDIR`: a finished `kseq-train translate` run; exported here as a
  SavedModel with the run's search (the beam search the recipe chose;
  `--batch-sizes` adds other batch sizes; `--patience P` adds the same
  search stopping a verse at ceil(P x beams) finished hypotheses, as
  CTranslate2 does with its default patience 1) and with greedy search, and
  as a CTranslate2 model timed in float32 and int8.
- `--opennmt-dir DIR`: what `benchmarks/opennmt_tf.py serving-models`
  wrote (OpenNMT-tf's SavedModel runs in its own virtual environment).

CTranslate2 rows decode with beam 4 (or greedy), its length penalty 1.0 and
at most the recipe's 96 pieces; "sorted" hands CTranslate2 all lines with
`max_batch_size=32` (it sorts them by length itself), "input order" one
batch of 32 at a time. Every row runs once a round, rounds alternate the
order, so that a noisy machine slows all alike.

    .venv/bin/python benchmarks/translate_speed.py --run runs/translate --model savedmodels/translate/1 \\
        --opennmt-dir /tmp/onmt --rounds 2 --output benchmarks/results/serving/results-translate-speed-$(date +%F).json
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kseq.cli import command, servable, translate  # noqa: E402
from kseq.data.bible import load_bible_pairs  # noqa: E402
from kseq.special_ids import EOS_ID, PAD_ID  # noqa: E402
from kseq.training.scoring.evaluation import translation_scores  # noqa: E402

BATCH = 32
MAX_LENGTH = 96  # the recipe's --max-length
THREADS = 2
# Run in OpenNMT-tf's own environment: times its SavedModel on the pieces in
# argv[2] (one line a source), batches of 32 in the order of argv[3]; prints
# JSON: seconds, the output pieces a line.
OPENNMT_SERVE = """
import json, sys, time
import tensorflow as tf
model = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
lines = [line.split() for line in open(sys.argv[2], encoding="utf-8").read().split("\\n")[:-1]]
order = json.loads(sys.argv[3])
def run(batch):
    longest = max(len(t) for t in batch)
    tokens = tf.constant([t + [""] * (longest - len(t)) for t in batch])
    out = model(tokens=tokens, length=tf.constant([len(t) for t in batch], tf.int32))
    return [[p.decode() for p in row[0][: n[0]]] for row, n in zip(out["tokens"].numpy(), out["length"].numpy())]
run(lines[:32])
outputs, start = [None] * len(lines), time.perf_counter()
for k in range(0, len(order), 32):
    for i, pieces in zip(order[k:k + 32], run([lines[i] for i in order[k:k + 32]])):
        outputs[i] = pieces
print(json.dumps({"seconds": time.perf_counter() - start, "outputs": outputs}))
"""


def cpu_description():
    with open("/proc/cpuinfo") as f:
        info = f.read()
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    bf16 = "avx512_bf16" in info or "amx_bf16" in info
    return f"{model}, {os.cpu_count()} cores, {'with' if bf16 else 'without'} bfloat16 units"


def kseq_pass(signature, sources, sort, folder, batch=BATCH):
    """(seconds, output lines, target pieces) of translating `sources` as kseq-translate does."""
    source_file, output_file = os.path.join(folder, "in.txt"), os.path.join(folder, "out.txt")
    with open(source_file, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in sources))
    pieces = [0]

    def counted(requests):
        out = servable.call(signature, source=requests)
        ids = np.asarray(out["token_ids"])
        pieces[0] += int(np.sum((ids != PAD_ID) & (ids != EOS_ID)))
        return [[translate.shown(text)] for text in out["translation"]]

    args = translate.parser().parse_args(["--model", folder, "--input", source_file, "--output", output_file,
                                          "--batch-size", str(batch), *([] if sort else ["--no-sort"])])
    start = time.perf_counter()
    command.serve(args, counted)
    seconds = time.perf_counter() - start
    with open(output_file, encoding="utf-8") as f:
        return seconds, f.read().split("\n")[:-1], pieces[0]


def kseq_savedmodel_rows(search, weights, path, sources, sorts, other_batches=()):
    """Rows of batches of 32, sorted or not (`sorts`), and sorted batches of the sizes in `other_batches`."""
    signature = servable.load_signatures(path)["serving_default"]
    servable.call(signature, source=sources[:BATCH])  # warm-up: traced shapes, thread pools

    def row(sort, batch=BATCH):
        def run(folder):
            return kseq_pass(signature, sources, sort, folder, batch)
        batches = ("sorted" if sort else "input order") + ("" if batch == BATCH else f", {batch} a batch")
        return dict(engine="kseq SavedModel", model=weights, search=search, batches=batches), run

    return [row(sort) for sort in sorts] + [row(True, batch) for batch in other_batches]


def ctranslate2_rows(engine, path, pieces_of, text_of, sources, searches=((4, "float32"), (4, "int8"), (1, "float32")),
                     input_order=((4, "float32"),)):
    """Rows of a CTranslate2 model: `pieces_of(source)` tokenizes, `text_of(pieces)` detokenizes."""
    import ctranslate2

    tokens = [pieces_of(source) for source in sources]
    translators = {}

    def translator(compute_type):
        if compute_type not in translators:
            translators[compute_type] = ctranslate2.Translator(path, device="cpu", inter_threads=1,
                                                               intra_threads=THREADS, compute_type=compute_type)
        return translators[compute_type]

    def row(beam, compute_type, sort):
        def run(folder):
            options = dict(beam_size=beam, length_penalty=1.0, max_decoding_length=MAX_LENGTH)
            model = translator(compute_type)
            model.translate_batch(tokens[:BATCH], **options)  # warm-up
            start = time.perf_counter()
            if sort:
                results = model.translate_batch(tokens, max_batch_size=BATCH, **options)
            else:
                results = [r for k in range(0, len(tokens), BATCH) for r in model.translate_batch(tokens[k:k + BATCH],
                                                                                                 **options)]
            seconds = time.perf_counter() - start
            hypotheses = [r.hypotheses[0] for r in results]
            return seconds, [text_of(h) for h in hypotheses], sum(len(h) for h in hypotheses)
        search = "greedy" if beam == 1 else f"beam {beam}"
        return dict(engine=engine, model=compute_type, search=search,
                    batches="sorted" if sort else "input order"), run

    return [row(beam, compute, True) for beam, compute in searches] + \
        [row(beam, compute, False) for beam, compute in input_order]


def kseq_run_rows(run_dir, sources, folder, other_batches=(), patience=None):
    """Exports `run_dir`'s model (the run's search, with `patience` if given, and greedy) and its
    CTranslate2 form into `folder`."""
    import dataclasses

    import sentencepiece

    from kseq.decoding import GreedySearch
    from kseq.export import export_ctranslate2, export_translator
    from kseq.tasks.translate import trained_model
    from kseq.training.scoring.selection import DecodingSettings

    with open(os.path.join(run_dir, "metrics.json")) as f:
        settings = DecodingSettings(**json.load(f)["decoding"])
    with open(os.path.join(run_dir, "options.json")) as f:
        precision = json.load(f).get("precision")
    # The recipe's export computes in bfloat16 on a CPU with bfloat16 units ("auto").
    dtype = "mixed_bfloat16" if precision in ("auto", "mixed_bfloat16") and "with bfloat16" in cpu_description() \
        else None
    model, tokenizer = trained_model(run_dir, dtype=dtype)
    search = settings.search(MAX_LENGTH)
    weights = "bfloat16" if dtype else "float32"
    rows = []
    searches = [(f"the run's: {settings.beam_size} beams", search)]
    if patience is not None:
        searches.append((f"the run's: {settings.beam_size} beams, patience {patience}",
                         dataclasses.replace(settings, patience=patience).search(MAX_LENGTH)))
    searches.append(("greedy", GreedySearch(limits=search.limits)))
    for index, (name, chosen) in enumerate(searches):
        path = export_translator(model, tokenizer, tokenizer, os.path.join(folder, "kseq", str(index)),
                                 search=chosen, max_source_length=MAX_LENGTH)
        beam = chosen is search
        rows += kseq_savedmodel_rows(name, weights, path, sources, (True, False) if beam else (True,),
                                     other_batches if beam else ())
    ct2 = export_ctranslate2(model, tokenizer, tokenizer, os.path.join(folder, "kseq-ct2"))
    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.proto)
    rows += ctranslate2_rows("kseq CTranslate2 export", ct2, lambda s: processor.encode(s, out_type=str),
                             processor.decode_pieces, sources)
    return rows


def opennmt_rows(onmt_dir, venv, sources, spm_model):
    """OpenNMT-tf's SavedModel (in its venv) and its CTranslate2 export."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=spm_model)
    pieces = [processor.encode(source, out_type=str) for source in sources]

    def row(sort):
        def run(folder):
            source_file = os.path.join(folder, "pieces.txt")
            with open(source_file, "w", encoding="utf-8") as f:
                f.write("".join(" ".join(p) + "\n" for p in pieces))
            order = sorted(range(len(pieces)), key=lambda i: len(pieces[i])) if sort else list(range(len(pieces)))
            out = subprocess.run([os.path.join(venv, "bin", "python"), "-c", OPENNMT_SERVE,
                                  os.path.join(onmt_dir, "saved_model"), source_file, json.dumps(order)],
                                 capture_output=True, text=True, check=True,
                                 env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
            result = json.loads(out.stdout.strip().splitlines()[-1])
            outputs = result["outputs"]
            return result["seconds"], [processor.decode_pieces(p) for p in outputs], sum(len(p) for p in outputs)
        return dict(engine="OpenNMT-tf 2.32 SavedModel (TF 2.13)", model="float32", search="beam 4",
                    batches="sorted" if sort else "input order"), run

    rows = [row(True), row(False)]
    rows += ctranslate2_rows("OpenNMT-tf's CTranslate2 export", os.path.join(onmt_dir, "ctranslate2"),
                             lambda s: processor.encode(s, out_type=str), processor.decode_pieces, sources)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", default=[],
                        help="a kseq translation export's version folder (again for more)")
    parser.add_argument("--run", help="a finished kseq-train translate run's logdir")
    parser.add_argument("--opennmt-dir", help="benchmarks/opennmt_tf.py serving-models' --work folder")
    parser.add_argument("--opennmt-venv", default=os.path.expanduser("~/.cache/kseq/opennmt-tf-2.32"))
    parser.add_argument("--spm-model", help="the SentencePiece model OpenNMT-tf's data was cut with "
                        "(default: <run>/spm.model)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-sizes", type=lambda text: [int(n) for n in text.split(",")], default=[],
                        help="more batch sizes for the run's SavedModel and search, sorted (e.g. 8,16,64)")
    parser.add_argument("--patience", type=float,
                        help="with --run, also the run's beam search stopping at this patience (BeamSearch)")
    parser.add_argument("--output", help="write the rows as JSON here")
    args = parser.parse_args(argv)
    if not (args.model or args.run or args.opennmt_dir):
        parser.error("give --model, --run or --opennmt-dir")
    sources, references = load_bible_pairs("test")
    with tempfile.TemporaryDirectory() as folder:
        rows = [row for path in args.model for row in
                kseq_savedmodel_rows("serving_default", f"as exported: {path}", path, sources, (True, False))]
        if args.run:
            rows += kseq_run_rows(args.run, sources, folder, args.batch_sizes, args.patience)
        if args.opennmt_dir:
            spm_model = args.spm_model or os.path.join(args.run or "", "spm.model")
            rows += opennmt_rows(args.opennmt_dir, args.opennmt_venv, sources, spm_model)
        results = []
        for round_index in range(args.rounds):
            for description, run in rows if round_index % 2 == 0 else rows[::-1]:
                seconds, outputs, pieces = run(folder)
                scores = translation_scores(outputs, references)
                results.append(dict(description, round=round_index, seconds=round(seconds, 2),
                                    sentences_per_second=round(len(sources) / seconds, 1),
                                    target_pieces_per_second=round(pieces / seconds), bleu=round(scores["bleu"], 2),
                                    chrf=round(scores["chrf"], 2)))
                print(json.dumps(results[-1]), flush=True)
    table = summary(results)
    print("\n".join(table))
    if args.output:
        with open(args.output, "w") as f:
            json.dump(dict(date=datetime.date.today().isoformat(), cpu=cpu_description(),
                           python=platform.python_version(), model=args.model, run=args.run,
                           opennmt_dir=args.opennmt_dir, sentences=len(sources), batch_size=BATCH, rows=results,
                           table=table), f, indent=1)


def summary(results):
    """Markdown rows: each configuration's mean over the rounds."""
    keys = ("engine", "model", "search", "batches")
    table = ["| engine | model | search | batches | sentences/s | target pieces/s | BLEU | chrF |",
             "|---|---|---|---|---|---|---|---|"]
    seen = []
    for row in results:
        key = tuple(row.get(k, "") for k in keys)
        if key not in seen:
            seen.append(key)
    for key in seen:
        mine = [row for row in results if tuple(row.get(k, "") for k in keys) == key]
        speed = np.mean([row["sentences_per_second"] for row in mine])
        pieces = np.mean([row["target_pieces_per_second"] for row in mine])
        table.append(f"| {' | '.join(key)} | {speed:.1f} | {pieces:,.0f} | {mine[0]['bleu']:.2f} | "
                     f"{mine[0]['chrf']:.2f} |")
    return table


if __name__ == "__main__":
    main()
