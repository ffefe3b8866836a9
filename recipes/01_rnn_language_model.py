"""Step 1 of the road: an RNN language model, trained with truncated backpropagation through time.

A recurrent network reads text one token at a time and predicts the next.
The Bible's English verses (the translation task's split) become one stream
of SentencePiece pieces, read by 32 parallel streams 35 tokens at a time.
The state at the end of a batch starts the next one, so the forward pass
reads each stream as one long text, while the gradient flows back only
through the last 35 tokens: that cut is what "truncated" means. `CELL`
switches the recurrence between a vanilla RNN, an LSTM and a GRU. The model
is scored by test perplexity, writes text a token at a time, and is exported
as a SavedModel that continues prompts.

The default trains 3 minutes (about 4 in all on 2 CPU cores) and prints its
test perplexity; README's table of recipes has what it reaches.

    python recipes/01_rnn_language_model.py [--minutes 3] [--logdir DIR] [--export-dir DIR]
    tensorboard --logdir runs/recipes/01_rnn_language_model
"""

from kseq.cli import recipes

# First, before TensorFlow loads: a bad flag is one line, and TensorFlow's start-up
# lines are held to TF_CPP_MIN_LOG_LEVEL, as kseq-train holds them.
flags = recipes.start("01_rnn_language_model", __doc__, default_minutes=3.0)

import os  # noqa: E402
import time  # noqa: E402

import kseq  # noqa: E402
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
from kseq.data.bible import load_bible_pairs  # noqa: E402

CELL = "lstm"  # "rnn" (Elman's), "lstm" or "gru": nothing else changes
STREAMS, BPTT = 32, 35  # streams a batch, and tokens a stream a batch: the truncation


# Data: one verse a document; the split is fixed by the verse's reference.
verses = {split: load_bible_pairs(split)[0] for split in ("train", "valid", "test")}
print(", ".join(f"{split}: {len(texts):,} verses" for split, texts in verses.items()))

# Tokenizer: subword pieces learned from the training verses only, so the test
# text holds words the model has never seen whole, as any new text would.
tokenizer = kseq.data.SubwordTokenizer.train(verses["train"], vocab_size=4000)


def token_streams(split, streams):
    # EOS after every verse teaches where a verse ends; row b of batch j+1
    # continues row b of batch j, which is what lets the state carry over.
    tokens = kseq.data.join_documents(tokenizer.tokenize(verses[split]))
    print(f"{split}: {len(tokens):,} tokens in {streams} streams")
    return kseq.data.stream_batches(tokens, batch_size=streams, chunk_length=BPTT)


# Fewer evaluation streams: each stream's tail that fills no whole batch is left out.
train, valid, test = token_streams("train", STREAMS), token_streams("valid", 8), token_streams("test", 8)

# One replica a GPU (or the CPU alone); the variables made in its scope are mirrored.
strategy = tf.distribute.MirroredStrategy()
print(f"{strategy.num_replicas_in_sync} replica(s)")
with strategy.scope():
    # carry_state=True keeps each stream's state in variables from batch to
    # batch (zeroed as each epoch begins); tying the output layer to the
    # embedding halves the weights and helps a small model.
    model = kseq.models.RNNLanguageModel(tokenizer.vocab_size, embed_dim=256, units=256, cell=CELL,
                                         dropout=0.2, tie_weights=True, carry_state=True)
    # Clipping the gradient's norm: a recurrence multiplies it at every step,
    # and a vanilla RNN's sometimes explodes.
    model.compile(keras.optimizers.Adam(2e-3, global_clipnorm=1.0),
                  kseq.losses.MaskedSparseCategoricalCrossentropy(), metrics=[kseq.metrics.Perplexity()])

# An "epoch" of 200 steps over the repeated stream: a validation point (and
# a point of TensorBoard's curves) every 200 steps. The carried state is
# zeroed as each begins, once in 200 batches: a small cost. The clock ends
# training (the epoch in progress still validates); the checkpoint keeps the best.
checkpoint = os.path.join(flags.logdir, "best.weights.h5")
started = time.monotonic()
model.fit(train.repeat(), steps_per_epoch=200, epochs=10_000, validation_data=valid, verbose=2, callbacks=[
    kseq.callbacks.TimeLimit(flags.minutes),
    keras.callbacks.TensorBoard(flags.logdir),
    keras.callbacks.ModelCheckpoint(checkpoint, save_weights_only=True, save_best_only=True)])
minutes, steps = (time.monotonic() - started) / 60, int(model.optimizer.iterations.numpy())
model.load_weights(checkpoint)  # the best evaluation's weights (and its optimizer state)

# Perplexity: exp of the mean negative log-likelihood a token, the field's
# measure (a uniform guess over the vocabulary scores its size, 4,000).
perplexity = model.evaluate(test, verbose=0, return_dict=True)["perplexity"]
print(f"{CELL}: {steps:,} steps in {minutes:.1f} minutes; test perplexity {perplexity:.2f}")


def write_on(prompt, tokens=30, temperature=0.8):
    # A token at a time: read the prompt, then feed each drawn token back in.
    state, token = model.begin_decoding(tokenizer.tokenize([prompt]).to_tensor(), None)
    drawn = []
    for index in range(tokens):
        logits, state = model.step(token, state, index)
        # A temperature below 1 sharpens the distribution, and drawing among
        # the 40 likeliest only keeps rare pieces (stray bytes) out.
        likeliest = tf.math.top_k(logits / temperature, k=40)
        token = tf.gather(likeliest.indices, tf.random.categorical(likeliest.values, 1), batch_dims=1)[:, 0]
        if int(token[0]) == kseq.EOS_ID:  # the verse is over
            break
        drawn.append(int(token[0]))
    return tokenizer.detokenize([drawn]).numpy()[0].decode() if drawn else ""


for prompt in ("In the beginning", "The Lord said to Moses,", "Blessed are"):
    print(f"  {prompt!r} -> {write_on(prompt)!r}")

# The export runs the same sampling as one loop in the graph, the tokenizer
# with it: TF Serving takes prompt strings and answers with continuations.
sampler = kseq.decoding.Sampler(40, temperature=0.8, top_k=40, seed=1)
path = kseq.export.export_language_model(model, tokenizer, flags.export_dir, sampler,
                                         assets=tokenizer.asset_files())
print(f"logs: tensorboard --logdir {flags.logdir}\nSavedModel: {path} (prompt -> continuation)")
