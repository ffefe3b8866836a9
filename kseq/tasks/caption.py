"""Caption images (one-to-many), with and without attention over the image; export image bytes -> caption.

Data: kseq.data.scenes, generated offline with a known answer: 64x64 images of
one to three coloured shapes, five reference captions each from a grammar
with synonyms and three word orders; fixed train/valid/test splits. Two
kseq.models.ImageCaptioner are trained with Adam, each for `--max-minutes`,
keeping its epoch of best validation loss:

- "plain": no attention; the image is one vector (a learned projection of
  the whole feature grid, `--plain-pooling`) that sets the LSTM's initial
  state and joins every step's input ("Show and Tell", peeky);
- "attention": the LSTM attends over the encoder's 8x8 grid at every word
  (`--attention`, Luong "general" by default; "Show, Attend and Tell").

Each is tested with beam search on the test images: `test_bleu` (sacreBLEU
against the five references) and `content_accuracy` (the share of captions
whose shapes, colours and positions, read back by the grammar's parser,
are the scene's), and for the attention model `attention_on_named_shape`:
on scenes of two or three shapes, the share of shape words whose attention
weighs the shape the word names more than any other shape. All go to
`<logdir>/metrics.json`. TensorBoard (runs/caption/<model>): loss curves,
validation content accuracy and sample captions after every evaluation, and for
the attention model one heat map per generated word over the image
(Images, "attention"). Each model is exported to `<export-dir>/<model>/
<version>/`: PNG or JPEG bytes in, caption out, beam search in the graph.

About 11 minutes on 2 CPU cores: 5 minutes of training per model, the rest
data, tests and export.

    kseq-train caption
    kseq-train caption --models attention --attention bahdanau --max-minutes 8
    kseq-train caption --preset gpu
    tensorboard --logdir runs/caption
"""

import os

import keras
import numpy as np
import sacrebleu
import tensorflow as tf

import kseq
from kseq.data import scenes as scene_data
from kseq.data.epoch_order import epoch_ordered_batches
from kseq.data.text_pairs import add_specials
from kseq.data.tokenizers import tokenizer_files
from kseq.decoding import BeamSearch
from kseq.export.captioner import export_captioner
from kseq.extras import missing
from kseq.layers.rnn_decoder import ATTENTION_TYPES
from kseq.models.image_captioner import POOLINGS
from kseq.training import task
from kseq.training.config import CadenceOptions, ClippingOptions, RNNOptions, option, options_parser, task_options
from kseq.training.devices import decide_jit_compile
from kseq.training.progress import global_step
from kseq.training.reporting import as_metrics, write_image_attention

BUCKETS = [12, 22, 32]  # caption lengths (BOS included) where batches are cut: 1, 2, 3 shapes
PRESETS = {
    "quick": {},  # the defaults: 2 CPU cores, 5 minutes a model
    "gpu": dict(units=512, embed_dim=128, filters="64,128,256", train_images=20000, batch_size=128,
                max_minutes=5.0),
}


@task_options("caption", units=256, embed_dim=64, epochs=100, max_minutes=5.0)
class Options(RNNOptions, CadenceOptions, ClippingOptions):
    models: str = option("both", "which captioners to train", choices=("both", "attention", "plain"))
    attention: str = option("general", "the attention model's attention",
                            choices=tuple(a for a in ATTENTION_TYPES if a))
    plain_pooling: str = option("flatten", "how the plain model makes its image vector", choices=POOLINGS)
    # The attention model with peeky learned far less in its 5 minutes than
    # without (benchmarks/RESULTS.md, captions).
    peeky: str = option("plain", "which captioners feed the image vector to every step",
                        choices=("plain", "attention", "both", "none"))
    filters: str = option("32,64,128", "the CNN's widths, one stride-2 stage each")
    backbone: str | None = option(None, "a keras.applications model by name instead of the CNN (random weights)")
    train_images: int = option(6000, "training scenes (the first N of the fixed train split)", minimum=1)
    valid_images: int = option(500, "validation scenes", minimum=1)
    test_images: int = option(500, "test scenes", minimum=1)
    batch_size: int = option(64, "captions per batch", minimum=1)
    learning_rate: float = option(2e-3, "Adam's learning rate")
    beam_size: int = option(4, "beams of the test decoding and the export", minimum=1)
    max_caption_length: int = option(40, "words per generated caption at most", minimum=1)
    monitor_images: int = option(200, "validation scenes captioned at every evaluation", minimum=1)
    attention_plots: int = option(3, "images whose per-word attention is drawn", minimum=0)

    def problems(self):
        widths = self.filters.split(",")
        return super().problems() + [message for broken, message in (
            (not all(w.strip().isdigit() and int(w) > 0 for w in widths), "--filters must be positive widths, "
             "comma-separated, e.g. 32,64,128"),
            (bool(self.init_from), "--init-from is not supported by kseq-train caption"),
        ) if broken]


parse_args = options_parser(Options, __doc__, PRESETS)


def main(argv=None):
    """Trains, tests and exports the plain and/or attention captioners (`--models`).

    Args:
        argv: the task's options; None (default) reads the command line.

    Returns:
        The metrics written to `<logdir>/metrics.json`, each model's under "models".
    """
    options = parse_args(argv)
    run = task.start(options, decide_jit_compile(options.jit_compile, num_shapes=len(BUCKETS) + 1,
                                                 budget_minutes=options.max_minutes))
    data = {split: scene_data.load_scenes(split, getattr(options, f"{split}_images"), options.seed)
            for split in ("train", "valid", "test")}
    tokenizer = scene_data.scene_tokenizer()
    names = ["plain", "attention"] if options.models == "both" else [options.models]
    metrics, paths = {"models": {}}, {}
    for name in names:
        model, trained = train_resumably(run, name, data, tokenizer)
        tested = run.phases.once(f"test_{name}", lambda: test(options, model, name, data["test"], tokenizer,
                                                             trained["steps"]))
        first_image = png_bytes(data["test"].images[0])
        paths[name] = run.export(lambda: export_captioner(
            model, tokenizer, os.path.join(options.export_dir, name), search=beam_search(options),
            assets=tokenizer_files(tokenizer), warmup_image=first_image), {"image": [first_image]}, f"export_{name}")
        metrics["models"][name] = {**trained, **tested, "export": paths[name]}
        for key in ("test_bleu", "content_accuracy"):
            metrics[f"{key}_{name}"] = tested[key]
    if "attention" in names:
        metrics["attention_on_named_shape"] = metrics["models"]["attention"]["attention_on_named_shape"]
    metrics.update(wall_seconds=round(run.seconds, 1), steps=sum(m["steps"] for m in metrics["models"].values()),
                   references=scene_data.REFERENCES, **as_metrics(run.decisions(model)))
    run.write_metrics(metrics, scores=tuple(key for key in metrics if key.startswith(("test_bleu_",
                                                                                    "content_accuracy_"))))
    print(f"a reference: {data['test'].captions[0][0]!r}")
    for name in names:
        print(f"{name}: test BLEU {metrics['models'][name]['test_bleu']:.1f}, content accuracy "
              f"{metrics['models'][name]['content_accuracy']:.1%}")
    run.done()
    return metrics


# Data ----------------------------------------------------------------------------------


def make_datasets(options, data, tokenizer, position):
    """Makes every split's batches, bucketed by caption length; prints the first batch's shapes.

    Every reference caption of every image comes once per epoch; the
    training split in an order fixed by `position`'s data epoch.

    Args:
        options: the task's options (--batch-size, --seed, --epochs).
        data: {split: scenes}.
        tokenizer: the caption tokenizer.
        position: the `Fit`'s training position.

    Returns:
        {split: batches of ((images (B, H, W, 3) uint8, BOS + words (B, T)),
        words + EOS (B, T))}.
    """
    datasets = {split: make_dataset(scenes, tokenizer, options, position if split == "train" else None)
                for split, scenes in data.items()}
    (images, target_in), labels = next(iter(datasets["train"]))
    print(f"first batch: images {tuple(images.shape)} {images.dtype.name}, target_ids "
          f"{tuple(target_in.shape)}, labels {tuple(labels.shape)}")
    return datasets


def make_dataset(scenes, tokenizer, options, position=None):
    """Makes one split's batches, bucketed by caption length.

    Args:
        scenes: the split's scenes (images and their reference captions).
        tokenizer: the caption tokenizer.
        options: the task's options (--batch-size, --seed, --epochs).
        position: the training position, for the training split's epoch
            order; None (default): one pass, in order, for a held-out split.

    Returns:
        A dataset of ((images (B, H, W, 3) uint8, BOS + words (B, T)),
        words + EOS (B, T)).
    """
    references = len(scenes.captions[0])
    target_in, target_out = add_specials(tokenizer.tokenize([c for cs in scenes.captions for c in cs]))
    which = np.repeat(np.arange(len(scenes), dtype=np.int32), references)  # each caption's image
    images = tf.constant(scenes.images)
    slices = (tf.constant(which), target_in, target_out)

    def batch(examples):
        # Rows of a ragged tensor come out ragged; padded batches need them dense.
        dense = examples.map(lambda i, inputs, labels: ((i, tf.identity(inputs)), tf.identity(labels)))
        batches = dense.bucket_by_sequence_length(lambda inputs, labels: tf.shape(labels)[0], BUCKETS,
                                                  [options.batch_size] * (len(BUCKETS) + 1))
        # Images join after batching: one gather per batch, not a copy per caption.
        return batches.map(lambda inputs, labels: ((tf.gather(images, inputs[0]), inputs[1]), labels))

    if position is not None:
        return epoch_ordered_batches(slices, position, batch, seed=options.seed, epochs=options.epochs)
    return batch(tf.data.Dataset.from_tensor_slices(slices)).prefetch(tf.data.AUTOTUNE)


def png_bytes(image):
    """Encodes an image as PNG bytes, what the export takes.

    Args:
        image: (H, W, 3) uint8.

    Returns:
        The PNG file's bytes.
    """
    return tf.io.encode_png(image).numpy()


# Models --------------------------------------------------------------------------------


def build_model(options, name, vocab_size, precision="float32"):
    """Makes the "plain" or "attention" captioner of these options, unbuilt.

    Args:
        options: the task's options (sizes, --attention, --peeky, ...).
        name: "plain" or "attention".
        vocab_size: V, the caption tokenizer's size.
        precision: the dtype policy. Default "float32".

    Returns:
        An `ImageCaptioner` named "<name>_captioner".
    """
    return kseq.models.ImageCaptioner(
        vocab_size, image_size=scene_data.IMAGE_SIZE, filters=[int(w) for w in options.filters.split(",")],
        backbone=options.backbone, embed_dim=options.embed_dim, units=options.units, cell=options.cell,
        num_layers=options.num_layers, attention=options.attention if name == "attention" else None,
        peeky=options.peeky in (name, "both"), pooling="average" if name == "attention" else options.plain_pooling,
        dropout=options.dropout, dtype=precision, name=f"{name}_captioner",
    )


def beam_search(options):
    """Makes the export's search; `caption` decodes the test images with the same.

    Args:
        options: the task's options (--max-caption-length, --beam-size).

    Returns:
        A `BeamSearch`.
    """
    return BeamSearch(options.max_caption_length, beam_size=options.beam_size)


def caption(model, tokenizer, images, options, method="beam", batch=100):
    """Captions images, decoded as the export does (beam search) or greedily.

    Args:
        model: the captioner.
        tokenizer: the caption tokenizer.
        images: (N, H, W, 3) uint8.
        options: the task's options (--max-caption-length, --beam-size).
        method: "beam" (default) or "greedy".
        batch: images a call of `generate`. Default 100.

    Returns:
        (N caption texts, their ids (N, T) padded with 0 to the longest).
    """
    texts, ids = [], []
    for begin in range(0, len(images), batch):
        generated = model.generate(images[begin:begin + batch], max_length=options.max_caption_length,
                                   method=method, beam_size=options.beam_size)
        texts += [t.decode() for t in tokenizer.detokenize(generated).numpy()]
        ids.append(generated.numpy())
    width = max(i.shape[1] for i in ids)
    return texts, np.concatenate([np.pad(i, [(0, 0), (0, width - i.shape[1])]) for i in ids])


def train_resumably(run, name, data, tokenizer):
    """Trains one captioner once in `<logdir>/<name>`, keeping its epoch of best validation loss.

    A kill resumes from its last save; a restart after its training loads
    its weights.

    Args:
        run: the task's `Run`.
        name: "plain" or "attention".
        data: {split: scenes}.
        tokenizer: the caption tokenizer.

    Returns:
        (model, its training metrics).
    """
    options = run.options
    logdir = os.path.join(options.logdir, name)
    fit = run.make_fit(name, monitor="val_loss")
    datasets = make_datasets(options, data, tokenizer, fit.position)

    def build():
        return run.compile(lambda: build_model(options, name, tokenizer.vocab_size, run.precision.policy),
                           [kseq.metrics.MaskedAccuracy()])

    def train():
        model = build()
        print(f"{name} captioner: {model.count_params():,} parameters, attention {model.attention}, "
              f"grid {model.grid_shape}")
        return run.fit(fit, model, datasets["train"], datasets["valid"],
                       [CaptionMonitor(data["valid"], options, tokenizer, logdir)], logdir=logdir,
                       hparams={"model": name})

    trained = run.train_once(name, fit, train, build, logdir=logdir)
    return trained.model, trained.metrics


class CaptionMonitor(keras.callbacks.Callback):
    """At every evaluation: greedy captions of the first `monitor_images`
    validation scenes, their content accuracy (printed, logged, added to
    the epoch's logs) and samples; the attention model's per-word heat maps.

    Args:
        scenes: the validation scenes.
        options: the task's options (--monitor-images, --attention-plots, ...).
        tokenizer: the caption tokenizer.
        logdir: the model's folder; the logs go to its "generation" run.
    """

    def __init__(self, scenes, options, tokenizer, logdir):
        super().__init__()
        count = options.monitor_images
        self.images, self.shapes = scenes.images[:count], scenes.shapes[:count]
        self.references = [captions[0] for captions in scenes.captions[:count]]
        self.options, self.tokenizer = options, tokenizer
        self.writer = tf.summary.create_file_writer(os.path.join(logdir, "generation"))

    def on_epoch_end(self, epoch, logs=None):
        texts, ids = caption(self.model, self.tokenizer, self.images, self.options, method="greedy")
        accuracy = scene_data.content_accuracy(texts, self.shapes)
        if logs is not None:
            logs["val_content_accuracy"] = accuracy
        print(f"\nvalid content accuracy {accuracy:.1%}; {texts[0]!r} (reference {self.references[0]!r})")
        step = global_step(self.model)
        with self.writer.as_default(step=step):
            tf.summary.scalar("content_accuracy", accuracy)
            tf.summary.text("samples", "\n\n".join(f"- {t}  \n  (a reference: {r})"
                                                   for t, r in zip(texts[:5], self.references)))
        if self.model.has_attention and self.options.attention_plots and not missing(
                "plots", "attention maps are not drawn"):
            images = self.images[:self.options.attention_plots]
            write_image_attention(self.writer, step, images, self.model.caption_attention(images, ids[:len(images)]),
                                  texts)
        self.writer.flush()


# Test ----------------------------------------------------------------------------------


def test(options, model, name, scenes, tokenizer, step):
    """Scores beam-search captions of the test scenes.

    Args:
        options: the task's options.
        model: the trained captioner.
        name: "plain" or "attention", for the logs.
        scenes: the test scenes.
        tokenizer: the caption tokenizer.
        step: the training step the heat maps are logged at.

    Returns:
        {"test_bleu" against the references, "content_accuracy" (also by
        shape count), "samples"; for the attention model, how often the
        shape words look at their shape}.
    """
    texts, ids = caption(model, tokenizer, scenes.images, options)
    references = [list(column) for column in zip(*scenes.captions)]  # sacrebleu: one list per reference
    results = {
        "test_bleu": round(float(sacrebleu.corpus_bleu(texts, references).score), 2),
        "content_accuracy": round(scene_data.content_accuracy(texts, scenes.shapes), 4),
        "content_accuracy_by_shapes": {
            count: round(scene_data.content_accuracy(*zip(*[(t, s) for t, s in zip(texts, scenes.shapes)
                                                             if len(s) == count])), 4)
            for count in sorted({len(s) for s in scenes.shapes})},
        "samples": [{"caption": t, "reference": r[0]} for t, r in zip(texts[:5], scenes.captions)],
    }
    if model.has_attention:
        attention = np.asarray(model.caption_attention(scenes.images, ids))
        hits = [hit for row, text in enumerate(texts) for hit in scene_data.named_shape_attention(
            text, attention[row], scenes.shapes[row], scenes.boxes[row])]
        results["attention_on_named_shape"] = round(float(np.mean(hits)), 4) if hits else None
        results["shape_words_checked"] = len(hits)
        writer = tf.summary.create_file_writer(os.path.join(options.logdir, name, "test"))
        images = scenes.images[:options.attention_plots]
        write_image_attention(writer, step, images, attention[:len(images)], texts)
        writer.flush()
    print(f"{name}: test BLEU {results['test_bleu']}, content accuracy {results['content_accuracy']:.1%}"
          + (f", attention on the named shape {results['attention_on_named_shape']}" if model.has_attention else ""))
    return results

