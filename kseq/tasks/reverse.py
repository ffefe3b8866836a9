"""Train a sequence-to-sequence model to reverse strings, then export it.

The task is generated: random lowercase words of 4-12 letters, the target
is the word reversed (26 letters + 4 special ids = a 30-id vocabulary). It
exercises the whole road: tokenizer in the graph, tf.data, `model.fit`
under a tf.distribute strategy, TensorBoard, greedy decoding and a
SavedModel that maps strings to strings.

Time on 2 CPU cores: about 2-4 minutes with the defaults.

    kseq-train reverse                       # Transformer
    kseq-train reverse --arch rnn --attention bahdanau --cell gru
    tensorboard --logdir runs/reverse
"""

import dataclasses
import string

import keras

import kseq
from kseq.data.character_tokenizer import CharacterTokenizer
from kseq.data.synthetic import reversed_words
from kseq.data.text_pairs import text_pair_dataset
from kseq.export import export_translator
from kseq.training import recipe
from kseq.training.checkpoints import Phases
from kseq.training.config import (
    ATTENTIONS,
    ClippingOptions,
    EpochCadenceOptions,
    option,
)
from kseq.training.config import options as opts
from kseq.training.devices import decide_jit_compile
from kseq.training.loop import Fit, GenerationMonitor, Trained, train_once
from kseq.training.reporting import as_hparams, write_hparams
from kseq.training.scoring import exact_match


@dataclasses.dataclass(frozen=True)
class Options(EpochCadenceOptions, ClippingOptions):
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
    phases = Phases(run.workdir)
    fit = Fit(run.workdir, monitor="val_loss", **options.fit_cadence)
    tokenizer = CharacterTokenizer(string.ascii_lowercase)
    train_pairs, valid_pairs = words(options, options.train_examples, 1), words(options, options.valid_examples, 2)
    data = {"train": text_pair_dataset(*train_pairs, tokenizer, tokenizer, options.batch_size, shuffle=True,
                                       seed=options.seed, position=fit.position, epochs=options.epochs),
            "valid": text_pair_dataset(*valid_pairs, tokenizer, tokenizer, options.batch_size)}
    inputs, labels = next(iter(data["train"]))
    print({name: tuple(value.shape) for name, value in inputs.items()}, "labels", tuple(labels.shape))
    build = lambda: compiled_model(options, run, tokenizer, xla)  # noqa: E731
    trained = train_once(phases, "trained", fit,
                         lambda: train(options, run, tokenizer, data, valid_pairs, xla, build, fit), options, build)
    test_words, test_targets = words(options, options.valid_examples, 3)
    metrics = recipe.write_metrics(options.logdir, {
        "test_exact_match": exact_match(translator(trained.model, tokenizer, options)(test_words), test_targets),
        **trained.metrics, "epochs": options.epochs,
    }, scores=("test_exact_match",))
    print(metrics)
    path = phases.once("export", lambda: export_translator(trained.model, tokenizer, tokenizer, options.export_dir,
                                                          max_length=options.max_length + 1))
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


def compiled_model(options, run, tokenizer, xla):
    with run.strategy.scope():
        model = build_model(options, tokenizer.vocab_size, run.precision.policy)
        model.build()  # variables before fit: a resumed run restores them
        return recipe.compile_model(
            model, kseq.optimizers.FusedAdam(options.learning_rate, global_clipnorm=options.clipnorm),
            kseq.losses.MaskedSparseCategoricalCrossentropy(),
            [kseq.metrics.MaskedAccuracy(), kseq.metrics.Perplexity()], jit_compile=xla.use,
            accumulate=options.accumulate, init_from=options.init_from,
        )


def train(options, run, tokenizer, data, valid_pairs, xla, build, fit):
    """Fits for `--epochs`, scoring exact match on the validation words after
    each; the epoch of the lowest validation loss is kept."""
    model = build()
    monitor = GenerationMonitor(*valid_pairs, translator(model, tokenizer, options),
                                {"exact_match": exact_match}, logdir=options.logdir)
    decisions = run.decisions(model, xla)
    if not fit.resuming:  # a resumed run's curves continue the first run's
        write_hparams(options.logdir, options.as_hparams() | as_hparams(decisions))
    tensorboard = keras.callbacks.TensorBoard(options.logdir, profile_batch=options.profile_batch)
    metrics = fit.fit(model, data["train"], data["valid"], options.epochs, [monitor, tensorboard])
    return Trained(model, decisions, metrics)  # valid_exact_match: the kept epoch's

