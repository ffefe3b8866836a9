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
from kseq.data.caption_batches import CAPTION_BUCKETS, caption_batches
from kseq.data.tokenizers import tokenizer_files
from kseq.decoding import BeamSearch
from kseq.export.captioner import export_captioner
from kseq.layers.rnn_decoder import ATTENTION_TYPES
from kseq.models.image_captioner import POOLINGS
from kseq.training import task
from kseq.training.config import CadenceOptions, ClippingOptions, RNNOptions, option, options_parser, task_options
from kseq.training.devices import decide_jit_compile
from kseq.training.loop import CaptionMonitor, caption_images
from kseq.training.reporting import as_metrics, write_image_attention


def _filters_problem(text):
    """The message refusing `--filters TEXT`, else None."""
    if all(width.strip().isdigit() and int(width) > 0 for width in text.split(",")):
        return None
    return "--filters must be positive widths, comma-separated, e.g. 32,64,128"


def _backbone_problem(name):
    """The message for a `--backbone` keras.applications lacks, else None.

    The model is built after the data: a name keras lacks would stop the run there."""
    if hasattr(keras.applications, name):
        return None
    return (f"--backbone {name}: keras.applications has no model of that name: expected one such as MobileNetV2 or "
            "ResNet50")


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
    filters: str = option("32,64,128", "the CNN's widths, one stride-2 stage each", check=_filters_problem)
    backbone: str | None = option(None, "a keras.applications model by name instead of the CNN (random weights)",
                                  check=_backbone_problem)
    train_images: int = option(6000, "training scenes (the first N of the fixed train split)", minimum=1)
    valid_images: int = option(500, "validation scenes", minimum=1)
    test_images: int = option(500, "test scenes", minimum=1)
    batch_size: int = option(64, "captions per batch", minimum=1)
    learning_rate: float = option(2e-3, "Adam's learning rate", above=0)
    beam_size: int = option(4, "beams of the test decoding and the export", minimum=1)
    max_caption_length: int = option(40, "words per generated caption at most", minimum=1)
    monitor_images: int = option(200, "validation scenes captioned at every evaluation", minimum=1)
    attention_plots: int = option(3, "images whose per-word attention is drawn", minimum=0)

    def problems(self):
        return super().problems() + (["--init-from is not supported by kseq-train caption"] if self.init_from else [])


parse_args = options_parser(Options, __doc__, PRESETS)


def main(argv=None):
    """Trains, tests and exports the plain and/or attention captioners (`--models`).

    One after the other, each resumable on its own (`train_resumably`).

    Args:
        argv: `kseq-train caption`'s arguments, e.g. ["--models", "attention", "--attention", "bahdanau"];
            None (default) reads the command line.

    Returns:
        The metrics written to `<logdir>/metrics.json`, each model's under "models":
        test BLEU, content accuracy and, with attention, attention on the named shape.
    """
    options = parse_args(argv)
    task.name_xla_cache(options)  # before the first device query
    run = task.start(options, decide_jit_compile(options.jit_compile, num_shapes=len(CAPTION_BUCKETS) + 1,
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
    """Makes the export's search; `caption_images` decodes the test images with the same.

    Args:
        options: the task's options (--max-caption-length, --beam-size).

    Returns:
        A `BeamSearch`.
    """
    return BeamSearch(options.max_caption_length, beam_size=options.beam_size)


def train_resumably(run, name, data, tokenizer):
    """Trains one captioner once in `<logdir>/<name>`, keeping its epoch of best validation loss.

    A kill resumes from its last save; a restart after its training loads
    its weights. Every split's batches are bucketed by caption length
    (`caption_batches`), every reference caption of every image once per
    epoch, the training split in an order fixed by the `Fit`'s training
    position's data epoch; the first batch's shapes are printed.

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
    datasets = {split: caption_batches(scenes, tokenizer, options.batch_size,
                                       fit.position if split == "train" else None, options.seed, options.epochs)
                for split, scenes in data.items()}
    (images, target_in), labels = next(iter(datasets["train"]))
    print(f"first batch: images {tuple(images.shape)} {images.dtype.name}, target_ids "
          f"{tuple(target_in.shape)}, labels {tuple(labels.shape)}")

    def build():
        return run.compile(lambda: build_model(options, name, tokenizer.vocab_size, run.precision.policy),
                           [kseq.metrics.MaskedAccuracy()])

    def train():
        model = build()
        print(f"{name} captioner: {model.count_params():,} parameters, attention {model.attention}, "
              f"grid {model.grid_shape}")
        return run.fit(fit, model, datasets["train"], datasets["valid"],
                       [CaptionMonitor(data["valid"], tokenizer, logdir, options.max_caption_length, options.beam_size,
                                       options.monitor_images, options.attention_plots)], logdir=logdir,
                       hparams={"model": name})

    trained = run.train_once(name, fit, train, build, logdir=logdir)
    return trained.model, trained.metrics


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
    texts, ids = caption_images(model, tokenizer, scenes.images, options.max_caption_length, options.beam_size)
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

