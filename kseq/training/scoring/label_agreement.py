"""How generated texts read: how often a classifier gives them the label
they were generated from, and how many of their words (or whole texts) the
training texts hold."""

import os
import re

import numpy as np
import tensorflow as tf

from kseq.data.corpus import training_pairs

WORD = re.compile(r"[a-z']+")


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
    """Logs the agreement per label and overall, and sample texts per label,
    to TensorBoard run `<logdir>/agreement` at `step`."""
    with tf.summary.create_file_writer(os.path.join(logdir, "agreement")).as_default(step=step):
        for name, value in per_class.items():
            tf.summary.scalar(f"agreement_{name}", value)
        tf.summary.scalar("agreement_overall", overall)
        for name, texts in samples.items():
            tf.summary.text(f"samples_{name}", "\n\n".join(f"- {t}" for t in texts))

