"""kseq's CPU train step against OpenNMT-tf's: real target tokens a second.

Both toolkits train the translation recipe's quick-preset Transformer on the
same Bible en->fr training pairs, cut into the same SentencePiece pieces,
with 2,560-token batches and the Noam schedule, for the same minutes each,
alternately (kseq, OpenNMT-tf, kseq, ...), so that both see the machine in
the same state. OpenNMT-tf 2.32 runs in its own virtual environment with
TensorFlow 2.13.1; it is never a kseq dependency.

What is counted, on both sides: real target tokens (SentencePiece pieces
plus EOS, no PAD), over the seconds spent in train steps.
- kseq: `train_step_seconds` of the recipe's training record (each batch
  from its begin to its end, waiting for the input; evaluations and saves
  excluded; the first step, with its tracing, included: keras traces the
  step once, for batches of any shape).
  The tokens are counted exactly: the recipe's pipeline (whose batch order
  is a fixed function of the seed and the epoch) is rebuilt and the labels
  other than PAD of its first `steps` batches are summed.
- OpenNMT-tf: its own log lines every `--report-steps` steps ("tokens/s =
  ... (... source, N target)"; its target lengths are pieces plus EOS too),
  weighted by the time between lines; the first line's interval (which
  follows graph tracing and the step-1 checkpoint) is left out.

The two models, as alike as OpenNMT-tf allows: 2 + 2 post-norm layers,
d_model 192, 4 heads, feed-forward 768 with ReLU, no dropout, sinusoidal
positions, embeddings scaled by sqrt(d_model), one embedding for source,
target and the output layer (with an output bias); Adam (0.9, 0.98, 1e-9),
gradient clipping at 1.0, label smoothing 0.1, loss averaged over
target tokens, NoamDecay scale 1.0 and kseq's warm-up. Differences: kseq
trains under mixed_bfloat16 where its recipe picks it (a CPU with bfloat16
units), OpenNMT-tf in float32 (it offers mixed precision on GPUs only);
kseq's length buckets are about 5% and at least 2 pieces wide and pad to
the bucket's edge (97.0% of the padded target positions are pieces),
OpenNMT-tf's are 2 tokens wide (its default) and pad to the batch's longest
pair; OpenNMT-tf's LayerNorm
epsilon is 1e-6 (kseq 1e-5); both clip the gradient's global norm (kseq
clipped each weight's gradient before 0.2.0); kseq runs under a one-replica
MirroredStrategy, OpenNMT-tf without a strategy. Both get kseq's CPU
runtime settings (BFC allocator, one inter- and intra-op thread per core,
as `kseq.training.devices.runtime.tune_cpu_runtime`) unless `--opennmt-tf-defaults`.

The machine's ceiling, measured before and after the rounds (`ceiling`):
the best float32 and bfloat16 square-matmul rates over the model's matmul
FLOPs per real target token with no padding at all (3x the forward pass,
as benchmarks/training.py counts them): real target tokens/s that neither
toolkit can reach. Each run's share of it is reported.

    .venv/bin/python benchmarks/opennmt_tf.py setup      # the venv, once (about 600 MB)
    .venv/bin/python benchmarks/opennmt_tf.py prepare    # data and vocabulary, once
    .venv/bin/python benchmarks/opennmt_tf.py compare --rounds 3 --minutes 12   # about 90 minutes
    .venv/bin/python benchmarks/opennmt_tf.py run-opennmt --minutes 1 --report-steps 20   # smoke test
    .venv/bin/python benchmarks/opennmt_tf.py ceiling    # the ceiling alone (25 s)
    .venv/bin/python benchmarks/opennmt_tf.py serving-models --work DIR   # 12 min, exported for translate_speed.py
    .venv/bin/python benchmarks/opennmt_tf.py serving-models --work DIR --save-steps 50   # on a CPU without AVX-512
"""

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PINS = ("opennmt-tf==2.32.0", "tensorflow==2.13.1")  # all else as pip resolves them (recorded)
MARKER = "kseq-setup.json"
# OpenNMT-tf's throughput line, e.g. "2026-11-25 12:00:01.123000: I training.py:608] Step = 200 ;
# steps/s = 3.10, tokens/s = 14000 (7000 source, 7000 target) ; ..."
STEP_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3})\d*: I .*Step = (\d+) ; steps/s = [\d.]+, "
                       r"tokens/s = \d+ \(.*?(\d+) target\)")
# Logged once the dataset and model are set up, right before the first step traces.
OPENNMT_START = "Training on "
MODEL = ("num_layers", "d_model", "num_heads", "ff_dim", "dropout")  # the recipe's options both models share


def cache_root():
    return pathlib.Path(os.environ.get("KSEQ_CACHE_DIR") or pathlib.Path.home() / ".cache" / "kseq")


def cpu_threads():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


# --- setup -------------------------------------------------------------------------------------

def setup(venv, python):
    """Creates `venv` with `PINS` installed; skipped when its marker says so."""
    marker = venv / MARKER
    if marker.exists() and json.loads(marker.read_text()).get("pins") == list(PINS):
        print(f"{venv}: set up already ({marker})")
        return
    subprocess.run([python, "-m", "venv", "--clear", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    subprocess.run([*pip, "install", "--quiet", *PINS], check=True)
    subprocess.run([str(venv / "bin" / "python"), "-c", "import opennmt"], check=True, capture_output=True)
    freeze = subprocess.run([*pip, "freeze"], check=True, capture_output=True, text=True).stdout.split()
    marker.write_text(json.dumps({"pins": list(PINS), "python": python, "freeze": freeze}, indent=2))
    print(f"{venv}: OpenNMT-tf installed; versions in {marker}")


# --- prepare: the recipe's data and vocabulary, for both ------------------------------------------

def recipe_options():
    """kseq-train translate's options with no argument given (the quick preset)."""
    from kseq.tasks import translate

    return translate.parse_args([])


def recipe_tokenizer(tokenizer_path, sources, targets, options):
    """The SentencePiece model a recipe run saved, else one trained as the recipe trains it."""
    from kseq.data.subword_tokenizer import SubwordTokenizer, vocab_size_for

    if tokenizer_path and os.path.exists(tokenizer_path):
        return SubwordTokenizer.load(tokenizer_path), str(tokenizer_path)
    texts = sources + targets  # the recipe's joint vocabulary, sized by "auto"
    size = vocab_size_for(texts, options.max_vocab_size)
    return SubwordTokenizer.train(texts, size), f"trained here, as kseq-train translate does ({size} pieces)"


def prepare(data_dir, tokenizer_path):
    """Writes, in `data_dir`: train.en / train.fr (space-joined pieces, the
    pairs the recipe keeps), vocab.txt (OpenNMT-tf's format), spm.model and
    settings.json (the recipe's options and counts)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import sentencepiece

    from kseq.data.bible import load_bible_pairs
    from kseq.data.bucketing import bucketed_pair_dataset

    options = recipe_options()
    sources, targets = load_bible_pairs("train")
    tokenizer, origin = recipe_tokenizer(tokenizer_path, sources, targets, options)
    data_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(data_dir / "spm.model"))
    pieces = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.proto)
    vocabulary = [pieces.id_to_piece(i) for i in range(pieces.get_piece_size())]
    # Pieces become space-separated words: none may hold whitespace.
    broken = [piece for piece in vocabulary if piece.split() != [piece]]
    if broken:
        raise SystemExit(f"pieces with whitespace cannot be written as words: {broken[:5]}")
    # OpenNMT-tf's ids: <blank> <s> </s> first (its PAD, BOS, EOS), its <unk> bucket last, so the
    # same 4,000 outputs; kseq id i >= 4 is OpenNMT-tf id i - 1.
    (data_dir / "vocab.txt").write_text("\n".join(["<blank>", "<s>", "</s>", *vocabulary[4:]]) + "\n")

    source_ids, target_ids = (tokenizer.tokenize(texts).to_list() for texts in (sources, targets))
    if min(min(ids) for ids in source_ids + target_ids if ids) < 4:  # PAD, BOS, EOS, UNK
        raise SystemExit("the tokenizer produced special ids inside sentences")
    kept, tokens = 0, 0
    with open(data_dir / "train.en", "w") as en, open(data_dir / "train.fr", "w") as fr:
        for source, target in zip(source_ids, target_ids):
            # The pipeline's rule (kseq.data.bucketing): no empty side, the source and
            # the target with its EOS at most max_length tokens.
            if not source or not target or len(source) > options.max_length or len(target) + 1 > options.max_length:
                continue
            en.write(" ".join(vocabulary[i] for i in source) + "\n")
            fr.write(" ".join(vocabulary[i] for i in target) + "\n")
            kept, tokens = kept + 1, tokens + len(target) + 1  # + EOS
    _, report = bucketed_pair_dataset(sources, targets, tokenizer, tokenizer, token_budget=options.token_budget,
                                      max_length=options.max_length)
    if report.kept != kept:
        raise SystemExit(f"kept {kept} pairs, the recipe's pipeline {report.kept}")
    names = MODEL + ("warmup_steps", "label_smoothing", "clipnorm", "token_budget", "max_length", "seed", "epochs",
                     "lr_scale")
    settings = {"recipe": {name: getattr(options, name) for name in names}, "tokenizer": origin,
                "vocab_size": len(vocabulary), "pairs": len(sources), "kept": kept,
                "epoch_target_tokens": tokens, "batches_per_epoch": report.batches_per_epoch}
    (data_dir / "settings.json").write_text(json.dumps(settings, indent=2))
    print(f"{data_dir}: {kept} of {len(sources)} pairs, {tokens:,} real target tokens an epoch, "
          f"{report.batches_per_epoch} kseq batches an epoch, {len(vocabulary)} pieces ({origin})")


def load_settings(data_dir):
    path = data_dir / "settings.json"
    if not path.exists():
        raise SystemExit(f"{path} is missing: run `benchmarks/opennmt_tf.py prepare` first")
    return json.loads(path.read_text())


# --- OpenNMT-tf --------------------------------------------------------------------------------

def opennmt_model_file(recipe):
    """The Python model definition onmt-main loads (`--model`)."""
    return f"""import opennmt

# kseq-train translate's quick preset (benchmarks/opennmt_tf.py)
def model():
    return opennmt.models.Transformer(
        num_layers={recipe['num_layers']}, num_units={recipe['d_model']}, num_heads={recipe['num_heads']},
        ffn_inner_dim={recipe['ff_dim']}, dropout={recipe['dropout']}, attention_dropout={recipe['dropout']},
        ffn_dropout={recipe['dropout']}, share_embeddings=opennmt.models.EmbeddingsSharingLevel.ALL,
        pre_norm=False, output_layer_bias=True)
"""


def opennmt_config(settings, data_dir, model_dir, report_steps, save_steps=10**9):
    """onmt-main's configuration, without its auto_config; `save_steps`
    apart, a checkpoint (by default none inside the timed intervals)."""
    recipe = settings["recipe"]
    if recipe["lr_scale"] not in ("auto", 1.0):
        raise SystemExit(f"lr_scale {recipe['lr_scale']}: the config below assumes the Bible's 1.0")
    vocabulary = str(data_dir / "vocab.txt")
    return {
        "model_dir": str(model_dir),
        "data": {"train_features_file": str(data_dir / "train.en"), "train_labels_file": str(data_dir / "train.fr"),
                 "source_vocabulary": vocabulary, "target_vocabulary": vocabulary},
        "params": {
            # kseq: FusedAdam(TransformerSchedule(d_model, warmup), beta_2=0.98, epsilon=1e-9,
            # global_clipnorm); "auto" lr_scale is 1 on chrF data such as the Bible.
            "optimizer": "Adam",
            "optimizer_params": {"beta_1": 0.9, "beta_2": 0.98, "epsilon": 1e-9,
                                 "global_clipnorm": recipe["clipnorm"]},
            "learning_rate": 1.0,
            "decay_type": "NoamDecay",
            "decay_params": {"model_dim": recipe["d_model"], "warmup_steps": recipe["warmup_steps"]},
            "label_smoothing": recipe["label_smoothing"],
            "average_loss_in_time": True,
            # The search its exports serve (benchmarks/translate_speed.py): beam 4 and the
            # GNMT length penalty the recipe chose on the Bible, at most the recipe's length.
            "beam_width": 4,
            "length_penalty": 1.0,
            "maximum_decoding_length": recipe["max_length"],
        },
        "train": {
            # Token batches count max(source, target + EOS) padded tokens per side, as kseq's budget.
            "batch_type": "tokens",
            "batch_size": recipe["token_budget"],
            "length_bucket_width": 2,  # OpenNMT-tf's default
            "maximum_features_length": recipe["max_length"],
            "maximum_labels_length": recipe["max_length"],
            "sample_buffer_size": -1,  # shuffle all pairs, as kseq
            "save_summary_steps": report_steps,
            "save_checkpoints_steps": save_steps,
            "keep_checkpoint_max": 1,
            "max_step": 10**9,  # stopped by the clock
        },
    }


def run_opennmt(venv, data_dir, work, minutes, report_steps=100, tf_defaults=False, startup_minutes=10,
                save_steps=10**9):
    """Trains OpenNMT-tf for `minutes` from its "Training on" line (as
    kseq's clock starts as `fit` begins, before the first step traces),
    then stops it; returns its throughput (`opennmt_throughput`)."""
    settings = load_settings(data_dir)
    work.mkdir(parents=True, exist_ok=True)
    (work / "transformer_quick.py").write_text(opennmt_model_file(settings["recipe"]))
    config = opennmt_config(settings, data_dir, work / "model", report_steps, save_steps)
    # Dumped by the PyYAML that reads it (json.dumps writes 1e-09, which YAML 1.1 reads as a string).
    subprocess.run([str(venv / "bin" / "python"), "-c", "import json, sys, yaml; yaml.safe_dump(json.load(sys.stdin), "
                    f"open({str(work / 'config.yml')!r}, 'w'), sort_keys=False)"], input=json.dumps(config),
                   text=True, check=True)
    command = [str(venv / "bin" / "onmt-main"), "--model", str(work / "transformer_quick.py"),
               "--config", str(work / "config.yml"), "--seed", str(settings["recipe"]["seed"])]
    env = dict(os.environ)
    if not tf_defaults:  # what kseq.training.devices.runtime.tune_cpu_runtime sets
        threads = str(cpu_threads())
        command += ["--intra_op_parallelism_threads", threads, "--inter_op_parallelism_threads", threads]
        env["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
    log = work / "opennmt.log"
    load = os.getloadavg()[0]
    run_until(command + ["train"], log, env, work, trained_for(log, minutes * 60), (startup_minutes + minutes) * 60)
    result = opennmt_throughput(log.read_text())
    return {"side": "opennmt-tf", "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2),
            "runtime": "tensorflow defaults" if tf_defaults else "tune_cpu_runtime's", "log": str(log), **result}


def serving_models(venv, data_dir, work, minutes, save_steps=200):
    """Trains OpenNMT-tf as `run_opennmt` does, saving every `save_steps`
    steps, then exports its last checkpoint twice: a SavedModel
    (`<work>/saved_model`) and with its own converter a CTranslate2 model
    (`<work>/ctranslate2`), what benchmarks/translate_speed.py --opennmt-dir
    times. The clock stops training between saves: on a CPU of about a
    step a second, saves 200 steps apart can leave a quarter of the steps
    out of the export, so save more often there."""
    trained = run_opennmt(venv, data_dir, work, minutes, save_steps=save_steps)
    command = [str(venv / "bin" / "onmt-main"), "--model", str(work / "transformer_quick.py"),
               "--config", str(work / "config.yml")]
    for form in ("saved_model", "ctranslate2"):
        shutil.rmtree(work / form, ignore_errors=True)
        subprocess.run(command + ["export", "--output_dir", str(work / form), "--format", form], check=True)
    (work / "vocab.txt").write_bytes((data_dir / "vocab.txt").read_bytes())
    exported = re.search(r'model_checkpoint_path: "(.*)"', (work / "model" / "checkpoint").read_text()).group(1)
    return {**trained, "exported_checkpoint": exported, "saved_model": str(work / "saved_model"),
            "ctranslate2": str(work / "ctranslate2")}


def opennmt_throughput(log_text, discard=1):
    """Real target tokens/s from OpenNMT-tf's log: each line's target
    tokens/s times the time since the line before, summed; the first
    `discard` lines' intervals are left out (the first has no line before)."""
    lines = [match.groups() for match in map(STEP_LINE.match, log_text.splitlines()) if match]
    if len(lines) < discard + 1:
        raise SystemExit(f"OpenNMT-tf logged {len(lines)} step lines; {discard + 1} at least are needed "
                         "(train longer or lower --report-steps)")
    times = [datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f").timestamp() for stamp, _, _ in lines]
    kept = range(discard, len(lines))
    seconds = sum(times[i] - times[i - 1] for i in kept)
    tokens = sum(int(lines[i][2]) * (times[i] - times[i - 1]) for i in kept)
    steps = int(lines[-1][1])
    return {"steps": steps, "timed_steps": steps - int(lines[discard - 1][1]), "timed_seconds": round(seconds, 1),
            "real_target_tokens": round(tokens), "tokens_per_s": round(tokens / seconds, 1),
            "intervals": [int(lines[i][2]) for i in kept]}


def trained_for(log, seconds):
    """A `finished` for `run_until`: `seconds` after OpenNMT-tf logs that training starts."""
    began = []

    def finished():
        if not began and OPENNMT_START in log.read_text(errors="replace"):
            began.append(time.monotonic())
        return bool(began) and time.monotonic() - began[0] >= seconds

    return finished


def run_until(command, log, env, cwd, finished, limit_seconds):
    """Runs `command` (output to `log`) in its own process group until
    `finished()`, then stops the group. Raises SystemExit, with the log's
    end, when the command exits before or `limit_seconds` pass."""
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                   start_new_session=True)
    launched = time.monotonic()
    try:
        while process.poll() is None:
            time.sleep(1.0)
            if finished():
                return
            if time.monotonic() - launched > limit_seconds:
                raise SystemExit(f"{command[0]} did not finish in {limit_seconds:.0f} s; see {log}")
        if not finished():
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
            raise SystemExit(f"{command[0]} exited with {process.returncode}:\n{tail}")
    finally:
        stop(process)


def stop(process):
    """SIGTERM to the process group, SIGKILL if it outlives 30 s."""
    if process.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            return


# --- kseq --------------------------------------------------------------------------------------

def run_kseq(data_dir, work, minutes, extra=(), startup_minutes=10):
    """Runs kseq-train translate for `minutes` on the prepared tokenizer and
    stops it once its training is recorded (phases.json: decoding choice,
    test and export are not measured here); returns its throughput."""
    settings = load_settings(data_dir)
    recipe = settings["recipe"]
    work.mkdir(parents=True, exist_ok=True)
    logdir, phases = work / "logdir", work / "logdir" / "phases.json"
    command = [sys.executable, "-m", "kseq.cli.train", "translate", "--max-minutes", str(minutes),
               "--logdir", str(logdir), "--export-dir", str(work / "export"),
               "--tokenizer", str(data_dir / "spm.model"),
               # The preset's model, also where more minutes would make "auto" narrow it
               # (kseq.training.config.sizing): the one OpenNMT-tf trains.
               *[f"--{name.replace('_', '-')}={recipe[name]}" for name in MODEL],
               # One evaluation, at the end, on one sentence: the run is stopped after it.
               # (--attention-plots 0 fails at that evaluation: AttentionMaps gets no source.)
               "--eval-every", "1000000000", "--eval-sentences", "1", "--attention-plots", "1", *extra]

    def trained():
        try:
            return "trained" in json.loads(phases.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return False

    load = os.getloadavg()[0]
    # The recipe keeps its own clock (--max-minutes); the limit only bounds a stuck run.
    run_until(command, work / "kseq.log", dict(os.environ), ROOT, trained, (2 * startup_minutes + minutes) * 60)
    load_after = os.getloadavg()[0]
    metrics = json.loads(phases.read_text())["trained"]["metrics"]
    trained_size = metrics.get("model_size", {})
    if any(trained_size.get(name, recipe[name]) != recipe[name] for name in MODEL):
        raise SystemExit(f"kseq trained {trained_size}, not the model OpenNMT-tf trains ({recipe})")
    tokens = count_kseq_tokens(data_dir, metrics["steps"])
    estimate = metrics["epochs_run"] * settings["epoch_target_tokens"]
    seconds = metrics["train_step_seconds"]
    checks = {name: metrics.get(name) for name in ("precision", "model_size", "lr_scale", "jit_compile")}
    return {"side": "kseq", "load_before": round(load, 2), "load_after": round(load_after, 2),
            "steps": metrics["steps"], "timed_steps": metrics["steps"], "timed_seconds": seconds,
            "real_target_tokens": tokens, "tokens_per_s": round(tokens / seconds, 1),
            "tokens_estimate_from_epochs_run": round(estimate), "decisions": checks,
            "log": str(work / "kseq.log")}


def count_kseq_tokens(data_dir, steps):
    """Real target tokens in the first `steps` batches of the recipe's
    pipeline, counted in a fresh process (this one stays without TensorFlow)."""
    output = subprocess.run([sys.executable, __file__, "count-kseq-tokens", "--data", str(data_dir),
                             "--steps", str(steps)], check=True, capture_output=True, text=True, cwd=ROOT).stdout
    return json.loads(output.strip().splitlines()[-1])["tokens"]


def count_kseq_tokens_here(data_dir, steps):
    """The recipe's training pipeline, built with its arguments (its order
    depends only on the seed and the epoch), summed over `steps` batches."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np

    from kseq.data.bible import load_bible_pairs
    from kseq.data.bucketing import bucketed_pair_dataset
    from kseq.data.subword_tokenizer import SubwordTokenizer
    from kseq.training.checkpoints.resume import TrainingPosition

    recipe = load_settings(data_dir)["recipe"]
    tokenizer = SubwordTokenizer.load(str(data_dir / "spm.model"))
    sources, targets = load_bible_pairs("train")
    dataset, _ = bucketed_pair_dataset(sources, targets, tokenizer, tokenizer, token_budget=recipe["token_budget"],
                                       max_length=recipe["max_length"], seed=recipe["seed"],
                                       position=TrainingPosition(), epochs=recipe["epochs"])
    tokens = sum(int(np.count_nonzero(labels)) for _, labels in dataset.take(steps))
    print(json.dumps({"steps": steps, "tokens": tokens}))


# --- the machine's ceiling ----------------------------------------------------------------------

def ceiling(data_dir):
    """What this CPU allows at most, measured in a fresh process (this one
    stays without TensorFlow): see `ceiling_here`."""
    output = subprocess.run([sys.executable, __file__, "ceiling", "--data", str(data_dir)],
                            check=True, capture_output=True, text=True, cwd=ROOT).stdout
    return json.loads(output.strip().splitlines()[-1])


def ceiling_here(data_dir):
    """Prints the best square-matmul TFLOP/s per dtype (kseq's CPU runtime
    settings, 1024 and 2048 wide) and the model's matmul FLOPs per real target
    token with no padding at all (the prepared pairs, each at its own
    lengths; 3x the forward pass), and so the real target tokens/s that
    neither toolkit can pass: peak / FLOPs per token."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from kseq.training.devices.runtime import tune_cpu_runtime

    tune_cpu_runtime()
    from train_step import matmul_peaks
    from training import transformer_flops

    settings = load_settings(data_dir)
    recipe = settings["recipe"]
    with open(data_dir / "train.en") as en, open(data_dir / "train.fr") as fr:
        lengths = [(len(source.split()), len(target.split()) + 1) for source, target in zip(en, fr)]
    sources, targets = zip(*lengths)
    flops = 3 * transformer_flops(sources, targets, d=recipe["d_model"], ff=recipe["ff_dim"],
                                  layers=recipe["num_layers"], vocab=settings["vocab_size"])
    per_token = flops / sum(targets)
    peaks = {}
    for n in (1024, 2048):
        for dtype, tflops in matmul_peaks(n, seconds=3.0).items():
            peaks[dtype] = max(peaks.get(dtype, 0.0), tflops)
    print(json.dumps({"peak_tflops": peaks, "flops_per_real_target_token": round(per_token),
                      "ceiling_tokens_per_s": {dtype: round(peak * 1e12 / per_token)
                                               for dtype, peak in peaks.items()}}))


# --- compare -----------------------------------------------------------------------------------

def work_dir(path):
    return pathlib.Path(path or tempfile.mkdtemp(prefix="kseq-opennmt-tf-"))


def machine_info(venv):
    cpuinfo = pathlib.Path("/proc/cpuinfo").read_text() if os.path.exists("/proc/cpuinfo") else ""
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    flags = set((re.search(r"^flags\s*:\s*(.+)$", cpuinfo, re.M) or [None, ""])[1].split())
    marker = venv / MARKER
    freeze = json.loads(marker.read_text())["freeze"] if marker.exists() else []
    opennmt = {line.split("==")[0].lower(): line.split("==")[1] for line in freeze if "==" in line}
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True)
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": model.group(1) if model else "unknown", "cpus": cpu_threads(),
        "avx512_bf16": "avx512_bf16" in flags, "amx_bf16": "amx_bf16" in flags,
        "kseq_commit": commit.stdout.strip(),
        "kseq_side": {name: importlib.metadata.version(name) for name in ("tensorflow", "keras", "keras-hub")},
        "opennmt_side": {name: opennmt.get(name) for name in ("opennmt-tf", "tensorflow", "tensorflow-addons",
                                                                "numpy")},
    }


def compare(args):
    """`args.rounds` rounds of kseq then OpenNMT-tf, `args.minutes` each;
    the JSON is rewritten after every run, so a failed run keeps the others."""
    settings = load_settings(args.data)
    work = work_dir(args.work)
    folder = ROOT / "benchmarks" / "results" / "training-speed"
    default = folder / f"results-opennmt-tf-{time.strftime('%Y-%m-%d')}.json"
    output = pathlib.Path(args.output or default)
    result = {"machine": machine_info(args.venv), "minutes": args.minutes, "settings": settings,
              "kseq_args": args.kseq_args, "runs": []}
    print(f"{json.dumps(result['machine'])}\nlogs under {work}", flush=True)
    result["ceiling_before"] = ceiling(args.data)
    for round_ in range(1, args.rounds + 1):
        for side in ("kseq", "opennmt-tf"):
            where = work / f"round{round_}-{side}"
            if side == "kseq":
                run = run_kseq(args.data, where, args.minutes, shlex.split(args.kseq_args))
            else:
                run = run_opennmt(args.venv, args.data, where, args.minutes, args.report_steps,
                                  args.opennmt_tf_defaults)
            result["runs"].append({"round": round_, **run})
            print(f"round {round_} {side}: {run['tokens_per_s']:,.0f} real target tokens/s "
                  f"({run['steps']} steps)", flush=True)
            output.write_text(json.dumps(result, indent=2) + "\n")
    runs = result["runs"]
    ratios = [kseq["tokens_per_s"] / opennmt["tokens_per_s"] for kseq, opennmt in zip(runs[::2], runs[1::2])]
    result.update(ratios=[round(ratio, 3) for ratio in ratios], median_ratio=round(statistics.median(ratios), 3))
    result["ceiling_after"] = after = ceiling(args.data)
    # Each run's share of what the machine allows: the better of the two peak readings, in the
    # precision it trained in (kseq's "auto" picks mixed_bfloat16 on a CPU with bfloat16 units).
    for run in runs:
        dtype = "bfloat16" if run.get("decisions", {}).get("precision") == "mixed_bfloat16" else "float32"
        limit = max(result["ceiling_before"]["ceiling_tokens_per_s"][dtype], after["ceiling_tokens_per_s"][dtype])
        run["share_of_ceiling"] = round(run["tokens_per_s"] / limit, 3)
    output.write_text(json.dumps(result, indent=2) + "\n")
    print("\n| round | side | steps | real target tok/s | share of the ceiling |\n|---|---|---|---|---|")
    for run in runs:
        print(f"| {run['round']} | {run['side']} | {run['steps']} | {run['tokens_per_s']:,.0f} | "
              f"{run['share_of_ceiling']:.0%} |")
    print(f"\nceiling (no padding, the best matmul rate, before / after): "
          f"{result['ceiling_before']['ceiling_tokens_per_s']} / {after['ceiling_tokens_per_s']} real target tokens/s")
    print(f"\nkseq / OpenNMT-tf, per round: {', '.join(f'{r:.2f}' for r in ratios)}; "
          f"median {result['median_ratio']:.2f}x\nwrote {output}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__.split("\n", 2)[2],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["setup", "prepare", "run-opennmt", "run-kseq", "compare",
                                            "count-kseq-tokens", "ceiling", "serving-models"])
    cache = cache_root()
    parser.add_argument("--venv", type=pathlib.Path, default=cache / "opennmt-tf-2.32",
                        help="OpenNMT-tf's virtual environment (default: %(default)s)")
    parser.add_argument("--python", default=getattr(sys, "_base_executable", sys.executable),
                        help="the interpreter setup builds the venv with (default: %(default)s)")
    parser.add_argument("--data", type=pathlib.Path, default=cache / "opennmt-tf-data",
                        help="prepared data (default: %(default)s)")
    parser.add_argument("--tokenizer", default=str(ROOT / "runs" / "translate" / "spm.model"),
                        help="a recipe run's spm.model; trained as the recipe does when absent (default: %(default)s)")
    parser.add_argument("--minutes", type=float, default=12.0, help="training minutes a run (default: 12)")
    parser.add_argument("--rounds", type=int, default=3, help="compare: kseq + OpenNMT-tf pairs (default: 3)")
    parser.add_argument("--report-steps", type=int, default=100,
                        help="OpenNMT-tf's steps between throughput lines (default: 100)")
    parser.add_argument("--save-steps", type=int, default=200,
                        help="serving-models: OpenNMT-tf's steps between checkpoints (default: 200)")
    parser.add_argument("--opennmt-tf-defaults", action="store_true",
                        help="leave OpenNMT-tf at TensorFlow's thread pools and allocator")
    parser.add_argument("--kseq-args", default="", help='more recipe options, e.g. "--precision float32"')
    parser.add_argument("--work", help="run folders (default: a new temporary folder)")
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--output", help="compare's JSON (default: "
                                          "benchmarks/results/training-speed/results-opennmt-tf-<date>.json)")
    args = parser.parse_args()
    if args.command == "setup":
        setup(args.venv, args.python)
    elif args.command == "prepare":
        prepare(args.data, args.tokenizer)
    elif args.command == "run-opennmt":
        print(json.dumps(run_opennmt(args.venv, args.data, work_dir(args.work), args.minutes, args.report_steps,
                                     args.opennmt_tf_defaults), indent=2))
    elif args.command == "serving-models":
        print(json.dumps(serving_models(args.venv, args.data, work_dir(args.work), args.minutes, args.save_steps),
                         indent=2))
    elif args.command == "run-kseq":
        print(json.dumps(run_kseq(args.data, work_dir(args.work), args.minutes, shlex.split(args.kseq_args)), indent=2))
    elif args.command == "count-kseq-tokens":
        count_kseq_tokens_here(args.data, args.steps)
    elif args.command == "ceiling":
        ceiling_here(args.data)
    else:
        compare(args)


if __name__ == "__main__":
    main()
