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

import dataclasses
import os
import string
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402

import kseq  # noqa: E402
from kseq.data.character_tokenizer import CharacterTokenizer  # noqa: E402
from kseq.data.synthetic import reversed_words  # noqa: E402
from kseq.data.text_pairs import text_pair_dataset  # noqa: E402
from kseq.export import export_translator  # noqa: E402
from kseq.training import options as opts, recipe  # noqa: E402
from kseq.training.cadenced_fit import Trained  # noqa: E402
from kseq.training.callbacks import GenerationMonitor  # noqa: E402
from kseq.training.decisions import as_hparams, as_metrics  # noqa: E402
from kseq.training.evaluation import exact_match  # noqa: E402
from kseq.training.options import option  # noqa: E402
from kseq.training.seq2seq_options import ATTENTIONS  # noqa: E402
from kseq.training.tensorboard import write_hparams  # noqa: E402
from kseq.training.xla import decide_jit_compile  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Options(opts.RecipeOptions):
    ARCHITECTURE = ("arch", "attention", "cell")

    arch: str = option("transformer", "model", choices=("transformer", "rnn"))
    attention: str = option("bahdanau", "the RNN's attention", choices=ATTENTIONS)
    cell: str = option("gru", "the RNN's cell", choices=("rnn", "lstm", "gru"))
    train_examples: int = option(40000, "training words", minimum=1)
    valid_examples: int = option(500, "validation (and test) words", minimum=1)
    min_length: int = option(4, "letters per word at least", minimum=1)
    max_length: int = option(12, "letters per word at most", minimum=1)
    batch_size: int = option(64, "words per batch", minimum=1)
    epochs: int = option(3, "epochs", minimum=1)
    learning_rate: float = option(2e-3, "Adam's learning rate")
    logdir: str = option("runs/reverse", "TensorBoard logs and metrics.json")
    export_dir: str = option("savedmodels/reverse", "the SavedModel goes to <export-dir>/<next version>/")


def parse_args(argv=None):
    return opts.parse(Options, argv, doc=__doc__)


def main(argv=None):
    options = parse_args(argv)
    xla = decide_jit_compile(options.jit_compile, num_shapes=options.max_length)
    run = recipe.start(options, xla=xla.use)
    tokenizer = CharacterTokenizer(string.ascii_lowercase)
    train_pairs, valid_pairs = words(options, options.train_examples, 1), words(options, options.valid_examples, 2)
    train_data = text_pair_dataset(*train_pairs, tokenizer, tokenizer, options.batch_size, shuffle=True,
                                   seed=options.seed)
    valid_data = text_pair_dataset(*valid_pairs, tokenizer, tokenizer, options.batch_size)
    inputs, labels = next(iter(train_data))
    print({name: tuple(value.shape) for name, value in inputs.items()}, "labels", tuple(labels.shape))
    trained = train(options, run, tokenizer, train_data, valid_data, valid_pairs, xla)
    recipe.keep_trained(options, trained.model)
    test_words, test_targets = words(options, options.valid_examples, 3)
    metrics = recipe.write_metrics(options.logdir, {
        "test_exact_match": exact_match(translator(trained.model, tokenizer, options)(test_words), test_targets),
        **trained.metrics, "epochs": options.epochs, **as_metrics(trained.decisions),
    }, scores=("test_exact_match",))
    print(metrics)
    path = export_translator(trained.model, tokenizer, tokenizer, options.export_dir,
                             max_length=options.max_length + 1)
    recipe.serve_sample(path, {"source": ["keras", "sequence"]})
    print(f"TensorBoard: tensorboard --logdir {options.logdir}")
    return metrics


def words(options, count, seed):
    """(`count` random words, the same words reversed); `seed` sets each split apart."""
    return reversed_words(count, min_length=options.min_length, max_length=options.max_length,
                          seed=options.seed + seed)


def build_model(options, vocab_size, precision="float32"):
    if options.arch == "transformer":
        return kseq.models.TransformerSeq2Seq(
            vocab_size, vocab_size, num_layers=2, d_model=64, num_heads=4, ff_dim=128,
            dropout=0.0, max_length=64, dtype=precision,
        )
    attention = None if options.attention == "none" else options.attention
    return kseq.models.RNNSeq2Seq(
        vocab_size, vocab_size, embed_dim=32, units=128, cell=options.cell, attention=attention,
        dtype=precision,
    )


def translator(model, tokenizer, options):
    """words -> the model's greedy reversals."""
    def translate(texts):
        generated = model.generate(tokenizer.tokenize(texts).to_tensor(), max_length=options.max_length + 1)
        return [t.decode() for t in tokenizer.detokenize(generated).numpy()]

    return translate


def train(options, run, tokenizer, train_data, valid_data, valid_pairs, xla):
    """Fits for `--epochs`, scoring exact match on the validation words after each."""
    with run.strategy.scope():
        model = build_model(options, tokenizer.vocab_size, run.precision.policy)
        recipe.compile_model(
            model, kseq.optimizers.FusedAdam(options.learning_rate, clipnorm=1.0),
            kseq.losses.MaskedSparseCategoricalCrossentropy(),
            [kseq.metrics.MaskedAccuracy(), kseq.metrics.Perplexity()], jit_compile=xla.use,
            accumulate=options.accumulate, init_from=options.init_from,
        )
    monitor = GenerationMonitor(*valid_pairs, translator(model, tokenizer, options),
                                {"exact_match": exact_match}, logdir=options.logdir)
    write_hparams(options.logdir, options.as_hparams() | as_hparams(run.decisions(model, xla)))
    start = time.time()
    history = model.fit(train_data, validation_data=valid_data, epochs=options.epochs, verbose=2, shuffle=False,
                        callbacks=[monitor, keras.callbacks.TensorBoard(options.logdir, profile_batch=options.profile_batch)]).history
    return Trained(model, run.decisions(model, xla), {
        "valid_loss": float(history["val_loss"][-1]),
        "valid_losses": [float(value) for value in history["val_loss"]],
        "valid_exact_match": monitor.history[-1]["exact_match"],
        "train_seconds": round(time.time() - start, 1),
    })


if __name__ == "__main__":
    main()
