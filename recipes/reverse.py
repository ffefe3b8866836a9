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

import os
import string
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import kseq  # noqa: E402
from kseq.data.character_tokenizer import CharacterTokenizer  # noqa: E402
from kseq.data.text_pairs import text_pair_dataset  # noqa: E402
from kseq.export import export_translator  # noqa: E402
from kseq.training import recipe  # noqa: E402
from kseq.training.callbacks import GenerationMonitor  # noqa: E402
from kseq.training.evaluation import exact_match  # noqa: E402
from kseq.training.xla import decide_jit_compile  # noqa: E402

DEFAULTS = dict(
    recipe.COMMON,
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
)
CHOICES = dict(arch=("transformer", "rnn"), attention=("none", "dot", "general", "concat", "bahdanau"),
               cell=("rnn", "lstm", "gru"))


def parse_args(argv=None):
    return recipe.parse_config(
        __doc__, DEFAULTS, argv, choices=CHOICES,
        positive=("train_examples", "valid_examples", "batch_size", "epochs"),
    )


def random_words(count, config, seed):
    rng = np.random.default_rng(seed)
    letters = np.array(list(string.ascii_lowercase))
    lengths = rng.integers(config["min_length"], config["max_length"] + 1, count)
    return ["".join(rng.choice(letters, n)) for n in lengths]


def build_model(config, vocab_size, precision="float32"):
    if config["arch"] == "transformer":
        return kseq.models.TransformerSeq2Seq(
            vocab_size, vocab_size, num_layers=2, d_model=64, num_heads=4, ff_dim=128,
            dropout=0.0, max_length=64, dtype=precision,
        )
    attention = None if config["attention"] == "none" else config["attention"]
    return kseq.models.RNNSeq2Seq(
        vocab_size, vocab_size, embed_dim=32, units=128, cell=config["cell"], attention=attention,
        dtype=precision,
    )


def main(argv=None):
    config = parse_args(argv)
    run = recipe.start(config, xla=decide_jit_compile(config["jit_compile"], num_shapes=config["max_length"]).use)
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

    with run.strategy.scope():
        model = build_model(config, tokenizer.vocab_size, run.precision.policy)
        recipe.compile_model(
            model, kseq.optimizers.FusedAdam(config["learning_rate"], clipnorm=1.0),
            kseq.losses.MaskedSparseCategoricalCrossentropy(),
            [kseq.metrics.MaskedAccuracy(), kseq.metrics.Perplexity()],
            jit_compile=decide_jit_compile(config["jit_compile"], num_shapes=config["max_length"]).use,
        )

    def translate(words):
        ids = tokenizer.tokenize(words).to_tensor()
        generated = model.generate(ids, max_length=config["max_length"] + 1)
        return [t.decode() for t in tokenizer.detokenize(generated).numpy()]

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
    metrics = recipe.write_metrics(config["logdir"], {
        "test_exact_match": exact_match(translate(test_words), reverse(test_words)),
        "valid_loss": float(history.history["val_loss"][-1]),
        "valid_losses": [float(value) for value in history.history["val_loss"]],
        "valid_exact_match": monitor.history[-1]["exact_match"],
        "train_seconds": round(train_seconds, 1),
        "epochs": config["epochs"],
        **run.precision.as_dict(),
    })
    print(metrics)

    path = export_translator(model, tokenizer, tokenizer, config["export_dir"], max_length=config["max_length"] + 1)
    recipe.serve_sample(path, {"source": ["keras", "sequence"]})
    print(f"TensorBoard: tensorboard --logdir {config['logdir']}")
    return metrics


if __name__ == "__main__":
    main()
