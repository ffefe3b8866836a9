"""Train an RNN language model with truncated BPTT; export prompt -> continuation.

Default data: the English side (World English Bible) of kseq's Bible verse
pairs, with the translation task's fixed split by verse key; verses are
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

import tensorflow as tf

import kseq
from kseq.data.corpus import HoldOut
from kseq.data.splits import read_splits
from kseq.data.streaming import windows_per_epoch
from kseq.data.streams import join_documents, stream_batches, streamed_stream_batches
from kseq.data.tokenizers import tokenizer_files
from kseq.decoding.output import decoded_text
from kseq.export import export_language_model
from kseq.training import task
from kseq.training.checkpoints import ResumableBackup
from kseq.training.config import CadenceOptions, RNNOptions, SamplingOptions, TextFilesOptions, TextTaskOptions
from kseq.training.config import TrainingOptions, VocabularySampleOptions, option, options_parser, task_options
from kseq.training.devices import decide_jit_compile, share_per_worker, worker_batches
from kseq.training.loop import GenerationMonitor, Trained

# Without --valid-txt, every HOLD_OUT_EVERY-th training line (the first
# HOLD_OUT_LIMIT of them) validates: a bounded set, whatever the corpus size.
HOLD_OUT_EVERY, HOLD_OUT_LIMIT = 50, 5000


@task_options("language_model", embed_dim=256, units=256, dropout=0.3, batch_size=32, epochs=3,
              learning_rate=2e-3, sample_length=40, temperature=0.8, top_k=40, max_minutes=5.0)
class Options(TextFilesOptions, RNNOptions, TrainingOptions, SamplingOptions, CadenceOptions,
              VocabularySampleOptions, TextTaskOptions):
    ARCHITECTURE = ("tie_weights",)

    tie_weights: bool = option(True, "the output projection shares the embedding")
    bptt: int = option(35, "tokens per batch and stream (truncated BPTT)", minimum=1)
    window_lines: int = option(250_000, "training lines cut into streams together; the carried state is zeroed "
                               "where each window begins", minimum=1)
    prompts: tuple = ("In the beginning", "The Lord said to Moses,", "Blessed are")

    def problems(self):
        untied = self.tie_weights and self.embed_dim != self.units
        return super().problems() + (
            ["tied weights need --embed-dim == --units (or pass --no-tie-weights)"] if untied else [])


parse_args = options_parser(Options, __doc__)


def main(argv=None):
    """Trains a language model with truncated BPTT beside its baseline, tests and exports it.

    Args:
        argv: `kseq-train language_model`'s arguments, e.g. ["--train-txt", "my.txt", "--valid-txt", "my_valid.txt"];
            None (default) reads the command line.

    Returns:
        The metrics written to `<logdir>/metrics.json`: the test perplexity beside
        the baseline's, generated samples.
    """
    options = parse_args(argv)
    task.name_xla_cache(options)  # before the first device query
    run = task.start(options, decide_jit_compile(options.jit_compile, num_shapes=1, budget_minutes=options.max_minutes))
    texts = load_texts(options)
    started = run.phases.done or ResumableBackup.saved_state(os.path.join(run.workdir, "tbptt", "backup"))
    tokenizer = run.tokenizer(texts["train"].sample[0], started)
    options.check_vocabulary(tokenizer.vocab_size)  # --top-k within the pieces it ended with
    streams = make_streams(options, texts, tokenizer, run.strategy)
    trained = train(run, streams, tokenizer)
    continuer, search = make_continuer(trained.model, tokenizer, options)
    metrics = run.write_metrics({
        **trained.metrics, "test_cross_entropy": round(math.log(trained.metrics["test_perplexity"]), 4),
        "samples": continuations(continuer, options.prompts), "wall_seconds": round(run.seconds, 1),
    }, scores=("test_perplexity", "baseline_test_perplexity"))
    run.export(lambda: export_language_model(trained.model, tokenizer, options.export_dir, search,
                                             assets=tokenizer_files(tokenizer)), {"prompt": list(options.prompts[:1])})
    print(f"test perplexity {metrics['test_perplexity']:.2f} with truncated BPTT, "
          f"{metrics['baseline_test_perplexity']:.2f} with independent chunks")
    run.done()
    return metrics


def load_texts(options):
    """Reads the document splits: --train-txt's files and the others, or the Bible's English verses.

    Args:
        options: the task's options: --train-txt, --valid-txt, --test-txt,
            --vocab-sample and --seed.

    Returns:
        {"train": the training text, scanned once (`kseq.data.corpus.CorpusScan`
        of one document a line: its files, bad lines and a sample for the
        vocabulary), "valid" and "test": [documents]}.
    """
    from kseq.data.bible import bible_text_file, load_bible_pairs

    def default():
        return [bible_text_file("train")], *(load_bible_pairs(split)[0] for split in ("valid", "test"))

    splits = read_splits(options.train_txt, options.valid_txt, options.test_txt, kind="txt", default=default,
                         hold_out=HoldOut(every=HOLD_OUT_EVERY, limit=HOLD_OUT_LIMIT),
                         vocab_sample=options.vocab_sample, seed=options.seed)
    corpus = splits.train
    held = f" (every {HOLD_OUT_EVERY}th training line)" if splits.held_out else ""
    print(f"train: {corpus.pairs:,} documents in {len(corpus.files)} file(s)")
    print(f"valid: {len(splits.valid):,} documents{held}\ntest: {len(splits.test):,} documents")
    return {"train": corpus, "valid": splits.valid, "test": splits.test}


def make_streams(options, texts, tokenizer, strategy):
    """Cuts every split into parallel token streams, read --bptt tokens at a time.

    Args:
        options: the task's options (--batch-size, --bptt, --window-lines, --epochs).
        texts: `load_texts`' splits.
        tokenizer: the text tokenizer.
        strategy: the tf.distribute strategy.

    Returns:
        {"valid" and "test": batches of parallel token streams, "train": a
        function of the training position giving the training streams (from
        their files, every epoch's; under multiworker each worker its own
        share of the lines, cut into its share of the streams)}.
    """
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


def build_model(options, vocab_size, carry_state, precision="float32"):
    """Makes the language model of these options, unbuilt.

    Args:
        options: the task's options (sizes, --cell, --tie-weights, ...).
        vocab_size: V, the tokenizer's size.
        carry_state: carry the state from batch to batch (truncated BPTT).
        precision: the dtype policy. Default "float32".

    Returns:
        An `RNNLanguageModel`.
    """
    return kseq.models.RNNLanguageModel(
        vocab_size, embed_dim=options.embed_dim, units=options.units, cell=options.cell,
        num_layers=options.num_layers, dropout=options.dropout,
        tie_weights=options.tie_weights, carry_state=carry_state, dtype=precision,
    )


def make_continuer(model, tokenizer, options):
    """Makes a function continuing prompts with the export's sampler.

    Args:
        model: the language model.
        tokenizer: the text tokenizer.
        options: the task's options (--sample-length, --temperature, --top-k, --seed).

    Returns:
        (a function of a list of prompts giving their continuations, the `Sampler`).
    """
    search = options.sampler()

    def continue_texts(prompts):
        ids = tokenizer.tokenize(list(prompts)).to_tensor()
        generated, _ = model.search(tf.cast(ids, tf.int32), search)
        return [t.decode("utf-8") for t in decoded_text(tokenizer, generated)[0].numpy()]

    return continue_texts, search


def train(run, streams, tokenizer):
    """The truncated-BPTT model, then the baseline: the same model, options
    and budget, from a zero state at every batch (independent chunks).
    Each is trained once (a restart goes on from the first unfinished one).

    Args:
        run: the task's `Run`.
        streams: `make_streams`' streams.
        tokenizer: the text tokenizer.

    Returns:
        The truncated-BPTT model's `Trained`, with the baseline's scores
        beside its own (prefixed "baseline_").
    """
    trained = train_once_in(run, "tbptt", streams, tokenizer, carry_state=True)
    baseline = train_once_in(run, "independent_chunks", streams, tokenizer, carry_state=False)
    compared = ("test_perplexity", "valid_loss", "train_seconds", "steps")
    return Trained(trained.model, [],
                   {**trained.metrics, **{f"baseline_{name}": baseline.metrics[name] for name in compared}})


def train_once_in(run, name, streams, tokenizer, carry_state):
    """Trains one model once in `<logdir>/<name>`, its best epoch kept and scored on the test stream.

    The BPTT one's weights are kept for `--init-from`.

    Args:
        run: the task's `Run`.
        name: the model's folder and phase name.
        streams: `make_streams`' streams.
        tokenizer: the text tokenizer.
        carry_state: truncated BPTT (True) or independent chunks (False).

    Returns:
        `Trained`, its metrics with "test_perplexity".
    """
    options = run.options
    logdir = os.path.join(options.logdir, name)
    fit = run.make_fit(name, monitor="val_loss")

    def build():
        return run.compile(lambda: build_model(options, tokenizer.vocab_size, carry_state, run.precision.policy),
                           [kseq.metrics.Perplexity()])

    def train():
        model = build()
        print(f"{name}: {model.count_params():,} parameters, carry_state={model.carry_state}")
        continuer, _ = make_continuer(model, tokenizer, options)
        monitor = GenerationMonitor(options.prompts, None, continuer, {}, logdir=logdir)
        trained = run.fit(fit, model, streams["train"](fit.position), streams["valid"], [monitor], logdir=logdir,
                          hparams={} if carry_state else False, hparams_dir=options.logdir, examples="tokens")
        test = model.evaluate(streams["test"], verbose=0, return_dict=True)
        print(f"{name}: test perplexity {test['perplexity']:.2f}")
        trained.metrics = {"test_perplexity": round(float(test["perplexity"]), 3), **trained.metrics}
        return trained

    return run.train_once(name, fit, train, build, keep=carry_state)


def continuations(continuer, prompts):
    """Continues each prompt and prints the samples.

    Args:
        continuer: a function of prompts giving continuations (`make_continuer`).
        prompts: the prompts, strings.

    Returns:
        [{"prompt": ..., "continuation": ...}].
    """
    samples = [{"prompt": p, "continuation": c} for p, c in zip(prompts, continuer(prompts))]
    for sample in samples:
        print(f"  {sample['prompt']!r} -> {sample['continuation']!r}")
    return samples

