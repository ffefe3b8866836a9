"""Step 4 of the road: sequence to sequence with attention, English to French.

Step 3's decoder saw the source through one vector. Here, at every output
word it scores every encoder state against its own state, turns the scores
into weights that sum to 1 (zero on padding) and reads their weighted mean,
the context of that word. `ATTENTION` picks the score: Luong's "dot"
(h_t . h_s), "general" (h_t . W h_s) and "concat" (v . tanh(W [h_t; h_s])),
or Bahdanau's additive score taken from the previous state. The weights of
a few validation verses go to TensorBoard as images (Images tab) after
every evaluation: a good model's map runs along the diagonal, and a name
lights up its own name. Scored by BLEU and chrF on the test verses with
beam search, exported as a SavedModel called with English strings.

The default trains 5 minutes (about 8 in all on 2 CPU cores) and prints its
test BLEU and chrF; README's table of recipes has them beside
`kseq-train translate --arch rnn` at the same minutes.

    python recipes/04_seq2seq_attention.py [--minutes 5] [--logdir DIR] [--export-dir DIR]
    tensorboard --logdir runs/recipes/04_seq2seq_attention
"""

from kseq.cli import recipes

# First, before TensorFlow loads: a bad flag is one line, and TensorFlow's start-up
# lines are held to TF_CPP_MIN_LOG_LEVEL, as kseq-train holds them.
flags = recipes.start("04_seq2seq_attention", __doc__, default_minutes=5.0)

import os  # noqa: E402

import kseq  # noqa: E402
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
from kseq.data.bible import load_bible_pairs  # noqa: E402
from kseq.training.scoring import model_translator, test_translations  # noqa: E402

ATTENTION = "concat"  # "dot", "general", "concat" (Luong et al., 2015) or "bahdanau" (Bahdanau et al., 2015)
MAX_TOKENS = 80  # training pairs longer than this (in pieces, with BOS or EOS) are left out

sources, targets = load_bible_pairs("train")
valid, test = load_bible_pairs("valid"), load_bible_pairs("test")
tokenizer = kseq.data.SubwordTokenizer.train(sources + targets, vocab_size=4000)  # one for both languages

# Batches of pairs of similar length, about 2,048 target tokens each: short
# verses come in large batches, long ones in small, and little is padding.
train_batches, report = kseq.data.bucketed_pair_dataset(sources, targets, tokenizer, tokenizer, token_budget=2048,
                                                        max_length=MAX_TOKENS, seed=0, epochs=1000)
valid_batches, _ = kseq.data.bucketed_pair_dataset(*valid, tokenizer, tokenizer, token_budget=2048,
                                                   max_length=MAX_TOKENS, shuffle=False)
print(f"train: {report}")

# One replica a GPU (or the CPU alone); the variables made in its scope are mirrored.
strategy = tf.distribute.MirroredStrategy()
print(f"{strategy.num_replicas_in_sync} replica(s)")
with strategy.scope():
    model = kseq.models.RNNSeq2Seq(tokenizer.vocab_size, tokenizer.vocab_size, embed_dim=192, units=256,
                                   cell="lstm", attention=ATTENTION)
    model.compile(keras.optimizers.Adam(3e-3, global_clipnorm=1.0), kseq.losses.MaskedSparseCategoricalCrossentropy(),
                  metrics=[kseq.metrics.MaskedAccuracy(), kseq.metrics.Perplexity()])

# The attention maps: greedy translations of the first validation verses,
# with the weights each output piece gave each source piece.
plotted = tokenizer.tokenize(valid[0][:3]).to_tensor()
attention_maps = kseq.callbacks.AttentionMaps(plotted, lambda ids: model.generate(ids, max_length=MAX_TOKENS),
                                              tokenizer.id_to_piece, flags.logdir)

# Evaluations every 200 steps (the "epochs" below): validation loss, a checkpoint and the maps.
checkpoint = os.path.join(flags.logdir, "best.weights.h5")
model.fit(train_batches, steps_per_epoch=200, epochs=10_000, validation_data=valid_batches, verbose=2, callbacks=[
    kseq.callbacks.TimeLimit(flags.minutes), attention_maps,
    keras.callbacks.TensorBoard(flags.logdir),
    keras.callbacks.ModelCheckpoint(checkpoint, save_best_only=True, save_weights_only=True)])
print(f"{int(model.optimizer.iterations.numpy()):,} training steps")
model.load_weights(checkpoint)  # the best evaluation's weights (and its optimizer state)

# Beam search keeps the 4 best partial translations at every step; the length
# penalty keeps it from preferring short ones (Wu et al., 2016).
beam = kseq.decoding.BeamSearch(2 * MAX_TOKENS, beam_size=4, length_penalty=0.6, max_length_ratio=1.5, patience=1.0)
scores = test_translations(model_translator(model, tokenizer, 2 * MAX_TOKENS, beam), test, flags.logdir)

# The export also has an `alignment` signature: the source piece each output piece attends to most.
path = kseq.export.export_translator(model, tokenizer, tokenizer, flags.export_dir, search=beam,
                                     max_source_length=2 * MAX_TOKENS, assets=tokenizer.asset_files())
print(f"{ATTENTION} attention: test BLEU {scores['test_bleu']:.2f}, chrF {scores['test_chrf']:.2f}\n"
      f"logs and attention maps: tensorboard --logdir {flags.logdir}\nSavedModel: {path} (source -> translation)")
