"""Step 6 of the road: one-to-many, image captioning with attention over the image.

One image in, a sentence out. A small CNN turns each 64x64 image into an
8x8 grid of feature vectors; their mean sets the LSTM decoder's first
state, and at every word the decoder attends over the 64 grid cells, as
step 4's decoder attended over source words ("Show, Attend and Tell").
The scenes are drawn here, with a known answer: one to three coloured
shapes a picture, five reference captions each from a small grammar with
synonyms and three word orders (`kseq.data.scenes`). Scored by BLEU against
the five references and by content accuracy (the share of captions whose
shapes, colours and places, read back by the grammar, are the scene's).
Each word's attention over the test images goes to TensorBoard as heat
maps; the export takes PNG or JPEG bytes and answers with a caption.

The default trains 4 minutes (about 5 in all on 2 CPU cores) and prints its
test BLEU and content accuracy; README's table of recipes has what it reaches.

    python recipes/06_image_captioning.py [--minutes 4] [--logdir DIR] [--export-dir DIR]
    tensorboard --logdir runs/recipes/06_image_captioning
"""

from kseq.cli import recipes

# First, before TensorFlow loads: a bad flag is one line, and TensorFlow's start-up
# lines are held to TF_CPP_MIN_LOG_LEVEL, as kseq-train holds them.
flags = recipes.start("06_image_captioning", __doc__, default_minutes=4.0)

import os  # noqa: E402

import kseq  # noqa: E402
import keras  # noqa: E402
import sacrebleu  # noqa: E402
import tensorflow as tf  # noqa: E402
from kseq.data import scenes  # noqa: E402
from kseq.data.caption_batches import caption_batches  # noqa: E402
from kseq.training.loop import caption_images  # noqa: E402
from kseq.training.reporting import write_image_attention  # noqa: E402

ATTENTION = "general"  # Luong's "dot", "general", "concat", or "bahdanau"; None: the mean vector alone
MAX_WORDS = 40  # three shapes take about 30 words


# The fixed splits: the same seed gives the same pictures on every machine.
data = {split: scenes.load_scenes(split, count) for split, count in (("train", 6000), ("valid", 500), ("test", 500))}
tokenizer = scenes.scene_tokenizer()  # one id a word of the grammar: no pieces needed
# ((images (B, 64, 64, 3) uint8, BOS + caption), caption + EOS): every reference caption once an epoch,
# batches of captions of one, two or three shapes, so short captions are not padded to long ones.
train = caption_batches(data["train"], tokenizer, batch_size=64)
valid = caption_batches(data["valid"], tokenizer, batch_size=64)
(images, words), _ = next(iter(train))
print(f"a batch: images {tuple(images.shape)}, words {tuple(words.shape)}; {data['train'].captions[0][0]!r}")

# One replica a GPU (or the CPU alone); the variables made in its scope are mirrored.
strategy = tf.distribute.MirroredStrategy()
print(f"{strategy.num_replicas_in_sync} replica(s)")
with strategy.scope():
    # Without attention the one vector must carry every shape's place: a
    # learned projection of the whole grid ("flatten") keeps where things are.
    model = kseq.models.ImageCaptioner(tokenizer.vocab_size, image_size=scenes.IMAGE_SIZE, filters=(32, 64, 128),
                                       embed_dim=64, units=256, attention=ATTENTION,
                                       pooling="average" if ATTENTION else "flatten", peeky=ATTENTION is None)
    model.compile(keras.optimizers.Adam(2e-3, global_clipnorm=1.0), kseq.losses.MaskedSparseCategoricalCrossentropy(),
                  metrics=[kseq.metrics.MaskedAccuracy()])

checkpoint = os.path.join(flags.logdir, "best.weights.h5")
# The batches come in a new order each pass (a buffer of 64 shuffled); an evaluation every 150 steps.
model.fit(train.shuffle(64, seed=0).repeat(), steps_per_epoch=150, epochs=10_000, validation_data=valid, verbose=2,
          callbacks=[kseq.callbacks.TimeLimit(flags.minutes), keras.callbacks.TensorBoard(flags.logdir),
                     keras.callbacks.ModelCheckpoint(checkpoint, save_best_only=True, save_weights_only=True)])
steps = int(model.optimizer.iterations.numpy())
model.load_weights(checkpoint)  # the best evaluation's weights (and its optimizer state)

# Beam search, 4 beams, as the export decodes; BLEU counts n-grams shared
# with any of the five references, content accuracy what the caption says.
test = data["test"]
captions, ids = caption_images(model, tokenizer, test.images, MAX_WORDS, beam_size=4)
bleu = sacrebleu.corpus_bleu(captions, [list(refs) for refs in zip(*test.captions)]).score
accuracy = scenes.content_accuracy(captions, test.shapes)
for caption, reference in list(zip(captions, test.captions))[:3]:
    print(f"  {caption!r}\n  (a reference: {reference[0]!r})")
print(f"{steps:,} steps: test BLEU {bleu:.2f}, content accuracy {accuracy:.1%}")

if ATTENTION:  # a heat map over the picture for every word of three test captions (Images tab)
    writer = tf.summary.create_file_writer(os.path.join(flags.logdir, "attention"))
    write_image_attention(writer, steps, test.images[:3], model.caption_attention(test.images[:3], ids[:3]), captions)
    writer.flush()

# The export decodes the image bytes, resizes them and runs the beam search in the graph.
png = tf.io.encode_png(test.images[0]).numpy()
path = kseq.export.export_captioner(model, tokenizer, flags.export_dir, search=kseq.decoding.BeamSearch(MAX_WORDS),
                                    warmup_image=png)
print(f"logs: tensorboard --logdir {flags.logdir}\nSavedModel: {path} (image bytes -> caption)")
