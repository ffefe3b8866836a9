"""Step 5 of the road: the Transformer translator, English to French.

No recurrence: every position attends to every other at once. What the
recurrence gave for free is added back by hand: sinusoidal position
encodings tell each piece where it stands, and masks keep attention off
padding and keep each decoder position from reading the words after it.
Training follows "Attention Is All You Need": Adam with the Noam schedule
(a linear warm-up, then the inverse square root of the step) and label
smoothing (a tenth of each label's probability spread over the vocabulary,
so the model is never sure). Decoding is a beam search. Scored by BLEU and
chrF on the test verses, exported as a SavedModel called with English
strings.

The default trains 6 minutes (about 9 in all on 2 CPU cores) and prints its
test BLEU and chrF. `kseq-train translate` trains this model for the same 6
minutes and adds bfloat16 steps where the CPU has the units, the decoding
chosen on validation verses and the best of its evaluations or their
average: README's table of recipes has both.

    python recipes/05_transformer_translator.py [--minutes 6] [--logdir DIR] [--export-dir DIR]
    tensorboard --logdir runs/recipes/05_transformer_translator
"""

from kseq.cli import recipes

# First, before TensorFlow loads: a bad flag is one line, and TensorFlow's start-up
# lines are held to TF_CPP_MIN_LOG_LEVEL, as kseq-train holds them.
flags = recipes.start("05_transformer_translator", __doc__, default_minutes=6.0)

import os  # noqa: E402

import kseq  # noqa: E402
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
from kseq.data.bible import load_bible_pairs  # noqa: E402
from kseq.layers.masking import causal_mask, padding_mask  # noqa: E402
from kseq.training.scoring import model_translator, test_translations  # noqa: E402

D_MODEL, WARMUP_STEPS = 192, 400  # a small model, for minutes on a CPU (the paper's base: 512, 4000)
MAX_TOKENS = 96  # the position table's length; longer training pairs are left out

splits = {split: load_bible_pairs(split) for split in ("train", "valid", "test")}
english, french = splits["train"]
tokenizer = kseq.data.SubwordTokenizer.train(english + french, vocab_size=4000)  # one vocabulary for both


def batches(split, **shuffling):
    # By length, about 2,560 target tokens a batch: the Transformer's cost grows with the padded length.
    return kseq.data.bucketed_pair_dataset(*splits[split], tokenizer, tokenizer, token_budget=2560,
                                           max_length=MAX_TOKENS, **shuffling)[0]


train, valid = batches("train", seed=0, epochs=1000), batches("valid", shuffle=False)

# The masks the model makes from the ids: True where attention may look.
ids = tokenizer.tokenize(["Jesus wept.", "In the beginning"]).to_tensor()
print(f"source ids:\n{ids.numpy()}\npadding mask:\n{padding_mask(ids).numpy().astype(int)}")
print(f"causal mask of 4 decoder positions:\n{causal_mask(4, 4).numpy().astype(int)}")

# One replica a GPU (or the CPU alone); the variables made in its scope are mirrored.
strategy = tf.distribute.MirroredStrategy()
print(f"{strategy.num_replicas_in_sync} replica(s)")
with strategy.scope():
    # Two encoder and two decoder blocks; with one vocabulary for both
    # languages, the three embedding matrices can be one.
    model = kseq.models.TransformerSeq2Seq(tokenizer.vocab_size, tokenizer.vocab_size, num_layers=2, d_model=D_MODEL,
                                           num_heads=4, ff_dim=4 * D_MODEL, dropout=0.0, max_length=MAX_TOKENS + 1,
                                           position="sinusoidal", share_embeddings=True)
    # The schedule's rate peaks at step WARMUP_STEPS; beta_2 0.98 and epsilon 1e-9 are the paper's.
    noam = kseq.schedules.TransformerSchedule(D_MODEL, warmup_steps=WARMUP_STEPS)
    model.compile(keras.optimizers.Adam(noam, beta_2=0.98, epsilon=1e-9, global_clipnorm=1.0),
                  kseq.losses.MaskedSparseCategoricalCrossentropy(label_smoothing=0.1),
                  # Perplexity is taken without the smoothing: the true labels' likelihood.
                  metrics=[kseq.metrics.MaskedAccuracy(), kseq.metrics.Perplexity()])

checkpoint = os.path.join(flags.logdir, "best.weights.h5")
model.fit(train, steps_per_epoch=250, epochs=10_000, validation_data=valid, verbose=2, callbacks=[
    kseq.callbacks.TimeLimit(flags.minutes),
    keras.callbacks.TensorBoard(flags.logdir),
    keras.callbacks.ModelCheckpoint(checkpoint, save_best_only=True, save_weights_only=True)])
steps = int(model.optimizer.iterations.numpy())
print(f"{steps:,} steps; the learning rate ended at {float(noam(steps)):.2e}")
model.load_weights(checkpoint)  # the best evaluation's weights (and its optimizer state)

# Beam search over the decoder's cached keys and values: each step computes
# only the newest position. A verse stops once 4 hypotheses have ended.
beam = kseq.decoding.BeamSearch(MAX_TOKENS, beam_size=4, length_penalty=0.6, max_length_ratio=1.5, patience=1.0)
scores = test_translations(model_translator(model, tokenizer, MAX_TOKENS, beam), splits["test"], flags.logdir)

path = kseq.export.export_translator(model, tokenizer, tokenizer, flags.export_dir, search=beam,
                                     max_source_length=MAX_TOKENS, assets=tokenizer.asset_files())
print(f"Transformer: test BLEU {scores['test_bleu']:.2f}, chrF {scores['test_chrf']:.2f} after {steps:,} steps\n"
      f"logs: tensorboard --logdir {flags.logdir}\nSavedModel: {path} (source -> translation, n_best, score)")
