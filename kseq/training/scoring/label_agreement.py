"""How generated texts read: how often a classifier gives them the label
they were generated from, and how many of their words (or whole texts) the
training texts hold."""

import os
import re

import numpy as np
import tensorflow as tf

from kseq.data.corpus import training_pairs
from kseq.errors import UsageError
from kseq._saved_model import load_saved_model

WORD = re.compile(r"[a-z']+")


def label_texts(path, texts, batch=256):
    """Labels texts with a classifier export.

    Args:
        path: the classifier's SavedModel folder.
        texts: a list of strings.
        batch: texts a call. Default 256.

    Returns:
        The label of each text, strings.
    """
    serve = load_saved_model(path).signatures["serving_default"]
    labels = []
    for begin in range(0, len(texts), batch):
        output = serve(text=tf.constant(texts[begin : begin + batch]))["label"].numpy()
        labels += [label.decode() for label in output]
    return labels


def check_labels(path, predicted, names):
    """Checks that the classifier gives only labels the data holds.

    A classifier trained on other data would make every agreement 0.

    Args:
        path: the classifier's export, for the message.
        predicted: the labels it gave.
        names: the data's label names.

    Raises:
        UsageError: it gave a label the data lacks.
    """
    foreign = sorted(set(predicted) - set(names))
    if foreign:
        raise UsageError(
            f"--classifier-export {path}: the classifier labels texts {foreign}, which this data's labels "
            f"{names} do not include: expected a classifier trained on the same labels (or an empty folder, "
            "to train one)")


def known_word_rate(texts, vocabulary):
    """Gives the share of the words of `texts` that occur in `vocabulary`.

    A rough readability figure for generated text; words are lowercased
    runs of letters and apostrophes.

    Args:
        texts: strings.
        vocabulary: a set of words.

    Returns:
        The share, rounded to 4 decimals; 0.0 for texts without words.
    """
    words = [word for text in texts for word in WORD.findall(text.lower())]
    return round(float(np.mean([word in vocabulary for word in words])), 4) if words else 0.0


def agreement(predicted, wanted, names):
    """Measures how often the classifier gave the label a text was generated for.

    Args:
        predicted: the classifier's label of each text.
        wanted: the label each was generated for.
        names: the label names.

    Returns:
        ({label: share of the texts meant as `label` that got it}, the share overall).
    """
    predicted, wanted = np.asarray(predicted), np.asarray(wanted)
    per_class = {name: round(float(np.mean(predicted[wanted == name] == name)), 4)
                 for name in names if np.any(wanted == name)}
    return per_class, round(float(np.mean(predicted == wanted)), 4)


def seen_in_training(corpus, texts, other_texts):
    """Finds what of `texts` the training data holds, in one pass over its files.

    Args:
        corpus: the training corpus scan.
        texts: generated texts.
        other_texts: more texts whose words are looked up (e.g. real test snippets).

    Returns:
        (the `texts` that are training snippets, the words of `texts` and
        `other_texts` that training snippets hold), two sets.
    """
    wanted = set(texts)
    words = {word for text in [*texts, *other_texts] for word in WORD.findall(text.lower())}
    copied, known = set(), set()
    for text, _ in training_pairs(corpus):
        if text in wanted:
            copied.add(text)
        known.update(word for word in WORD.findall(text.lower()) if word in words)
    return copied, known


def log_agreement(logdir, per_class, overall, samples, step):
    """Logs the agreement and sample texts per label to TensorBoard run `<logdir>/agreement`.

    Args:
        logdir: the run's folder.
        per_class: {label: agreement}.
        overall: the agreement overall.
        samples: {label: sample texts}.
        step: the summaries' step.
    """
    with tf.summary.create_file_writer(os.path.join(logdir, "agreement")).as_default(step=step):
        for name, value in per_class.items():
            tf.summary.scalar(f"agreement_{name}", value)
        tf.summary.scalar("agreement_overall", overall)
        for name, texts in samples.items():
            tf.summary.text(f"samples_{name}", "\n\n".join(f"- {t}" for t in texts))


def classifier_ceiling(path, texts, class_ids, names):
    """Scores the classifier on real labelled texts: its ceiling for the agreement.

    Scored before a generator trains, it is also an early check that the
    classifier knows these labels.

    Args:
        path: the classifier's export.
        texts: real texts, e.g. the test split's.
        class_ids: their class ids, in `names`' order.
        names: the label names, in class id order.

    Returns:
        ({label: agreement}, overall agreement).

    Raises:
        UsageError: the classifier gives a label `names` lacks (`check_labels`).
    """
    predicted = label_texts(path, texts)
    check_labels(path, predicted, names)
    return agreement(predicted, [names[i] for i in class_ids], names)


def score_samples(path, classifier, names, samples_per_class, corpus, real_texts, logdir, step):
    """Measures how often the classifier labels texts sampled from a generator's export as asked.

    The samples come from the export itself, so what is measured is what
    is served. The agreement and samples are logged to TensorBoard
    (`log_agreement`); three samples per label are printed.

    Args:
        path: the generator's export, label -> text.
        classifier: the classifier's export.
        names: the label names, in class id order.
        samples_per_class: texts sampled per label.
        corpus: the training corpus's scan, for the texts it holds.
        real_texts: real texts (the test split's), the known-word rate's reference.
        logdir: the run's folder.
        step: the training step the logs are written at.

    Returns:
        {"agreement" per label, "agreement_overall", "samples", and how the
        samples read: "copied_from_train", "known_word_rate" (beside the
        real texts' "known_word_rate_real_test")}.
    """
    wanted = [name for name in names for _ in range(samples_per_class)]
    served = load_saved_model(path).signatures["serving_default"]
    texts = [t.decode() for t in served(label=tf.constant(wanted))["text"].numpy()]
    per_class, overall = agreement(label_texts(classifier, texts), wanted, names)
    copied, vocabulary = seen_in_training(corpus, texts, real_texts)
    samples = {name: [t for t, w in zip(texts, wanted) if w == name][:5] for name in names}
    log_agreement(logdir, per_class, overall, samples, step)
    for name in names:
        print(f"{name}:" + "".join(f"\n  {text!r}" for text in samples[name][:3]))
    return {
        "agreement": per_class, "agreement_overall": overall, "samples": samples,
        "copied_from_train": round(float(np.mean([t in copied for t in texts])), 4),
        "known_word_rate": known_word_rate(texts, vocabulary),
        "known_word_rate_real_test": known_word_rate(real_texts, vocabulary),
    }
