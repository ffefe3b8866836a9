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

import string

import kseq
from kseq.data.character_tokenizer import CharacterTokenizer
from kseq.data.synthetic import reversed_words
from kseq.data.text_pairs import text_pair_dataset
from kseq.export import export_translator
from kseq.training import task
from kseq.training.config import ATTENTIONS, CadenceOptions, ClippingOptions, option, options_parser, task_options
from kseq.training.devices import BLOCKS, decide_jit_compile
from kseq.training.loop import GenerationMonitor
from kseq.training.scoring import exact_match

# The positions of the task's Transformer.
TRANSFORMER_LENGTH = 64


@task_options("reverse", epochs=3)
class Options(CadenceOptions, ClippingOptions):
    ARCHITECTURE = ("arch", "attention", "cell")

    arch: str = option("transformer", "model", choices=("transformer", "rnn"))
    attention: str = option("bahdanau", "the RNN's attention", choices=ATTENTIONS, needs={"arch": "rnn"})
    cell: str = option("gru", "the RNN's cell", choices=("rnn", "lstm", "gru"), needs={"arch": "rnn"})
    train_examples: int = option(40000, "training words", minimum=1)
    valid_examples: int = option(500, "validation (and test) words", minimum=1)
    min_length: int = option(4, "letters per word at least", minimum=1)
    # A word after the decoder's BOS (before its EOS) fits the Transformer's positions.
    max_length: int = option(12, "letters per word at most", minimum=1, maximum=TRANSFORMER_LENGTH - 1)
    batch_size: int = option(64, "words per batch", minimum=1)
    learning_rate: float = option(2e-3, "Adam's learning rate", above=0)

    def problems(self):
        shorter = self.max_length < self.min_length
        return super().problems() + ([f"--max-length {self.max_length}: under --min-length {self.min_length}: "
                                      "expected at least as many letters"] if shorter else [])

    @property
    def without_transformer_blocks(self):
        return None if self.arch == "transformer" else "--arch rnn builds none"


parse_args = options_parser(Options, __doc__)


def main(argv=None):
    """Trains, tests and exports the word reverser.

    The epoch of the lowest validation loss is kept; new random words test it.

    Args:
        argv: `kseq-train reverse`'s arguments, e.g. ["--arch", "rnn", "--attention", "bahdanau"];
            None (default) reads the command line.

    Returns:
        The metrics written to `<logdir>/metrics.json`, test exact match among them.
    """
    options = parse_args(argv)
    task.name_xla_cache(options)  # before the first device query
    run = task.start(options, decide_jit_compile(options.jit_compile, num_shapes=options.max_length))
    fit = run.make_fit(monitor="val_loss")
    tokenizer = CharacterTokenizer(string.ascii_lowercase)
    train_pairs, valid_pairs = words(options, options.train_examples, 1), words(options, options.valid_examples, 2)
    data = {"train": text_pair_dataset(*train_pairs, tokenizer, tokenizer, options.batch_size, shuffle=True,
                                       seed=options.seed, position=fit.position, epochs=options.epochs),
            "valid": text_pair_dataset(*valid_pairs, tokenizer, tokenizer, options.batch_size)}
    inputs, labels = next(iter(data["train"]))
    print({name: tuple(value.shape) for name, value in inputs.items()}, "labels", tuple(labels.shape))

    def build():
        return run.compile(lambda: build_model(options, tokenizer.vocab_size, run.precision.policy),
                           [kseq.metrics.MaskedAccuracy(), kseq.metrics.Perplexity()])

    def train():
        model = build()
        monitor = GenerationMonitor(*valid_pairs, translator(model, tokenizer, options),
                                    {"exact_match": exact_match}, logdir=options.logdir)
        # The epoch of the lowest validation loss is kept, its exact match with it.
        return run.fit(fit, model, data["train"], data["valid"], [monitor], save=False)

    trained = run.train_once("trained", fit, train, build)
    test_words, test_targets = words(options, options.valid_examples, 3)
    metrics = run.write_metrics({
        "test_exact_match": exact_match(translator(trained.model, tokenizer, options)(test_words), test_targets),
        **trained.metrics, "epochs": options.epochs,
    }, scores=("test_exact_match",))
    print(metrics)
    run.export(lambda: export_translator(trained.model, tokenizer, tokenizer, options.export_dir,
                                         max_length=options.max_length + 1), {"source": ["keras", "sequence"]})
    run.done()
    return metrics


def words(options, count, seed):
    """Generates a split's words and their reversals.

    Args:
        options: the task's options (--min-length, --max-length, --seed).
        count: how many words.
        seed: added to --seed, to set each split apart.

    Returns:
        (`count` random words, the same words reversed), two lists of strings.
    """
    return reversed_words(count, min_length=options.min_length, max_length=options.max_length,
                          seed=options.seed + seed)


def build_model(options, vocab_size, precision="float32"):
    """Makes the task's Transformer or RNN (`--arch`), unbuilt.

    Args:
        options: the task's options (--arch, --attention, --cell).
        vocab_size: V, for both source and target.
        precision: the dtype policy. Default "float32".

    Returns:
        A `TransformerSeq2Seq` (its blocks compiled with `--jit-compile
        blocks`) or `RNNSeq2Seq`.
    """
    if options.arch == "transformer":
        return kseq.models.TransformerSeq2Seq(
            vocab_size, vocab_size, num_layers=2, d_model=64, num_heads=4, ff_dim=128,
            dropout=0.0, max_length=TRANSFORMER_LENGTH, compiled_blocks=options.jit_compile == BLOCKS, dtype=precision,
        )
    attention = None if options.attention == "none" else options.attention
    return kseq.models.RNNSeq2Seq(
        vocab_size, vocab_size, embed_dim=32, units=128, cell=options.cell, attention=attention,
        dtype=precision,
    )


def translator(model, tokenizer, options):
    """Makes a function giving the model's greedy reversals of words.

    Args:
        model: the trained seq2seq model.
        tokenizer: the character tokenizer, for both sides.
        options: the task's options (--max-length).

    Returns:
        A function of a list of words giving a list of strings.
    """
    def translate(texts):
        generated = model.generate(tokenizer.tokenize(texts).to_tensor(), max_length=options.max_length + 1)
        return [t.decode() for t in tokenizer.detokenize(generated).numpy()]

    return translate
