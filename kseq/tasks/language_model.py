"""Train an RNN language model with truncated BPTT; export prompt -> continuation.

Default data: the English side (World English Bible) of kseq's Bible verse
pairs, with the translation recipe's fixed split by verse key; verses are
SentencePiece-tokenized (a vocabulary trained on a sample of the training
verses), each followed by EOS, and joined into one stream per split. The
training text is streamed from its files `--window-lines` lines at a time;
each window's stream is cut into `--batch-size` parallel streams read
`--bptt` tokens at a time (one window holds the default corpus).

Two models with the same configuration and the same budget (`--epochs`, and
`--max-minutes` of training each) are trained: the truncated-BPTT one (state carried across batches, reset every
epoch) and a baseline that starts every batch from a zero state (independent
chunks). Both are scored on the test stream (each in its own regime) and
written to `<logdir>/metrics.json` as `test_perplexity` and
`baseline_test_perplexity`. The BPTT model is exported with a seeded top-k
sampler: `prompt` (string) -> `continuation` (string).

About 12 minutes on 2 CPU cores (two models of about 5 minutes each).

    kseq-train language_model
    kseq-train language_model --train-txt my.txt --valid-txt my_valid.txt
    tensorboard --logdir runs/language_model

--precision and --jit-compile as in kseq-train translate; --tokenizer PATH
as in kseq-train classify (your vocabulary instead of a trained one).
"""

import math
import os

import keras
import tensorflow as tf

import kseq
from kseq.data.corpus import HoldOut, corpus_files, raw_lines, scan_corpus
from kseq.data.streaming import windows_per_epoch
from kseq.data.streams import join_documents, stream_batches, streamed_stream_batches
from kseq.data.text import normalize_text
from kseq.decoding import Sampler
from kseq.decoding.output import decoded_text
from kseq.export import export_language_model
from kseq.training import recipe
from kseq.training.checkpoints import Phases, ResumableBackup
from kseq.training.config import (
    EpochCadenceOptions,
    RNNOptions,
    SamplingOptions,
    TrainingOptions,
    VocabularySampleOptions,
    option,
)
from kseq.training.config import options as opts
from kseq.training.devices import decide_jit_compile, share_per_worker, worker_batches
from kseq.training.loop import Fit, GenerationMonitor, Trained, train_once
from kseq.training.reporting import as_hparams, write_hparams

# Without --valid-txt, every HOLD_OUT_EVERY-th training line (the first
# HOLD_OUT_LIMIT of them) validates: a bounded set, whatever the corpus size.
HOLD_OUT_EVERY, HOLD_OUT_LIMIT = 50, 5000


@opts.recipe_options(embed_dim=256, units=256, dropout=0.3, batch_size=32, epochs=3, learning_rate=2e-3,
                     sample_length=40, temperature=0.8, top_k=40)
class Options(RNNOptions, TrainingOptions, SamplingOptions, EpochCadenceOptions, VocabularySampleOptions,
              opts.TextRecipeOptions):
    ARCHITECTURE = ("tie_weights",)

    train_txt: str | None = option(None, "training text, a document a line: a file, a glob or several joined by "
                                   "commas, plain or gzip (default: the Bible)", files=True)
    valid_txt: str | None = option(None, f"validation text (default: every {HOLD_OUT_EVERY}th training line, "
                                   f"{HOLD_OUT_LIMIT:,} at most)", files=True)
    test_txt: str | None = option(None, "test text (default: the validation text)", files=True)
    tie_weights: bool = option(True, "the output projection shares the embedding")
    bptt: int = option(35, "tokens per batch and stream (truncated BPTT)", minimum=1)
    window_lines: int = option(250_000, "training lines cut into streams together; the carried state is zeroed "
                               "where each window begins", minimum=1)
    max_minutes: float | None = option(5.0, "training budget of each model in minutes")
    logdir: str = option("runs/language_model", "TensorBoard logs, metrics.json and the models")
    export_dir: str = option("savedmodels/language_model", "the SavedModel goes to <export-dir>/<next version>/")
    prompts: tuple = ("In the beginning", "The Lord said to Moses,", "Blessed are")

    def problems(self):
        untied = self.tie_weights and self.embed_dim != self.units
        return super().problems() + (
            ["tied weights need --embed-dim == --units (or pass --no-tie-weights)"] if untied else [])


def parse_args(argv=None):
    return opts.parse(Options, argv, doc=__doc__)


def main(argv=None):
    options = parse_args(argv)
    xla = decide_jit_compile(options.jit_compile, num_shapes=1, budget_minutes=options.max_minutes)
    run = recipe.start(options, xla=xla.use)
    texts = load_texts(options)
    phases = Phases(run.workdir)
    started = phases.done or ResumableBackup.saved_state(os.path.join(run.workdir, "tbptt", "backup"))
    tokenizer = recipe.resumable_tokenizer(options, texts["train"].sample[0], run.workdir, started)
    streams = make_streams(options, texts, tokenizer, run.strategy)
    trained = train(options, run, streams, tokenizer, xla, phases)
    continuer, search = make_continuer(trained.model, tokenizer, options)
    metrics = recipe.write_metrics(options.logdir, {
        **trained.metrics, "test_cross_entropy": round(math.log(trained.metrics["test_perplexity"]), 4),
        "samples": continuations(continuer, options.prompts), "wall_seconds": round(run.seconds, 1),
    }, scores=("test_perplexity", "baseline_test_perplexity"))
    path = phases.once("export", lambda: export_language_model(trained.model, tokenizer, options.export_dir, search,
                                                              assets=recipe.tokenizer_files(tokenizer)))
    recipe.serve_sample(path, {"prompt": list(options.prompts[:1])})
    print(f"test perplexity {metrics['test_perplexity']:.2f} with truncated BPTT, "
          f"{metrics['baseline_test_perplexity']:.2f} with independent chunks")
    print(f"TensorBoard: tensorboard --logdir {options.logdir}")
    return metrics


def read_lines(files, role="train"):
    """Non-empty normalized lines of UTF-8 text `files` (a path, a glob or
    several joined by commas, plain or gzip) given as `--<role>-txt`."""
    lines = []
    for path in corpus_files(files, f"--{role}-txt"):
        try:
            lines += [normalize_text(raw.decode("utf-8")) for raw in raw_lines(path)]
        except UnicodeDecodeError as error:
            raise SystemExit(f"{path}: not UTF-8 text ({error})")
    lines = [line for line in lines if line]
    if not lines:
        raise SystemExit(f"{files}: no text")
    return lines


def load_texts(options):
    """{"train": the training text, scanned once (`kseq.data.corpus.CorpusScan`
    of one document a line: its files, bad lines and a sample for the
    vocabulary), "valid" and "test": [documents]}, from the text files or the
    default corpus."""
    hold_out = None
    if options.train_txt:
        files = corpus_files(options.train_txt, "--train-txt")
        hold_out = None if options.valid_txt else HoldOut(every=HOLD_OUT_EVERY, limit=HOLD_OUT_LIMIT)
    else:
        from kseq.data.bible import bible_text_file, load_bible_pairs

        files = [bible_text_file("train")]
    try:
        corpus = scan_corpus(files, options.vocab_sample, options.seed, hold_out, fields=1)
    except ValueError as error:
        raise SystemExit(f"--train-txt: {error}")
    if corpus.bad:
        print(f"train: {corpus.describe_problems()}")
    if not options.train_txt:
        texts = {split: load_bible_pairs(split)[0] for split in ("valid", "test")}
    else:
        valid = read_lines(options.valid_txt, "valid") if options.valid_txt else corpus.valid[0]
        if not valid:
            raise SystemExit(f"--train-txt {options.train_txt}: no line to hold out for validation; pass --valid-txt")
        texts = {"valid": valid, "test": read_lines(options.test_txt, "test") if options.test_txt else valid}
    held = f" (every {HOLD_OUT_EVERY}th training line)" if hold_out else ""
    print(f"train: {corpus.pairs:,} documents in {len(files)} file(s)")
    print(f"valid: {len(texts['valid']):,} documents{held}\ntest: {len(texts['test']):,} documents")
    return {"train": corpus, **texts}


def make_streams(options, texts, tokenizer, strategy):
    """{split: batches of parallel token streams} of the held-out splits,
    and "train": `position -> the training streams` (from their files, every
    epoch's; under multiworker each worker its own share of the lines, cut
    into its share of the streams)."""
    streams = {}
    for split in ("valid", "test"):
        tokens = join_documents(tokenizer.tokenize(texts[split]))
        # Evaluation streams are fewer so that little text is cut off.
        batch = min(options.batch_size, 8)
        streams[split] = stream_batches(tokens, batch, options.bptt)
        print(f"{split}: {len(tokens):,} tokens in {batch} streams")
    corpus = texts["train"]
    windows = windows_per_epoch(corpus.line_counts, options.window_lines)
    print(f"train: {options.batch_size} streams read {options.bptt} tokens at a time, "
          f"{'one window' if windows == 1 else f'{windows:,} windows of {options.window_lines:,} lines'} an epoch")

    # Under multiworker each worker cuts its own share of the lines into its share of the streams.
    streams_here = share_per_worker("--batch-size", options.batch_size, strategy)

    def train(position):
        return worker_batches(strategy, lambda shard: streamed_stream_batches(
            corpus, tokenizer, position, streams_here, options.bptt, window_lines=options.window_lines,
            epochs=options.epochs, shard=shard), filler_rows=streams_here)

    streams["train"] = train
    return streams


def build_model(options, vocab_size, carry_state, precision="float32", jit_compile=False):
    model = kseq.models.RNNLanguageModel(
        vocab_size, embed_dim=options.embed_dim, units=options.units, cell=options.cell,
        num_layers=options.num_layers, dropout=options.dropout,
        tie_weights=options.tie_weights, carry_state=carry_state, dtype=precision,
    )
    model.build()
    return recipe.compile_model(
        model, kseq.optimizers.FusedAdam(options.learning_rate, global_clipnorm=options.clipnorm),
        kseq.losses.MaskedSparseCategoricalCrossentropy(), [kseq.metrics.Perplexity()],
        jit_compile=jit_compile, accumulate=options.accumulate, init_from=options.init_from,
    )


def make_continuer(model, tokenizer, options):
    search = Sampler(options.sample_length, temperature=options.temperature,
                     top_k=options.top_k, seed=options.seed)

    def continue_texts(prompts):
        ids = tokenizer.tokenize(list(prompts)).to_tensor()
        generated, _ = model.search(tf.cast(ids, tf.int32), search)
        return [t.decode("utf-8") for t in decoded_text(tokenizer, generated)[0].numpy()]

    return continue_texts, search


def train(options, run, streams, tokenizer, xla, phases):
    """The truncated-BPTT model, then the baseline: the same model, options
    and budget, from a zero state at every batch (independent chunks).
    Each is trained once (a restart goes on from the first unfinished one).
    -> the first's `Trained`, with the baseline's scores beside its own."""
    trained = train_once_in(phases, "tbptt", options, run, streams, tokenizer, xla, carry_state=True)
    baseline = train_once_in(phases, "independent_chunks", options, run, streams, tokenizer, xla, carry_state=False)
    compared = ("test_perplexity", "valid_loss", "train_seconds", "steps")
    return Trained(trained.model, [],
                   {**trained.metrics, **{f"baseline_{name}": baseline.metrics[name] for name in compared}})


def train_once_in(phases, name, options, run, streams, tokenizer, xla, carry_state):
    """One model trained once in `<logdir>/<name>`; the BPTT one's weights are kept."""
    fit = Fit(os.path.join(run.workdir, name), max_minutes=options.max_minutes, monitor="val_loss", **options.fit_cadence)

    def build():
        with run.strategy.scope():
            return build_model(options, tokenizer.vocab_size, carry_state, run.precision.policy, xla.use)

    return train_once(phases, name, fit, lambda: fit_one(name, options, run, streams, tokenizer, xla, build, fit),
                      options if carry_state else None, build)


def fit_one(name, options, run, streams, tokenizer, xla, build, fit):
    """One model fitted in `<logdir>/<name>`; its best epoch is kept and scored on the test stream."""
    logdir = os.path.join(options.logdir, name)
    model = build()
    print(f"{name}: {model.count_params():,} parameters, carry_state={model.carry_state}")
    decisions = run.decisions(model, xla)
    if model.carry_state and not fit.resuming:  # a resumed run's curves continue the first run's
        write_hparams(options.logdir, options.as_hparams() | as_hparams(decisions))
    continuer, _ = make_continuer(model, tokenizer, options)
    logging = [keras.callbacks.TensorBoard(logdir, profile_batch=options.profile_batch),
               GenerationMonitor(options.prompts, None, continuer, {}, logdir=logdir)]
    metrics = fit.fit(model, streams["train"](fit.position), streams["valid"], options.epochs, logging)
    print(f"{name}: this worker read {fit.position.pairs_read():,} training tokens from the files")
    model.save(os.path.join(logdir, "model.keras"))  # the best epoch's weights
    test = model.evaluate(streams["test"], verbose=0, return_dict=True)
    print(f"{name}: test perplexity {test['perplexity']:.2f}")
    return Trained(model, decisions, {"test_perplexity": round(float(test["perplexity"]), 3), **metrics})


def continuations(continuer, prompts):
    """[{prompt, continuation}] of the exported model's sampler, printed."""
    samples = [{"prompt": p, "continuation": c} for p, c in zip(prompts, continuer(prompts))]
    for sample in samples:
        print(f"  {sample['prompt']!r} -> {sample['continuation']!r}")
    return samples

