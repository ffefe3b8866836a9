"""Train a translator with model.fit, choose its decoding, test it and export it for TF Serving.

Default data: English -> French Bible verses (kseq.data.bible); or your pairs: --train-tsv FILES
(lines `source<TAB>target`: a file, a glob or several joined by commas, plain or gzip), streamed
from disk whatever their size, --valid-tsv, --test-tsv. Every "auto" is decided from the data or
the device, printed with its reason and written to metrics.json and HParams (README, "Translation").
The same command continues a killed run from its last save.

    kseq-train translate                        # quick: 2 CPU cores, 12 minutes of training
    kseq-train translate --arch rnn --attention bahdanau --cell gru
    kseq-train translate --train-tsv my_pairs.tsv --epochs 5
    kseq-train translate --train-tsv 'corpus/*.tsv.gz' --valid-tsv dev.tsv --max-minutes 600
    tensorboard --logdir runs/
"""

import dataclasses
import importlib.util
import json
import os
import shutil
import time

import keras

import kseq
from kseq.data.bucketing import bucketed_pair_dataset, xla_boundaries
from kseq.data.corpus import HoldOut, corpus_files, scan_corpus
from kseq.data.streaming import estimate_epoch, streamed_pair_dataset
from kseq.decoding import GreedySearch
from kseq.export import export_ctranslate2, export_translator
from kseq.export.compute_dtype import in_compute_dtype
from kseq.training import recipe
from kseq.training.checkpoints import Phases, ResumableBackup
from kseq.training.config import (
    AUTO,
    OPTIONS_FILE,
    TRAINED_WEIGHTS,
    Auto,
    ClippingOptions,
    Seq2SeqOptions,
    StreamedDataOptions,
    choose_model_size,
    option,
)
from kseq.training.config import options as opts
from kseq.training.devices import (
    check_replicas,
    decide_for_recipe,
    device_class,
    distribute_batches,
    weights_fingerprint,
    worker_batches,
    workers,
)
from kseq.training.loop import (
    AttentionMaps,
    CadenceOptions,
    Fit,
    GenerationMonitor,
    StepTensorBoard,
    StoppingOptions,
    Trained,
)
from kseq.training.objectives import recipe_learning_rate
from kseq.training.reporting import (
    Decision,
    as_hparams,
    as_metrics,
    write_hparams,
    write_model_graph,
)
from kseq.training.scoring import (
    DecodingOptions,
    DecodingSettings,
    all_scores,
    choose_metric,
    keep_better_average,
    model_translator,
    name_alignment,
    write_test_report,
)
from kseq.training.scoring import choose_decoding as select_decoding

# Validation pairs held out of --train-tsv when no --valid-tsv is given: each is evaluated every period.
HOLD_OUT_LIMIT = 3000

PRESETS = {
    # The defaults below, for 2 CPU cores and 12 minutes: small batches (more updates) and no
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


@dataclasses.dataclass(frozen=True)
class Options(Seq2SeqOptions, DecodingOptions, StoppingOptions, CadenceOptions, StreamedDataOptions, ClippingOptions,
              opts.TextRecipeOptions):
    train_tsv: str | None = option(None, "training pairs, source<TAB>target: a file, a glob or several joined by "
                                   "commas, plain or gzip (default: the Bible)", files=True)
    valid_tsv: str | None = option(None, "validation pairs (default: every 50th training line, at most "
                                   f"{HOLD_OUT_LIMIT:,})", files=True)
    test_tsv: str | None = option(None, "test pairs (default: the validation pairs)", files=True)
    vocab_size: int | Auto = option(AUTO, "joint SentencePiece pieces; auto: from the data", minimum=1)
    max_vocab_size: int = option(4000, "the most pieces auto may choose", minimum=1)
    token_budget: int = option(2560, "target tokens per batch (shared by the workers of --strategy multiworker)",
                               minimum=1)
    max_length: int = option(96, "tokens per sentence; longer pairs are left out of training", minimum=1)
    epochs: int = option(1000, "passes over the training pairs at most", minimum=1)
    max_minutes: float | None = option(12.0, "training budget in minutes")
    warmup_steps: int = option(400, "the Transformer schedule's warm-up", minimum=1)
    learning_rate: float | None = option(None, "a constant rate instead of the schedule")
    lr_scale: float | Auto = option(AUTO, "times the schedule; auto: half for exact-match data")
    label_smoothing: float = option(0.1, "label smoothing of the loss")
    attention_plots: int = option(3, "attention maps logged at each evaluation", minimum=0)
    max_test_sentences: int | None = option(None, "test only the first N pairs")
    export_xla: bool = option(False, "compile the exported search with XLA")
    export_ctranslate2: str | None = option(None, "also write a CTranslate2 model of the Transformer to "
                                            "<dir>/<next version>/ (pip install 'kseq[ctranslate2]')")
    logdir: str = option("runs/translate", "TensorBoard logs, metrics.json, checkpoints and backup")
    export_dir: str = option("savedmodels/translate", "the SavedModel goes to <export-dir>/<next version>/")

    def problems(self):
        return super().problems() + [message for broken, message in (
            (self.token_budget < self.max_length, "--token-budget must be >= --max-length"),
            (self.lr_scale != AUTO and not self.lr_scale > 0, "--lr-scale must be auto or > 0"),
            (self.learning_rate is not None and not self.learning_rate > 0, "--learning-rate must be > 0"),
            (self.export_ctranslate2 and self.arch != "transformer",
             "--export-ctranslate2 needs --arch transformer: a recurrent model has no CTranslate2 form"),
            (self.export_ctranslate2 and importlib.util.find_spec("ctranslate2") is None,
             "--export-ctranslate2 needs ctranslate2: pip install 'kseq[ctranslate2]'"),
        ) if broken]


def parse_args(argv=None):
    return opts.parse(Options, argv, doc=__doc__, presets=PRESETS)


def main(argv=None):
    options = parse_args(argv)
    xla = decide_for_recipe(options.jit_compile, options.max_length, options.max_minutes, options.arch)
    # Decoding is compiled on a GPU; a CPU with bfloat16 units trains the
    # Transformer 1.5x faster under mixed_bfloat16 (benchmarks/training.py), not the RNN.
    run = recipe.start(options, xla=xla.use or device_class() == "gpu", bfloat16_cpu=options.bfloat16_cpu)
    xla = check_replicas(xla, run.strategy)
    phases = Phases(run.workdir)
    resuming = ResumableBackup.saved_state(os.path.join(run.workdir, "backup"))
    data = load_data(options)
    corpus = data["train"]
    tokenizer = recipe.resumable_tokenizer(options, corpus.sample[0] + corpus.sample[1], run.workdir,
                                           resuming or phases.get("trained"), cache=corpus.folder)
    metric = Decision("metric", *choose_metric(data["valid"][1], options.metric))
    sizes, model_size = choose_model_size(options, lengths(tokenizer, corpus.sample[1]), metric.value,
                                          pairs=corpus.pairs)
    options = dataclasses.replace(options, **sizes)
    print(f"{metric}\n{model_size}")
    if phases.get("trained"):
        trained = trained_before(options, run, tokenizer, xla, metric.value, phases.get("trained"))
    else:
        trained = train(options, run, data, tokenizer, xla, resuming, [metric, model_size], phases)
    if not run.chief:
        return trained
    after_training = run.seconds
    decoding = phases.once("decoding", lambda: choose_decoding(options, trained, tokenizer, data["valid"],
                                                                 metric.value))
    search = DecodingSettings(**decoding["settings"]).search(options.max_length)
    served = in_compute_dtype(trained.model)  # the weights the export serves: the test scores them
    tested = phases.once("test", lambda: evaluate(options, served, trained.decode_xla, tokenizer, data["test"],
                                                  search))
    if options.has_attention:
        aligned = phases.once("alignment", lambda: probe_alignment(options, trained, tokenizer, data["test"]))
        tested = {**tested, **aligned}
    training = phases.get("trained")  # this run's, or the one before a restart's
    wall = training["wall_seconds"] + run.seconds - after_training
    metrics = {**tested, **training["metrics"], **decoding["metrics"], "vocab_size": tokenizer.vocab_size,
               "wall_seconds": round(wall, 1)}
    metrics["train_step_share"] = round(metrics["train_step_seconds"] / metrics["wall_seconds"], 3)
    recipe.write_metrics(options.logdir, metrics, scores=("test_bleu", "test_chrf", "test_exact_match"))
    export = phases.once("export", lambda: {"path": export_translator(
        served, tokenizer, tokenizer, options.export_dir, search=search, max_source_length=options.max_length,
        assets=recipe.tokenizer_files(tokenizer), jit_compile=options.export_xla)})
    recipe.serve_sample(export["path"], {"source": data["test"][0][:1]})
    if options.export_ctranslate2:
        converted = phases.once("export_ctranslate2", lambda: {"path": export_ctranslate2(
            trained.model, tokenizer, tokenizer, options.export_ctranslate2, assets=recipe.tokenizer_files(tokenizer))})
        print(f"CTranslate2 model: {converted['path']}")
    print(f"train steps took {metrics['train_step_share']:.0%} of {metrics['wall_seconds']:.0f} s of wall time")
    print(f"TensorBoard: tensorboard --logdir {options.logdir}")
    return metrics


def trained_model(logdir, dtype=None):
    """(model, tokenizer) of a translate run whose training finished: the
    weights, options and tokenizer it kept in `logdir` (as `--init-from`
    reads them), to export again, e.g. with `kseq.export.export_ctranslate2`.
    `dtype`: the model's dtype policy (default: keras' global one), e.g.
    "mixed_bfloat16" as the run's export computes on a CPU with bfloat16 units."""
    from kseq.data.tokenizers import load_tokenizer

    missing = [name for name in (OPTIONS_FILE, TRAINED_WEIGHTS) if not os.path.isfile(os.path.join(logdir, name))]
    if missing:
        raise ValueError(f"{logdir} holds no finished translate run (no {' or '.join(missing)}; a run writes them "
                         "when its training ends).")
    with open(os.path.join(logdir, OPTIONS_FILE), encoding="utf-8") as f:
        saved = json.load(f)
    if saved.get("recipe") != "translate":
        raise ValueError(f"{logdir} holds a run of recipe {saved.get('recipe')!r}, not 'translate'.")
    options = Options(**{field.name: saved[field.name] for field in dataclasses.fields(Options)
                         if field.name in saved})
    files = [os.path.join(logdir, name) for name in ("spm.model", "tokenizer.json")]
    tokenizer = load_tokenizer(next(path for path in files if os.path.isfile(path)))
    model = options.build(tokenizer.vocab_size, options.max_length + 1, dtype=dtype)
    model.build()
    model.load_weights(os.path.join(logdir, TRAINED_WEIGHTS))
    return model, tokenizer


def load_data(options):
    """{"train": the training corpus, scanned once (`kseq.data.corpus.CorpusScan`: its
    files, their bad lines, a sample), "valid" and "test": (sources, targets)}, from
    the TSV files or the default corpus."""
    hold_out = None
    if options.train_tsv:
        files = corpus_files(options.train_tsv, "--train-tsv")
        hold_out = None if options.valid_tsv else HoldOut(every=50, limit=HOLD_OUT_LIMIT)
    else:
        from kseq.data.bible import bible_split_file, load_bible_pairs

        files = [bible_split_file("train")]
    start = time.time()
    corpus = scan_corpus(files, options.vocab_sample, options.seed, hold_out)
    print(f"train: {corpus.pairs:,} pairs in {len(files)} file(s), {corpus.lines:,} lines; a sample of "
          f"{len(corpus.sample[0]):,} for the vocabulary ({time.time() - start:.0f} s)")
    if corpus.bad:
        print(f"train: {corpus.describe_problems()}")
    if not options.train_tsv:
        valid, test = load_bible_pairs("valid"), load_bible_pairs("test")
    else:
        valid = recipe.read_tsv_reporting(options.valid_tsv, "valid") if options.valid_tsv else corpus.valid
        if not valid[0]:
            raise SystemExit(f"--train-tsv {options.train_tsv}: no good line to hold out for validation; "
                             "pass --valid-tsv")
        test = recipe.read_tsv_reporting(options.test_tsv, "test") if options.test_tsv else valid
    held = f" (every 50th training line, {corpus.held_out:,} held out)" if hold_out else ""
    print(f"valid: {len(valid[0]):,} pairs{held}\ntest: {len(test[0]):,} pairs")
    return {"train": corpus, "valid": valid, "test": test}


def lengths(tokenizer, texts):
    return tokenizer.tokenize(texts).row_lengths().numpy()


def compile_model(options, run, vocab_size, xla, metric):
    """(model, its learning-rate schedule, decisions): built and compiled under the strategy."""
    with run.strategy.scope():
        model = options.build(vocab_size, options.max_length + 1, dtype=run.precision.policy)  # + BOS
        model.build()  # variables under the strategy, before the graph is logged
        schedule, rate = recipe_learning_rate(options.arch, options.d_model, options.warmup_steps, metric,
                                              options.lr_scale, options.learning_rate)
        recipe.compile_model(
            model, kseq.optimizers.FusedAdam(schedule, beta_2=0.98, epsilon=1e-9,
                                            global_clipnorm=options.clipnorm),
            kseq.losses.MaskedSparseCategoricalCrossentropy(label_smoothing=options.label_smoothing),
            [kseq.metrics.MaskedAccuracy(), kseq.metrics.Perplexity()], jit_compile=xla.use,
            accumulate=options.accumulate, init_from=options.init_from)
        model.optimizer.build(model.trainable_variables)  # fit then traces one step, fresh or resumed
    decisions = [rate, *run.decisions(model, xla)]
    cache = f"; compiled programs cached in {run.xla_cache}" if decisions[-1].value else ""
    print(f"model: {options.arch}, {model.count_params():,} parameters\n{decisions[-1]}{cache}")
    return model, schedule, decisions


def pipelines(options, data, tokenizer, xla, strategy, position):
    """(train, valid, train report): the training pairs streamed from their
    files for all epochs from `position`, each worker its own share of the
    lines and of --token-budget; under XLA a few fixed shapes, remainders padded."""
    shapes = dict(max_length=options.max_length)
    if xla:
        shapes.update(boundaries=xla_boundaries(options.max_length), pad_remainder=True)
    count = workers(strategy)
    if options.token_budget // count < options.max_length:
        raise SystemExit(f"--token-budget {options.token_budget} shared by {count} workers leaves each less than "
                         f"--max-length {options.max_length}: raise it to {count * options.max_length} or more")

    def train_shard(shard):
        return streamed_pair_dataset(
            data["train"], tokenizer, tokenizer, position, token_budget=options.token_budget // count,
            shuffle_buffer=options.shuffle_buffer, seed=options.seed, epochs=options.epochs, shard=shard, **shapes)

    valid, valid_report = bucketed_pair_dataset(*data["valid"], tokenizer, tokenizer, shuffle=False,
                                                token_budget=options.token_budget, **shapes)
    train = worker_batches(strategy, train_shard)
    if options.strategy == "multiworker":
        valid = distribute_batches(strategy, valid)
    report = estimate_epoch(data["train"], tokenizer, tokenizer, token_budget=options.token_budget,
                            shuffle_buffer=options.shuffle_buffer, **shapes)
    print(f"train pipeline: {report}\nvalid pipeline: {valid_report}")
    return train, valid, report


def train(options, run, data, tokenizer, xla, resuming, decided, phases):
    """Fits the model until the validation score stops improving; keeps the
    best evaluation's weights, or the mean of recent snapshots where better;
    records the training as done in `phases` before its backup goes.
    `decided`: the decisions made so far, the metric first."""
    metric = decided[0]
    model, schedule, decisions = compile_model(options, run, tokenizer.vocab_size, xla, metric.value)
    decisions = decided + decisions
    decode_xla = xla.use or device_class() == "gpu"
    fit = Fit(run.workdir, options.cadence, options.save_every, options.max_minutes)
    train_data, valid, report = pipelines(options, data, tokenizer, decisions[-1].value, run.strategy, fit.position)
    monitor, logging = chief_callbacks(options, model, tokenizer, data["valid"], decode_xla) if run.chief else (None, [])
    if run.chief and not resuming:  # a resumed run's curves continue the first run's
        write_hparams(options.logdir, options.as_hparams() | as_hparams(decisions))
    keep_best = options.keep_best(os.path.join(run.workdir, "checkpoints"), metric.value, options.eval_sentences,
                                  schedule.factor)  # resumed with the backup
    recent = options.recent_weights()
    trained = fit.fit(model, train_data, valid, options.epochs, logging, [keep_best] + ([recent] if recent else []),
                      batches=report.describe_batches())
    averaging = keep_better_average(model, recent, valid_score(monitor, valid, keep_best.monitor), keep_best.mode)
    metrics = {**trained, "weights_sha256": weights_fingerprint(model), "batch_shapes": report.batch_shapes}
    print(f"averaging: {averaging}\ntrained {metrics['steps']} steps; weights sha256 {metrics['weights_sha256']}")
    print(f"this worker read {fit.position.pairs_read():,} training pairs from the files")
    if not run.chief:
        fit.release()
        return Trained(model, decisions, metrics)
    recipe.keep_trained(options, model)  # tested and exported; --init-from reads it
    ran = fit.history.history.get("val_loss", [])  # none in a run resumed after its last period
    metrics.update(valid_loss=float(ran[-1]) if ran else model_loss(model, valid),
                   valid_bleu=monitor.history[-1]["bleu"] if monitor.history else None,
                   best_weights=keep_best.report(), averaging=averaging, eval_every=str(options.cadence),
                   decode_xla=decode_xla)
    phases.record("trained", {"metrics": {**metrics, **as_metrics(decisions)}, "decode_xla": decode_xla,
                              "wall_seconds": run.seconds})
    fit.release()  # only now: a kill before the record resumes from the backup
    return Trained(model, decisions, metrics, decode_xla)


def trained_before(options, run, tokenizer, xla, metric, record):
    """The `Trained` of a run whose training ended before this process: the
    weights it kept (`keep_trained`) and what it recorded."""
    model, _, _ = compile_model(options, run, tokenizer.vocab_size, xla, metric)
    model.load_weights(os.path.join(options.logdir, TRAINED_WEIGHTS))
    shutil.rmtree(os.path.join(run.workdir, "backup"), ignore_errors=True)  # killed before its release
    print(f"training: done before this run; its weights from {os.path.join(options.logdir, TRAINED_WEIGHTS)}")
    return Trained(model, [], record["metrics"], record["decode_xla"])  # decisions: among the metrics


def model_loss(model, valid):
    return model.evaluate(valid, verbose=0, return_dict=True)["loss"]


def valid_score(monitor, valid, key):
    """model -> the stopping score on validation (for averaged snapshots)."""
    return (lambda m: model_loss(m, valid)) if key == "val_loss" else (lambda m: monitor.evaluate()[2]["exact_match"])


def chief_callbacks(options, model, tokenizer, valid, decode_xla):
    """(generation monitor, [the callbacks that log and checkpoint])."""
    # Traced in every run, resumed ones too: XLA's cache finds a program by
    # its function's name, which comes from a process-wide counter.
    write_model_graph(options.logdir, model)
    sources, references = (texts[: options.eval_sentences] for texts in valid)
    greedy = model_translator(model, tokenizer, options.max_length, GreedySearch(options.max_length), decode_xla,
                              options.decoding_seconds)
    monitor = GenerationMonitor(sources, references, greedy, all_scores, logdir=options.logdir)
    callbacks = [monitor, StepTensorBoard(options.logdir, profile_batch=options.profile_batch), keras.callbacks.ModelCheckpoint(
        os.path.join(options.logdir, "checkpoints", "last.weights.h5"), save_weights_only=True)]
    if options.has_attention and options.attention_plots:
        plotted = tokenizer.tokenize(sources[: options.attention_plots])[:, : options.max_length].to_tensor()
        callbacks.append(AttentionMaps(plotted, lambda ids: model.generate(ids, max_length=options.max_length),
                                       tokenizer.id_to_piece, options.logdir))
    return monitor, callbacks


def choose_decoding(options, trained, tokenizer, valid, metric):
    """{"settings": the DecodingSettings given, or those scoring best on
    validation pairs, as a dict; "metrics": the decision's metrics.json entries}."""
    source_lengths = [min(length, options.max_length) for length in lengths(tokenizer, valid[0])]
    settings, decision = select_decoding(
        options, source_lengths, lengths(tokenizer, valid[1]),
        lambda candidate: model_translator(trained.model, tokenizer, options.max_length,
                                           candidate.search(options.max_length), trained.decode_xla),
        valid, metric)
    print(decision)
    return {"settings": dataclasses.asdict(settings), "metrics": as_metrics([decision])}


def probe_alignment(options, trained, tokenizer, test):
    """{"name_alignment": ...}: how often attention finds the test pairs' copied names (kseq.training.scoring.alignment)."""
    try:
        found = name_alignment(trained.model, tokenizer, *test, options.max_length)
    except ValueError as error:  # user data may hold no such names
        print(f"name alignment: not measured ({error})")
        return {}
    print(f"name alignment: attention on the name for {found['attention']:.1%} of {found['name_pieces']} name pieces "
          f"in {found['pairs']} test pairs (the diagonal: {found['diagonal']:.1%})")
    return {"name_alignment": found}


def evaluate(options, model, decode_xla, tokenizer, test, search):
    """Test scores of `search`, through the export's translate function."""
    sources, references = (texts[: options.max_test_sentences] for texts in test)
    start = time.time()
    hypotheses = model_translator(model, tokenizer, options.max_length, search, decode_xla)(sources)
    return {**write_test_report(sources, hypotheses, references, options.logdir),
            "test_seconds": round(time.time() - start, 1)}

