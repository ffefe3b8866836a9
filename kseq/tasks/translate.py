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

import kseq
from kseq._atomic import write_bytes_atomic
from kseq.data.corpus import HoldOut
from kseq.data.splits import read_splits
from kseq.data.tokenizers import tokenizer_files
from kseq.export import export_ctranslate2, export_translator
from kseq.export.compute_dtype import in_compute_dtype
from kseq.errors import UsageError
from kseq.training import task
from kseq.training.config import AUTO, TRAINED_WEIGHTS, Auto, ClippingOptions, DecodingOptions, EvaluationOptions
from kseq.training.config import ScheduleOptions, Seq2SeqOptions, StoppingOptions, StreamedDataOptions, TextTaskOptions
from kseq.training.config import TokenBatchOptions, TsvFilesOptions, choose_model_size, finished_run, option
from kseq.training.config import options_parser, pretrained_problems, task_options
from kseq.training.devices import decide_for_translation, device_class, weights_fingerprint
from kseq.training.loop import Trained, keep_best, translator_callbacks
from kseq.training.objectives import fine_tuning_learning_rate, translation_learning_rate
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
                epochs=200),
    "base": dict(num_layers=6, d_model=512, num_heads=8, ff_dim=2048, dropout=0.1, embed_dim=512, units=512,
                 max_vocab_size=16000, token_budget=25000, max_length=128, max_minutes=None, warmup_steps=4000,
                 epochs=40),
}


@task_options("translate", epochs=1000, max_minutes=6.0, eval_every=AUTO, save_every="200")
class Options(TsvFilesOptions, Seq2SeqOptions, TokenBatchOptions, ScheduleOptions, DecodingOptions, StoppingOptions,
              EvaluationOptions, StreamedDataOptions, ClippingOptions, TextTaskOptions):
    vocab_size: int | Auto = option(AUTO, "joint SentencePiece pieces; auto: from the data", minimum=1)
    max_vocab_size: int = option(4000, "the most pieces auto may choose", minimum=1)
    attention_plots: int = option(3, "attention maps logged at each evaluation", minimum=0)
    max_test_sentences: int | None = option(None, "test only the first N pairs")
    export_xla: bool = option(False, "compile the exported search with XLA")
    export_ctranslate2: str | None = option(None, "also write a CTranslate2 model of the Transformer to "
                                            "<dir>/<next version>/ (pip install 'kseq[ctranslate2]')")
    pretrained: str | None = option(None, "fine-tune a pretrained Marian translator (OPUS-MT's Hugging Face "
                                    "layout): a folder, or a Hub name with the hub extra")

    def problems(self):
        return super().problems() + pretrained_problems(self) + [message for broken, message in (
            (self.export_ctranslate2 and self.arch != "transformer",
             "--export-ctranslate2 needs --arch transformer: a recurrent model has no CTranslate2 form"),
            (self.export_ctranslate2 and importlib.util.find_spec("ctranslate2") is None,
             "--export-ctranslate2 needs ctranslate2: pip install 'kseq[ctranslate2]'"),
        ) if broken]


parse_args = options_parser(Options, __doc__, PRESETS)

# A run fine-tuned from --pretrained keeps the checkpoint's config.json under this name in its logdir.
PRETRAINED_CONFIG = "pretrained_config.json"
# The model size a --pretrained run reports: the checkpoint's.
PRETRAINED_SIZE = ("num_layers", "decoder_num_layers", "d_model", "num_heads", "ff_dim", "activation")
# How the pretrained model is tested before fine-tuning: OPUS-MT's 4 beams, with
# the tasks' own length penalty and stop (patience 1), before any choice on validation pairs.
PRETRAINED_DECODING = DecodingSettings(beam_size=4, length_penalty=0.6, no_repeat_ngram=0, max_ngram_count=1,
                                       max_length_ratio=None, patience=1.0)


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
    if os.path.isfile(os.path.join(logdir, PRETRAINED_CONFIG)):
        return _fine_tuned_model(logdir, dtype)
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


@dataclasses.dataclass(frozen=True)
class Tokenizers:
    """A translator's tokenizers: one joint tokenizer (`source` is `target`),
    or a pretrained checkpoint's two (`kseq.data.marian_tokenizer.MarianTokenizer`)."""

    source: object
    target: object

    def files(self):
        """The files that rebuild both, for an export's assets/ folder."""
        return {**tokenizer_files(self.source), **tokenizer_files(self.target)}


def run_tokenizers(run, corpus, resuming):
    """The run's tokenizers: with `--pretrained` the checkpoint's (their files
    and its config.json kept in the logdir, as `trained_model` reads them),
    else `run.tokenizer`'s joint one.

    Args:
        run: the task's `Run`.
        corpus: the training corpus (its sample trains a vocabulary).
        resuming: whether the run goes on from an earlier one.

    Returns:
        `Tokenizers`.
    """
    options = run.options
    if not options.pretrained:
        tokenizer = run.tokenizer(corpus.sample[0] + corpus.sample[1], resuming, cache=corpus.folder)
        return Tokenizers(tokenizer, tokenizer)
    from kseq.pretrained import checkpoint_folder, marian_tokenizers

    folder = checkpoint_folder(options.pretrained)
    tokenizers = Tokenizers(*marian_tokenizers(folder))
    for name, content in tokenizers.files().items():
        write_bytes_atomic(os.path.join(run.workdir, name), content)
    with open(os.path.join(folder, "config.json"), "rb") as f:
        write_bytes_atomic(os.path.join(run.workdir, PRETRAINED_CONFIG), f.read())
    print(f"tokenizers: the pretrained checkpoint's ({folder}), {tokenizers.source.vocab_size} source and "
          f"{tokenizers.target.vocab_size} target ids (its vocabularies, and BOS: kseq's id for its decoder start)")
    return tokenizers


def size_model(run, tokenizers, corpus, metric):
    """Sets the model's size in `run.options` and says why: the data's choice
    (`choose_model_size`), or with `--pretrained` the checkpoint's config.json
    (its dropout too unless `--dropout` is given).

    Args:
        run: the task's `Run`.
        tokenizers: the run's `Tokenizers`.
        corpus: the training corpus.
        metric: the validation metric chosen.

    Returns:
        The "model_size" `Decision`.
    """
    options = run.options
    if not options.pretrained:
        target_lengths = tokenizers.target.tokenize(corpus.sample[1]).row_lengths().numpy()
        sizes, model_size = choose_model_size(options, target_lengths, metric, pairs=corpus.pairs)
        run.options = dataclasses.replace(options, **sizes)
        return model_size
    from kseq.pretrained import checkpoint_config, checkpoint_folder

    arguments = checkpoint_config(checkpoint_folder(options.pretrained)).model_arguments
    dropout = options.dropout if "dropout" in options.options_given else arguments["dropout"]
    run.options = dataclasses.replace(options, dropout=dropout)
    shown = {name: arguments[name] for name in PRETRAINED_SIZE} | {"dropout": dropout}
    return Decision("model_size", shown, f"the pretrained checkpoint's config.json ({options.pretrained})")


def build_translator(run, tokenizers):
    """The translator, unbuilt, or with `--pretrained` the checkpoint's, built
    and loaded (it must be made under the strategy: `Run.compile` calls this).

    Args:
        run: the task's `Run`.
        tokenizers: the run's `Tokenizers`.

    Returns:
        The model.

    Raises:
        UsageError: `--max-length` over what the pretrained model holds.
    """
    options = run.options
    if not options.pretrained:
        return options.build(tokenizers.source.vocab_size, options.max_length + 1, dtype=run.precision.policy)
    from kseq.pretrained import load_marian

    model = load_marian(options.pretrained, dtype=run.precision.policy, dropout=options.dropout,
                        compiled_blocks=run.jit.compiled_blocks).model
    if options.max_length + 1 > model.max_length:  # + BOS
        raise UsageError(f"--max-length {options.max_length}: the pretrained model holds {model.max_length} "
                         f"positions (its max_position_embeddings), BOS included: expected at most "
                         f"{model.max_length - 1}")
    return model


def pretrained_scores(run, model, tokenizers, test_pairs, decode_xla):
    """The test scores of the pretrained model as it came, before fine-tuning
    (`PRETRAINED_DECODING`); its outputs go to `<logdir>/pretrained/test_translations.tsv`.

    Args:
        run: the task's `Run`.
        model: the pretrained model, not yet trained.
        tokenizers: the run's `Tokenizers`.
        test_pairs: (sources, targets).
        decode_xla: whether decoding is compiled with XLA.

    Returns:
        metrics.json's "pretrained_test_bleu", "pretrained_test_chrf",
        "pretrained_test_exact_match" and "pretrained_decoding".
    """
    options = run.options
    folder = os.path.join(options.logdir, "pretrained")
    os.makedirs(folder, exist_ok=True)
    print("before fine-tuning, the pretrained model as it came:")
    translate = model_translator(model, tokenizers.source, options.max_length,
                                 PRETRAINED_DECODING.search(options.max_length), decode_xla,
                                 target_tokenizer=tokenizers.target)
    tested = test_translations(translate, test_pairs, folder, options.max_test_sentences)
    return {"pretrained_test_bleu": tested["test_bleu"], "pretrained_test_chrf": tested["test_chrf"],
            "pretrained_test_exact_match": tested["test_exact_match"],
            "pretrained_decoding": dataclasses.asdict(PRETRAINED_DECODING)}


def _fine_tuned_model(logdir, dtype):
    """`trained_model` of a run fine-tuned from `--pretrained`: the checkpoint's
    architecture (the config.json kept), the run's tokenizers and weights."""
    import json

    from kseq.data.marian_tokenizer import MarianTokenizer
    from kseq.models import TransformerSeq2Seq
    from kseq.pretrained import read_marian_config

    tokenizers = Tokenizers(*(MarianTokenizer.load(os.path.join(logdir, f"marian_{side}.json"))
                              for side in ("source", "target")))
    with open(os.path.join(logdir, PRETRAINED_CONFIG), encoding="utf-8") as f:
        arguments = read_marian_config(json.load(f)).model_arguments
    model = TransformerSeq2Seq(tokenizers.source.vocab_size, tokenizers.target.vocab_size, dtype=dtype, **arguments)
    model.build()
    model.load_weights(os.path.join(logdir, TRAINED_WEIGHTS))
    return model, tokenizers


def compile_translator(run, tokenizers, metric):
    """Builds and compiles the translator under the strategy, its optimizer's variables made.

    With the variables made, fit traces one step, fresh or resumed. With
    `--pretrained` the model is the checkpoint's, and the learning rate
    fine-tuning's (`fine_tuning_learning_rate`, printed with its reason).

    Args:
        run: the task's `Run`.
        tokenizers: the run's `Tokenizers`.
        metric: the validation metric chosen, which the learning rate depends on.

    Returns:
        (model, its learning-rate schedule, the rate's `Decision`).
    """
    options = run.options
    with run.strategy.scope():
        if options.pretrained:
            warmup = options.warmup_steps if "warmup_steps" in options.options_given else None
            schedule, rate = fine_tuning_learning_rate(options.learning_rate, warmup)
            print(rate)
        else:
            schedule, rate = translation_learning_rate(options.arch, options.d_model, options.warmup_steps, metric,
                                                       options.lr_scale, options.learning_rate)
    model = run.compile(
        lambda: build_translator(run, tokenizers),
        [kseq.metrics.MaskedAccuracy(), kseq.metrics.Perplexity()],
        loss=kseq.losses.MaskedSparseCategoricalCrossentropy(label_smoothing=options.label_smoothing),
        optimizer=lambda: kseq.optimizers.FusedAdam(schedule, beta_2=0.98, epsilon=1e-9,
                                                   global_clipnorm=options.clipnorm))
    with run.strategy.scope():
        model.optimizer.build(model.trainable_variables)
    compiles = model.jit_compile or run.jit.compiled_blocks
    cache = f"; compiled programs cached in {run.xla_cache}" if compiles else ""
    print(f"model: {options.arch}, {model.count_params():,} parameters\n{run.decisions(model)[-1]}{cache}")
    return model, schedule, rate


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
        before = run.phases.once("pretrained_test", lambda: pretrained_scores(run, model, tokenizers, data["test"],
                                                                              decode_xla))
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
                      decisions=[*decided, rate], examples="pairs", batches=report.describe_batches(), save=False)
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
