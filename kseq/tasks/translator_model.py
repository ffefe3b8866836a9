"""The translator a `kseq-train translate` run trains: its tokenizers, size
and model, chosen from the data, or with `--pretrained FOLDER` a Marian
checkpoint's (its two tokenizers, size, weights and fine-tuning's learning
rate); compiled under the strategy. Also the pretrained model's test
scores before fine-tuning, and a fine-tuned run's model read back
(`kseq.tasks.translate.trained_model`)."""

import dataclasses
import json
import os

import kseq
from kseq._atomic import write_bytes_atomic
from kseq.data.marian_tokenizer import MarianTokenizer
from kseq.data.tokenizers import tokenizer_files
from kseq.errors import UsageError
from kseq.models import TransformerSeq2Seq
from kseq.pretrained import checkpoint_config, checkpoint_folder, load_marian, marian_tokenizers, read_marian_config
from kseq.training.config import TRAINED_WEIGHTS, choose_model_size
from kseq.training.objectives import fine_tuning_learning_rate, translation_learning_rate
from kseq.training.reporting import Decision
from kseq.training.scoring import DecodingSettings, model_translator, test_translations

# A run fine-tuned from --pretrained keeps the checkpoint's config.json under this name in its logdir.
PRETRAINED_CONFIG = "pretrained_config.json"
# The model size a --pretrained run reports: the checkpoint's.
PRETRAINED_SIZE = ("num_layers", "decoder_num_layers", "d_model", "num_heads", "ff_dim", "activation")
# How the pretrained model is tested before fine-tuning: OPUS-MT's 4 beams, with
# the tasks' own length penalty and stop (patience 1), before any choice on validation pairs.
PRETRAINED_DECODING = DecodingSettings(beam_size=4, length_penalty=0.6, no_repeat_ngram=0, max_ngram_count=1,
                                       max_length_ratio=None, patience=1.0)


@dataclasses.dataclass(frozen=True)
class Tokenizers:
    """A translator's tokenizers: one joint tokenizer (`source` is `target`),
    or a pretrained checkpoint's two (`kseq.data.marian_tokenizer.MarianTokenizer`)."""

    source: object
    target: object

    def files(self):
        """The files that rebuild both, for an export's assets/ folder."""
        return {**tokenizer_files(self.source), **tokenizer_files(self.target)}


def run_tokenizers(run, corpus, resuming):
    """The run's `Tokenizers`: one joint `run.tokenizer` trained on the corpus's sample, or the checkpoint's two."""
    if run.options.pretrained:
        return checkpoint_tokenizers(run)
    tokenizer = run.tokenizer(corpus.sample[0] + corpus.sample[1], resuming, cache=corpus.folder)
    return Tokenizers(tokenizer, tokenizer)


def size_model(run, tokenizers, corpus, metric):
    """Sets the model's size in `run.options` (`choose_model_size`, or the checkpoint's): its `Decision`."""
    if run.options.pretrained:
        return checkpoint_size(run)
    target_lengths = tokenizers.target.tokenize(corpus.sample[1]).row_lengths().numpy()
    sizes, model_size = choose_model_size(run.options, target_lengths, metric, pairs=corpus.pairs)
    run.options = dataclasses.replace(run.options, **sizes)
    return model_size


def build_translator(run, tokenizers):
    """The translator, unbuilt, or the checkpoint's, built and loaded (under the strategy: `Run.compile`'s)."""
    if run.options.pretrained:
        return checkpoint_model(run)
    return run.options.build(tokenizers.source.vocab_size, run.options.max_length + 1, dtype=run.precision.policy)


def compile_translator(run, tokenizers, metric):
    """Builds and compiles the translator under the strategy, its optimizer's variables made.

    With the variables made, fit traces one step, fresh or resumed. With
    `--pretrained` the model is the checkpoint's, and the learning rate
    fine-tuning's (`fine_tuning_learning_rate`, printed with its reason).

    Args:
        run: the task's `Run`.
        tokenizers: the run's `Tokenizers`.
        metric: the validation metric chosen, which the learning rate depends on.

    Returns:
        (model, its learning-rate schedule, the rate's `Decision`).
    """
    options = run.options
    with run.strategy.scope():
        if options.pretrained:
            schedule, rate = learning_rate(options)
        else:
            schedule, rate = translation_learning_rate(options.arch, options.d_model, options.warmup_steps, metric,
                                                       options.lr_scale, options.learning_rate)
        annealed = run.learning_rate(schedule)  # to 0 where the budget ends, with --anneal
    model = run.compile(
        lambda: build_translator(run, tokenizers),
        [kseq.metrics.MaskedAccuracy(), kseq.metrics.Perplexity()],
        loss=kseq.losses.MaskedSparseCategoricalCrossentropy(label_smoothing=options.label_smoothing),
        optimizer=lambda: kseq.optimizers.FusedAdam(annealed, beta_2=0.98, epsilon=1e-9,
                                                   global_clipnorm=options.clipnorm))
    with run.strategy.scope():
        model.optimizer.build(model.trainable_variables)
    compiles = model.jit_compile or run.jit.compiled_blocks
    cache = f"; compiled programs cached in {run.xla_cache}" if compiles else ""
    print(f"model: {options.arch}, {model.count_params():,} parameters\n{run.decisions(model)[-1]}{cache}")
    return model, schedule, rate


def fine_tuned(logdir):
    """Whether the translate run in `logdir` was fine-tuned from `--pretrained` (it kept the checkpoint's config)."""
    return os.path.isfile(os.path.join(logdir, PRETRAINED_CONFIG))


def checkpoint_tokenizers(run):
    """The checkpoint's two tokenizers, their files and its config.json kept
    in the logdir, as `fine_tuned_model` reads them.

    Args:
        run: the task's `Run`.

    Returns:
        `Tokenizers`.
    """
    options = run.options
    folder = checkpoint_folder(options.pretrained)
    tokenizers = Tokenizers(*marian_tokenizers(folder))
    for name, content in tokenizers.files().items():
        write_bytes_atomic(os.path.join(run.workdir, name), content)
    with open(os.path.join(folder, "config.json"), "rb") as f:
        write_bytes_atomic(os.path.join(run.workdir, PRETRAINED_CONFIG), f.read())
    print(f"tokenizers: the pretrained checkpoint's ({folder}), {tokenizers.source.vocab_size} source and "
          f"{tokenizers.target.vocab_size} target ids (its vocabularies, and BOS: kseq's id for its decoder start)")
    return tokenizers




def checkpoint_size(run):
    """Sets `run.options`' dropout to the checkpoint's config.json's unless
    `--dropout` is given, and says what size the model is.

    Args:
        run: the task's `Run`.

    Returns:
        The "model_size" `Decision`.
    """
    options = run.options
    arguments = checkpoint_config(checkpoint_folder(options.pretrained)).model_arguments
    dropout = options.dropout if "dropout" in options.options_given else arguments["dropout"]
    run.options = dataclasses.replace(options, dropout=dropout)
    shown = {name: arguments[name] for name in PRETRAINED_SIZE} | {"dropout": dropout}
    return Decision("model_size", shown, f"the pretrained checkpoint's config.json ({options.pretrained})")




def checkpoint_model(run):
    """The checkpoint's model, built and loaded (under the strategy).

    Args:
        run: the task's `Run`.

    Returns:
        A `TransformerSeq2Seq`.

    Raises:
        UsageError: `--max-length` over what the pretrained model holds.
    """
    options = run.options
    model = load_marian(options.pretrained, dtype=run.precision.policy, dropout=options.dropout,
                        compiled_blocks=run.jit.compiled_blocks).model
    if options.max_length + 1 > model.max_length:  # + BOS
        raise UsageError(f"--max-length {options.max_length}: the pretrained model holds {model.max_length} "
                         f"positions (its max_position_embeddings), BOS included: expected at most "
                         f"{model.max_length - 1}")
    return model



def learning_rate(options):
    """Fine-tuning's learning rate (`fine_tuning_learning_rate`: `--learning-rate`,
    and `--warmup-steps` where given), printed with its reason.

    Args:
        options: the task's options.

    Returns:
        (a `Scaled` schedule, its `Decision`).
    """
    warmup = options.warmup_steps if "warmup_steps" in options.options_given else None
    schedule, rate = fine_tuning_learning_rate(options.learning_rate, warmup)
    print(rate)
    return schedule, rate


def scores_before(run, model, tokenizers, test_pairs, decode_xla):
    """The test scores of the pretrained model as it came, before fine-tuning
    (`PRETRAINED_DECODING`); its outputs go to `<logdir>/pretrained/test_translations.tsv`.

    Args:
        run: the task's `Run`.
        model: the pretrained model, not yet trained.
        tokenizers: the run's `Tokenizers`.
        test_pairs: (sources, targets).
        decode_xla: whether decoding is compiled with XLA.

    Returns:
        metrics.json's "pretrained_test_bleu", "pretrained_test_chrf",
        "pretrained_test_exact_match" and "pretrained_decoding".
    """
    options = run.options
    folder = os.path.join(options.logdir, "pretrained")
    os.makedirs(folder, exist_ok=True)
    print("before fine-tuning, the pretrained model as it came:")
    translate = model_translator(model, tokenizers.source, options.max_length,
                                 PRETRAINED_DECODING.search(options.max_length), decode_xla,
                                 target_tokenizer=tokenizers.target)
    tested = test_translations(translate, test_pairs, folder, options.max_test_sentences)
    return {"pretrained_test_bleu": tested["test_bleu"], "pretrained_test_chrf": tested["test_chrf"],
            "pretrained_test_exact_match": tested["test_exact_match"],
            "pretrained_decoding": dataclasses.asdict(PRETRAINED_DECODING)}


def fine_tuned_model(logdir, dtype):
    """`kseq.tasks.translate.trained_model` of a run fine-tuned from `--pretrained`: the checkpoint's
    architecture (the config.json kept), the run's tokenizers and weights."""
    tokenizers = Tokenizers(*(MarianTokenizer.load(os.path.join(logdir, f"marian_{side}.json"))
                              for side in ("source", "target")))
    with open(os.path.join(logdir, PRETRAINED_CONFIG), encoding="utf-8") as f:
        arguments = read_marian_config(json.load(f)).model_arguments
    model = TransformerSeq2Seq(tokenizers.source.vocab_size, tokenizers.target.vocab_size, dtype=dtype, **arguments)
    model.build()
    model.load_weights(os.path.join(logdir, TRAINED_WEIGHTS))
    return model, tokenizers
