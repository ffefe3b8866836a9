"""Train a sequence-to-sequence model to reverse strings, then export it.

The task is generated: random lowercase words of 4-12 letters, the target
is the word reversed (26 letters + 4 special ids = a 30-id vocabulary). It
exercises the whole road: tokenizer in the graph, tf.data, `model.fit`
under a tf.distribute strategy, TensorBoard, greedy decoding and a
SavedModel that maps strings to strings.

Time on 2 CPU cores: about 2-4 minutes with the defaults.

    python recipes/reverse.py                       # Transformer
    python recipes/reverse.py --arch rnn --attention bahdanau --cell gru
    tensorboard --logdir runs/reverse
"""

import argparse
import json
import os
import string
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import kseq  # noqa: E402
from kseq.training.distribution import clip_after_all_reduce  # noqa: E402
from kseq.training.recipe import check_paths  # noqa: E402
from kseq.training.callbacks import GenerationMonitor  # noqa: E402
from kseq.data.character_tokenizer import CharacterTokenizer  # noqa: E402
from kseq.data.text_pairs import text_pair_dataset  # noqa: E402
from kseq.export import export_translator  # noqa: E402

CONFIG = dict(
    arch="transformer",
    attention="bahdanau",  # --arch rnn only
    cell="gru",  # --arch rnn only
    train_examples=40000,
    valid_examples=500,
    min_length=4,
    max_length=12,
    batch_size=64,
    epochs=3,
    learning_rate=2e-3,
    logdir="runs/reverse",
    export_dir="savedmodels/reverse",
    strategy="mirrored",
    seed=0,
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arch", choices=["transformer", "rnn"])
    parser.add_argument("--attention", choices=["none", "dot", "general", "concat", "bahdanau"])
    parser.add_argument("--cell", choices=["rnn", "lstm", "gru"])
    parser.add_argument("--train-examples", type=int)
    parser.add_argument("--valid-examples", type=int)
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--learning-rate", type=float)
    parser.add_argument("--logdir")
    parser.add_argument("--export-dir")
    parser.add_argument("--strategy", choices=["mirrored", "default"])
    parser.add_argument("--seed", type=int)
    args = parser.parse_args(argv)
    config = dict(CONFIG)
    config.update({k: v for k, v in vars(args).items() if v is not None})
    for name in ("train_examples", "valid_examples", "batch_size", "epochs"):
        if config[name] < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    check_paths(parser, config, files=())
    return config


def random_words(count, config, seed):
    rng = np.random.default_rng(seed)
    letters = np.array(list(string.ascii_lowercase))
    lengths = rng.integers(config["min_length"], config["max_length"] + 1, count)
    return ["".join(rng.choice(letters, n)) for n in lengths]


def build_model(config, vocab_size):
    if config["arch"] == "transformer":
        return kseq.models.TransformerSeq2Seq(
            vocab_size, vocab_size, num_layers=2, d_model=64, num_heads=4, ff_dim=128,
            dropout=0.0, max_length=64,
        )
    attention = None if config["attention"] == "none" else config["attention"]
    return kseq.models.RNNSeq2Seq(
        vocab_size, vocab_size, embed_dim=32, units=128, cell=config["cell"], attention=attention
    )


def exact_match(hypotheses, references):
    return float(np.mean([h == r for h, r in zip(hypotheses, references)]))


def main(argv=None):
    config = parse_args(argv)
    keras.utils.set_random_seed(config["seed"])
    tokenizer = CharacterTokenizer(string.ascii_lowercase)
    train_words = random_words(config["train_examples"], config, config["seed"] + 1)
    valid_words = random_words(config["valid_examples"], config, config["seed"] + 2)
    reverse = lambda words: [w[::-1] for w in words]  # noqa: E731
    train = text_pair_dataset(
        train_words, reverse(train_words), tokenizer, tokenizer, config["batch_size"],
        shuffle=True, seed=config["seed"],
    )
    valid = text_pair_dataset(
        valid_words, reverse(valid_words), tokenizer, tokenizer, config["batch_size"]
    )
    inputs, labels = next(iter(train))
    print({name: tuple(value.shape) for name, value in inputs.items()}, "labels", tuple(labels.shape))

    strategy = (
        tf.distribute.MirroredStrategy()
        if config["strategy"] == "mirrored"
        else tf.distribute.get_strategy()
    )
    print(f"strategy: {type(strategy).__name__} with {strategy.num_replicas_in_sync} replica(s)")
    with strategy.scope():
        model = build_model(config, tokenizer.vocab_size)
        model.compile(
            optimizer=clip_after_all_reduce(keras.optimizers.Adam(config["learning_rate"], clipnorm=1.0)),
            loss=kseq.losses.MaskedSparseCategoricalCrossentropy(),
            metrics=[kseq.metrics.MaskedAccuracy(), kseq.metrics.Perplexity()],
            jit_compile=config["arch"] == "transformer",
        )

    def translate(words):
        ids = tokenizer.tokenize(words).to_tensor()
        return tokenizer.detokenize(model.generate(ids, max_length=config["max_length"] + 1))

    monitor = GenerationMonitor(
        valid_words, reverse(valid_words), translate, {"exact_match": exact_match},
        logdir=config["logdir"],
    )
    callbacks = [monitor, keras.callbacks.TensorBoard(config["logdir"])]
    start = time.time()
    history = model.fit(
        train, validation_data=valid, epochs=config["epochs"], callbacks=callbacks, verbose=2,
        shuffle=False,  # the dataset shuffles itself
    )
    train_seconds = time.time() - start

    test_words = random_words(config["valid_examples"], config, config["seed"] + 3)
    metrics = {
        "test_exact_match": exact_match([t.decode() for t in translate(test_words).numpy()], reverse(test_words)),
        "valid_loss": float(history.history["val_loss"][-1]),
        "valid_exact_match": monitor.history[-1]["exact_match"],
        "train_seconds": round(train_seconds, 1),
        "epochs": config["epochs"],
    }
    os.makedirs(config["logdir"], exist_ok=True)
    with open(os.path.join(config["logdir"], "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
    print(json.dumps(metrics, indent=2))

    path = export_translator(model, tokenizer, tokenizer, config["export_dir"], max_length=config["max_length"] + 1)
    served = tf.saved_model.load(path).signatures["serving_default"]
    sample = served(source=tf.constant(["keras", "sequence"]))["translation"].numpy()
    print(f"exported {path}: 'keras' -> {sample[0].decode()!r}, 'sequence' -> {sample[1].decode()!r}")
    print(f"TensorBoard: tensorboard --logdir {config['logdir']}")
    return metrics


if __name__ == "__main__":
    main()
