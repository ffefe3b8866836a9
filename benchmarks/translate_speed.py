"""kseq-translate's speed with a translation export: the Bible's test verses
translated through the command's own loop (`kseq.cli.command.serve`), lines
batched by length (the default: a window of 64 batches' lines sorted by
length) against lines batched in their order (`--no-sort`), in one process,
the two alternating for --rounds rounds so that a noisy machine slows both
alike. Each row: sentences/s and target pieces/s (the export's token ids,
EOS and padding left out, over the wall time of the whole pass, loading
excluded) and the pass's test BLEU and chrF against the references (the same
outputs in any order is the check that sorting changes no answer).

    .venv/bin/python benchmarks/translate_speed.py --model savedmodels/translate/1
    .venv/bin/python benchmarks/translate_speed.py --model DIR --batch-size 32 --rounds 2 --output results.json
"""

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kseq.cli import command, servable, translate  # noqa: E402
from kseq.data.bible import load_bible_pairs  # noqa: E402
from kseq.special_ids import EOS_ID, PAD_ID  # noqa: E402
from kseq.training.scoring.evaluation import translation_scores  # noqa: E402


def cpu_description():
    with open("/proc/cpuinfo") as f:
        info = f.read()
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    bf16 = "avx512_bf16" in info or "amx_bf16" in info
    return f"{model}, {os.cpu_count()} cores, {'with' if bf16 else 'without'} bfloat16 units"


def one_pass(signature, sources, batch_size, sort, folder):
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
                                          "--batch-size", str(batch_size), *([] if sort else ["--no-sort"])])
    start = time.perf_counter()
    command.serve(args, counted)
    seconds = time.perf_counter() - start
    with open(output_file, encoding="utf-8") as f:
        return seconds, f.read().split("\n")[:-1], pieces[0]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a translation export's version folder")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--split", default="test")
    parser.add_argument("--output", help="write the rows as JSON here")
    args = parser.parse_args(argv)
    sources, references = load_bible_pairs(args.split)
    signature = servable.load_signatures(args.model)["serving_default"]
    servable.call(signature, source=sources[: args.batch_size])  # warm-up: traced shapes, thread pools
    rows, first_outputs = [], {}
    with tempfile.TemporaryDirectory() as folder:
        for round_index in range(args.rounds):
            for sort in (True, False) if round_index % 2 == 0 else (False, True):
                seconds, outputs, pieces = one_pass(signature, sources, args.batch_size, sort, folder)
                scores = translation_scores(outputs, references)
                first_outputs.setdefault(sort, outputs)
                rows.append(dict(sorted_by_length=sort, round=round_index, seconds=round(seconds, 2),
                                 sentences_per_second=round(len(sources) / seconds, 1),
                                 target_pieces_per_second=round(pieces / seconds), bleu=round(scores["bleu"], 2),
                                 chrf=round(scores["chrf"], 2)))
                print(json.dumps(rows[-1]), flush=True)
    # Batches of other lengths pad differently, and float rounding then differs: a few outputs may too.
    differing = sum(a != b for a, b in zip(first_outputs[True], first_outputs[False]))
    print(f"{differing} of {len(sources)} outputs differ between sorted and --no-sort batches")
    result = dict(date=datetime.date.today().isoformat(), cpu=cpu_description(), python=platform.python_version(),
                  model=args.model, sentences=len(sources), batch_size=args.batch_size, rows=rows,
                  outputs_differing=differing)
    for sort in (True, False):
        mine = [row["sentences_per_second"] for row in rows if row["sorted_by_length"] == sort]
        print(f"{'sorted by length' if sort else '--no-sort'}: {np.mean(mine):.1f} sentences/s (mean of {mine})")
    if args.output:
        with open(args.output, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
