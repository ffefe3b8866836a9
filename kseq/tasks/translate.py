"""Train a translator with model.fit, choose its decoding, test it and export it for TF Serving.

Default data: English -> French Bible verses (kseq.data.bible); or your pairs: --train-tsv FILES
(lines `source<TAB>target`: a file, a glob or several joined by commas, plain or gzip), streamed
from disk whatever their size, --valid-tsv, --test-tsv. Every "auto" is decided from the data or
the device, printed with its reason and written to metrics.json and HParams (README, "Translation").
The same command continues a killed run from its last save.

    kseq-train translate                        # quick: 2 CPU cores, 6 minutes of training
    kseq-train translate --arch rnn --attention bahdanau --cell gru
    kseq-train translate --train-tsv my_pairs.tsv --epochs 5
    kseq-train translate --train-tsv 'corpus/*.tsv.gz' --valid-tsv dev.tsv --max-minutes 600
    kseq-train translate --pretrained opus-mt-en-fr/ --train-tsv my_pairs.tsv   # fine-tune OPUS-MT
    tensorboard --logdir runs/

With --pretrained FOLDER (a Marian checkpoint in the Hugging Face layout, OPUS-MT's) the model and its
two tokenizers are the checkpoint's: options that would change its architecture are refused, the
learning rate and warm-up default to fine-tuning's, and metrics.json has the test scores before
fine-tuning (pretrained_test_bleu, pretrained_test_chrf) beside those after.
"""

import dataclasses
import importlib.util
import os
import time

from kseq.data.corpus import HoldOut
from kseq.data.splits import read_splits
from kseq.export import export_ctranslate2, export_translator
from kseq.export.compute_dtype import in_compute_dtype
from kseq.tasks import translator_model
from kseq.tasks.translator_model import compile_translator, run_tokenizers, size_model
from kseq.training import task
from kseq.training.config import AUTO, TRAINED_WEIGHTS, Auto, ClippingOptions, DecodingOptions, EvaluationOptions
from kseq.training.config import ScheduleOptions, Seq2SeqOptions, StoppingOptions, StreamedDataOptions, TextTaskOptions
from kseq.training.config import TokenBatchOptions, TsvFilesOptions, finished_run, option
from kseq.training.config import SMALLEST_VOCABULARY, checkpoint_problem, options_parser, pretrained_problems
from kseq.training.config import task_options
from kseq.training.devices import decide_for_translation, device_class, weights_fingerprint
from kseq.training.loop import Trained, keep_best, translator_callbacks
from kseq.training.pipelines import pair_pipelines
from kseq.training.reporting import Decision, write_model_graph
from kseq.training.scoring import DecodingSettings, choose_metric, choose_translator_decoding, keep_better_average
from kseq.training.scoring import model_translator, recent_weights, report_name_alignment, test_translations
from kseq.training.scoring import validation_score

# Validation pairs held out of --train-tsv when no --valid-tsv is given: each is evaluated every period.
HOLD_OUT_EVERY, HOLD_OUT_LIMIT = 50, 3000

PRESETS = {
    # The defaults below, for 2 CPU cores and 6 minutes: small batches (more updates) and no
    # dropout (no overfitting in a few epochs) learn fastest; the clock and patience end training.
    "quick": {},
    # One GPU, 10 minutes: dozens of passes over the data, so a mid-sized model with dropout.
    "gpu": dict(num_layers=4, d_model=384, num_heads=6, ff_dim=1536, dropout=0.2, embed_dim=384, units=512,
                max_vocab_size=8000, token_budget=16384, max_length=128, max_minutes=10.0, warmup_steps=1000,
                epochs=200, anneal=0.0),
    "base": dict(num_layers=6, d_model=512, num_heads=8, ff_dim=2048, dropout=0.1, embed_dim=512, units=512,
                 max_vocab_size=16000, token_budget=25000, max_length=128, max_minutes=None, warmup_steps=4000,
                 epochs=40, anneal=0.0),
}


def _ctranslate2_problem(folder):
    """The message when `--export-ctranslate2` is given without CTranslate2 installed, else None."""
    if importlib.util.find_spec("ctranslate2") is None:
        return "--export-ctranslate2 needs ctranslate2: pip install 'kseq[ctranslate2]'"
    return None


# The quick preset anneals: measured on it alone (benchmarks/RESULTS.md, translation quality).
@task_options("translate", epochs=1000, max_minutes=6.0, eval_every=AUTO, save_every="200", anneal=0.2)
class Options(TsvFilesOptions, Seq2SeqOptions, TokenBatchOptions, ScheduleOptions, DecodingOptions, StoppingOptions,
              EvaluationOptions, StreamedDataOptions, ClippingOptions, TextTaskOptions):
    vocab_size: int | Auto = option(AUTO, "joint SentencePiece pieces; auto: from the data",
                                    minimum=SMALLEST_VOCABULARY)
    max_vocab_size: int = option(4000, "the most pieces auto may choose", minimum=SMALLEST_VOCABULARY)
    attention_plots: int = option(3, "attention maps logged at each evaluation", minimum=0)
    max_test_sentences: int | None = option(None, "test only the first N pairs", minimum=1)
    export_xla: bool = option(False, "compile the exported search with XLA")
    export_ctranslate2: str | None = option(None, "also write a CTranslate2 model of the Transformer to "
                                            "<dir>/<next version>/ (pip install 'kseq[ctranslate2]')",
                                            folder="export", needs={"arch": "transformer"},
                                            check=_ctranslate2_problem)
    pretrained: str | None = option(None, "fine-tune a pretrained Marian translator (OPUS-MT's Hugging Face "
                                    "layout): a folder, or a Hub name with the hub extra", check=checkpoint_problem)

    def problems(self):
        return super().problems() + pretrained_problems(self)


_parse = options_parser(Options, __doc__, PRESETS)


def parse_args(argv=None):
    """The task's options from `argv` (default: the command line), checked; the LSTM keeps its
    schedule alone unless `--anneal` is given (annealed, it scored no better: benchmarks/RESULTS.md)."""
    options = _parse(argv)
    if options.arch == "rnn" and "anneal" not in options.options_given:
        return dataclasses.replace(options, anneal=0.0)
    return options


def main(argv=None):
    """Trains a translator, chooses its decoding, tests and exports it.

    Args:
        argv: `kseq-train translate`'s arguments, e.g. ["--arch", "rnn", "--cell", "gru"];
            None (default) reads the command line.

    Returns:
        The metrics written to `<logdir>/metrics.json`; on a worker that is
        not the chief, the `Trained` it ends with.
    """
    options = parse_args(argv)
    task.name_xla_cache(options)  # before the first device query
    jit = decide_for_translation(options.jit_compile, options.max_length, options.max_minutes, options.arch)
    # Decoding is compiled on a GPU; a CPU with bfloat16 units trains the
    # Transformer faster under mixed_bfloat16, not the RNN (`bfloat16_cpu`).
    run = task.start(options, jit, compiles=device_class() == "gpu", bfloat16_cpu=options.bfloat16_cpu)
    fit = run.make_fit()
    data = load_data(options)
    tokenizers = run_tokenizers(run, data["train"], fit.resuming or run.phases.get("trained"))
    metric = Decision("metric", *choose_metric(data["valid"][1], options.metric))
    model_size = size_model(run, tokenizers, data["train"], metric.value)
    options = run.options
    print(f"{metric}\n{model_size}")
    trained = run.train_once("trained", fit, lambda: train(run, fit, data, tokenizers, [metric, model_size]),
                             lambda: compile_translator(run, tokenizers, metric.value)[0])
    if not run.chief:
        return trained
    after_training = run.seconds
    decoding = run.phases.once("decoding", lambda: choose_translator_decoding(
        options, trained.model, tokenizers.source, data["valid"], metric.value, trained.decode_xla,
        target_tokenizer=tokenizers.target))
    search = DecodingSettings(**decoding["settings"]).search(options.max_length)
    served = in_compute_dtype(trained.model)  # the weights the export serves: the test scores them
    tested = test(run, trained, served, search, tokenizers, data["test"])
    training = run.phases.get("trained")  # this run's, or the one before a restart's
    wall = training["wall_seconds"] + run.seconds - after_training
    metrics = {**tested, **training["metrics"], **decoding["metrics"], "vocab_size": tokenizers.source.vocab_size,
               "wall_seconds": round(wall, 1)}
    metrics["train_step_share"] = round(metrics["train_step_seconds"] / metrics["wall_seconds"], 3)
    run.write_metrics(metrics, scores=("test_bleu", "test_chrf", "test_exact_match"))
    run.export(lambda: export_translator(
        served, tokenizers.source, tokenizers.target, options.export_dir, search=search,
        max_source_length=options.max_length, assets=tokenizers.files(), jit_compile=options.export_xla),
        {"source": data["test"][0][:1]})
    if options.export_ctranslate2:
        converted = run.phases.once("export_ctranslate2", lambda: {"path": export_ctranslate2(
            trained.model, tokenizers.source, tokenizers.target, options.export_ctranslate2,
            assets=tokenizers.files())})
        print(f"CTranslate2 model: {converted['path']}")
    print(f"train steps took {metrics['train_step_share']:.0%} of {metrics['wall_seconds']:.0f} s of wall time")
    run.done()
    return metrics


def trained_model(logdir, dtype=None):
    """Loads the model of a translate run whose training finished, to export it again.

    The weights, options and tokenizer it kept in `logdir` are read as
    `--init-from` reads them, e.g. for `kseq.export.export_ctranslate2`.

    Args:
        logdir: the run's --logdir.
        dtype: the model's dtype policy, e.g. "mixed_bfloat16" as the run's
            export computes on a CPU with bfloat16 units; None (default):
            keras' global one.

    Returns:
        (model, built and loaded; tokenizer); for a run fine-tuned from
        `--pretrained`, (model, `Tokenizers`: its source and target tokenizers).
    """
    if translator_model.fine_tuned(logdir):
        return translator_model.fine_tuned_model(logdir, dtype)
    options, tokenizer = finished_run(logdir, Options)
    model = options.build(tokenizer.vocab_size, options.max_length + 1, dtype=dtype)
    model.build()
    model.load_weights(os.path.join(logdir, TRAINED_WEIGHTS))
    return model, tokenizer


def load_data(options):
    """Reads the splits from the TSV files or the default corpus.

    Without --valid-tsv, validation pairs are held out of the training files.

    Args:
        options: the task's options (--train-tsv, --valid-tsv, --test-tsv,
            --vocab-sample, --seed).

    Returns:
        {"train": the training corpus, scanned once (`kseq.data.corpus.CorpusScan`:
        its files, their bad lines, a sample), "valid" and "test": (sources, targets)}.

    Raises:
        UsageError: a file holds no good pair, or none to hold out (`read_splits`).
    """
    from kseq.data.bible import bible_split_file, load_bible_pairs

    def default():
        return [bible_split_file("train")], load_bible_pairs("valid"), load_bible_pairs("test")

    start = time.time()
    splits = read_splits(options.train_tsv, options.valid_tsv, options.test_tsv, default=default,
                         hold_out=HoldOut(every=HOLD_OUT_EVERY, limit=HOLD_OUT_LIMIT),
                         vocab_sample=options.vocab_sample, seed=options.seed)
    corpus = splits.train
    print(f"train: {corpus.pairs:,} pairs in {len(corpus.files)} file(s), {corpus.lines:,} lines; a sample of "
          f"{len(corpus.sample[0]):,} for the vocabulary ({time.time() - start:.0f} s)")
    held = f" (every {HOLD_OUT_EVERY}th training line, {corpus.held_out:,} held out)" if splits.held_out else ""
    print(f"valid: {len(splits.valid[0]):,} pairs{held}\ntest: {len(splits.test[0]):,} pairs")
    return {"train": corpus, "valid": splits.valid, "test": splits.test}


def train(run, fit, data, tokenizers, decided):
    """Fits the model until the validation score stops improving; keeps the
    best evaluation's weights, or the mean of recent snapshots where better.

    Args:
        run: the task's `Run`.
        fit: its `Fit`.
        data: `load_data`'s splits.
        tokenizers: the run's `Tokenizers`.
        decided: the decisions made so far, the metric first.

    Returns:
        `Trained` with the model, decisions, metrics (with `--pretrained`,
        the pretrained model's test scores too) and whether decoding uses XLA.
    """
    options, metric = run.options, decided[0].value
    model, schedule, rate = compile_translator(run, tokenizers, metric)
    # Compiled blocks compile once a batch shape too: they take XLA's few fixed shapes.
    train_data, valid, report = pair_pipelines(options, data["train"], data["valid"], tokenizers.source,
                                               xla=model.jit_compile or run.jit.compiled_blocks,
                                               strategy=run.strategy, position=fit.position,
                                               target_tokenizer=tokenizers.target)
    decode_xla = run.jit.use or device_class() == "gpu"
    monitor, logging, before = None, [], {}
    if options.pretrained and run.chief:
        before = run.phases.once("pretrained_test", lambda: translator_model.scores_before(
            run, model, tokenizers, data["test"], decode_xla))
    if run.chief:
        # Traced in every run, resumed ones too: XLA's cache finds a program by
        # its function's name, which comes from a process-wide counter.
        write_model_graph(options.logdir, model)
        monitor, logging = translator_callbacks(
            model, tokenizers.source, data["valid"], options.logdir, options.max_length, options.eval_sentences,
            options.attention_plots if options.has_attention else 0, decode_xla, options.decoding_seconds,
            target_tokenizer=tokenizers.target)
    best = keep_best(options, os.path.join(run.workdir, "checkpoints"), metric, options.eval_sentences,
                     schedule.factor)  # resumed with the backup
    recent = recent_weights(options)
    trained = run.fit(fit, model, train_data, valid, logging, [best] + ([recent] if recent else []),
                      decisions=[*decided, rate], examples="pairs", batches=report.describe_batches(), save=False,
                      units="tokens")
    averaging = keep_better_average(model, recent, validation_score(monitor, valid, best.monitor), best.mode)
    metrics = {**trained.metrics, **before, "weights_sha256": weights_fingerprint(model),
               "batch_shapes": report.batch_shapes}
    print(f"averaging: {averaging}\ntrained {metrics['steps']} steps; weights sha256 {metrics['weights_sha256']}")
    if run.chief:
        ran = fit.history.history.get("val_loss", [])  # none in a run resumed after its last period
        metrics.update(valid_loss=float(ran[-1]) if ran else validation_score(monitor, valid, "val_loss")(model),
                       valid_bleu=monitor.history[-1]["bleu"] if monitor.history else None,
                       best_weights=best.report(), averaging=averaging, eval_every=str(options.cadence),
                       decode_xla=decode_xla)
    return Trained(model, trained.decisions, metrics, decode_xla)


def test(run, trained, served, search, tokenizers, test_pairs):
    """Tests `search` through the export's translate function, once (a phase).

    With attention, it also reports how often the attention finds copied names.

    Args:
        run: the task's `Run`.
        trained: the `Trained` model.
        served: the model in the weights the export serves.
        search: the chosen decoding search.
        tokenizers: the run's `Tokenizers`.
        test_pairs: (sources, targets).

    Returns:
        {name: value}: the test scores and seconds, with attention the
        name-alignment report's entries too.
    """
    options = run.options
    translate = model_translator(served, tokenizers.source, options.max_length, search, trained.decode_xla,
                                 target_tokenizer=tokenizers.target)
    tested = run.phases.once("test", lambda: test_translations(translate, test_pairs, options.logdir,
                                                               options.max_test_sentences))
    if options.has_attention:
        tested = {**tested, **run.phases.once("alignment", lambda: report_name_alignment(
            trained.model, tokenizers.source, *test_pairs, options.max_length, target_tokenizer=tokenizers.target))}
    return tested
