"""Step 3 of the road: sequence to sequence through one context vector, English to French.

An LSTM encoder reads an English Bible verse; its final state, one vector,
is all the LSTM decoder learns of it. The decoder is trained with teacher
forcing: it reads BOS and the reference French verse and must give the
verse followed by EOS, each step seeing the true previous word rather than
its own guess. Two lines switch the classic repairs of the bottleneck:
`REVERSE_SOURCE` (the source read backwards puts its first words next to
the first outputs) and `PEEKY` (the context vector joins every decoder
step, not only the first). Scored by BLEU and chrF on the test verses
(greedy decoding), exported as a SavedModel that TF Serving calls with
English strings.

The default trains 5 minutes (about 7 in all on 2 CPU cores) and prints its
test BLEU and chrF (README's table of recipes has them): low, since one
vector holds little of a verse, which is what attention (step 4) repairs.

    python recipes/03_seq2seq_context_vector.py [--minutes 5] [--logdir DIR] [--export-dir DIR]
    tensorboard --logdir runs/recipes/03_seq2seq_context_vector
"""

from kseq.cli import recipes

# First, before TensorFlow loads: a bad flag is one line, and TensorFlow's start-up
# lines are held to TF_CPP_MIN_LOG_LEVEL, as kseq-train holds them.
flags = recipes.start("03_seq2seq_context_vector", __doc__, default_minutes=5.0)

import os  # noqa: E402

import kseq  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from kseq.data.bible import load_bible_pairs  # noqa: E402
from kseq.training.scoring import model_translator, test_translations  # noqa: E402

REVERSE_SOURCE = True  # Sutskever et al., 2014: short paths between the first words
PEEKY = True  # Cho et al., 2014: the context vector at every step
MAX_TOKENS = 64  # longer training pairs are left out: one vector cannot hold them anyway


# Data: (English verses, French verses) of each split, fixed by the verse's reference.
pairs = {split: load_bible_pairs(split) for split in ("train", "valid", "test")}
# One vocabulary for both languages: names and numbers are spelled alike in both.
tokenizer = kseq.data.SubwordTokenizer.train(pairs["train"][0] + pairs["train"][1], vocab_size=4000)


def short_pairs(split):
    lengths = [tokenizer.tokenize(side).row_lengths().numpy() for side in pairs[split]]
    keep = np.flatnonzero((lengths[0] <= MAX_TOKENS) & (lengths[1] < MAX_TOKENS))  # + BOS or EOS
    return [[side[i] for i in keep] for side in pairs[split]]


# Batches of ({"source_ids", "target_ids": BOS + target}, labels: target + EOS), each padded to its longest row.
train = kseq.data.text_pair_dataset(*short_pairs("train"), tokenizer, tokenizer, batch_size=64, shuffle=True, seed=0)
valid = kseq.data.text_pair_dataset(*short_pairs("valid"), tokenizer, tokenizer, batch_size=64)
inputs, labels = next(iter(valid))
print("decoder reads:", " ".join(tokenizer.id_to_piece(inputs["target_ids"][0][:8])))
print("and must say: ", " ".join(tokenizer.id_to_piece(labels[0][:8])))

# One replica a GPU (or the CPU alone); the variables made in its scope are mirrored.
strategy = tf.distribute.MirroredStrategy()
print(f"{strategy.num_replicas_in_sync} replica(s)")
with strategy.scope():
    # attention=None: the decoder's only view of the source is the encoder's final state.
    model = kseq.models.RNNSeq2Seq(tokenizer.vocab_size, tokenizer.vocab_size, embed_dim=192, units=256,
                                   cell="lstm", attention=None, reverse_source=REVERSE_SOURCE, peeky=PEEKY)
    # The loss and accuracy skip PAD labels: padding is not a word to learn.
    model.compile(keras.optimizers.Adam(3e-3, global_clipnorm=1.0), kseq.losses.MaskedSparseCategoricalCrossentropy(),
                  metrics=[kseq.metrics.MaskedAccuracy()])

# An "epoch" of 100 steps over the repeated data: a validation point every 100 steps.
checkpoint = os.path.join(flags.logdir, "best.weights.h5")
callbacks = [kseq.callbacks.TimeLimit(flags.minutes), keras.callbacks.TensorBoard(flags.logdir),
             keras.callbacks.ModelCheckpoint(checkpoint, save_best_only=True, save_weights_only=True)]
history = model.fit(train.repeat(), steps_per_epoch=100, epochs=10_000, validation_data=valid, callbacks=callbacks,
                    verbose=2)
print(f"{int(model.optimizer.iterations.numpy()):,} steps, {len(history.epoch)} evaluations")
model.load_weights(checkpoint)

# Greedy decoding through the function the export serves; each output stops
# by 1.5 x its source's tokens + 5, so an unfinished model cannot ramble on.
greedy = kseq.decoding.GreedySearch(2 * MAX_TOKENS, max_length_ratio=1.5)
scores = test_translations(model_translator(model, tokenizer, 2 * MAX_TOKENS, greedy), pairs["test"], flags.logdir)
print(f"test BLEU {scores['test_bleu']:.2f}, chrF {scores['test_chrf']:.2f} on {scores['test_sentences']} verses")

# Tokenizer, encoder, the greedy loop and the detokenizer, all in the graph:
# TF Serving takes English strings and answers with French ones.
path = kseq.export.export_translator(model, tokenizer, tokenizer, flags.export_dir, search=greedy,
                                     max_source_length=2 * MAX_TOKENS, assets=tokenizer.asset_files())
print(f"logs: tensorboard --logdir {flags.logdir}\nSavedModel: {path} (source -> translation)")
