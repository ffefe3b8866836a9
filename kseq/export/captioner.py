"""The image captioner's servable: PNG or JPEG bytes in, a caption out, the search in the graph."""

import tensorflow as tf

from kseq.decoding import BeamSearch
from kseq.decoding.output import decoded_text
from kseq.export.publishing import write_servable

IMAGE_SPEC = tf.TensorSpec([None], tf.string, name="image")
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def decode_images(image_bytes, size):
    """(B,) PNG or JPEG bytes -> (B, size, size, 3) float32 in [0, 1], with
    stock TensorFlow ops (TF Serving runs them): decoded, then resized
    (bilinear, antialiased) where an image is not size x size already.

    An empty string, bytes that are no PNG or JPEG, or an image that is not
    RGB (greyscale, with alpha) fail the whole request with an
    InvalidArgumentError that names `image`, its row and the problem.
    """

    def decode(row_and_bytes):
        row, data = row_and_bytes
        def problem(text, *values):
            return tf.strings.format("`image` {} " + text, (row, *values))

        is_png = tf.equal(tf.strings.substr(data, 0, len(_PNG_MAGIC)), _PNG_MAGIC)
        checks = [tf.debugging.Assert(tf.strings.length(data) > 0, [problem("is empty (0 bytes)")]),
                  tf.debugging.Assert(tf.logical_or(is_png, tf.io.is_jpeg(data)),
                                      [problem("is not a PNG or JPEG image")])]
        with tf.control_dependencies(checks):
            image = tf.io.decode_image(data, expand_animations=False)  # (H, W, C) uint8
        channels = tf.shape(image)[2]
        with tf.control_dependencies([tf.debugging.Assert(
                tf.equal(channels, 3), [problem("must have 3 colour channels (RGB); got {}", channels)])]):
            image = tf.image.convert_image_dtype(image, tf.float32)
        same = tf.reduce_all(tf.equal(tf.shape(image)[:2], [size, size]))
        image = tf.cond(same, lambda: image, lambda: tf.image.resize(image, [size, size], antialias=True))
        return tf.ensure_shape(tf.clip_by_value(image, 0.0, 1.0), [size, size, 3])

    rows = tf.range(tf.shape(image_bytes)[0])
    return tf.map_fn(decode, (rows, image_bytes),
                     fn_output_signature=tf.TensorSpec([size, size, 3], tf.float32))


def caption_function(model, tokenizer, search):
    """image bytes (B,) -> {"caption": strings (B,), "token_ids": (B, T'),
    "score": (B,)}: `decode_images`, the model's `search`, the tokenizer's
    text; in TensorFlow ops, usable in-process too."""

    def caption(image):
        images = decode_images(image, model.image_size)
        rows = tf.shape(images)[0]
        # An empty request runs one blank image: convolutions refuse a batch of 0.
        images = tf.pad(images, [[0, tf.maximum(1 - rows, 0)], [0, 0], [0, 0], [0, 0]])
        generated, scores = model.search(model.pack_images(images), search)
        text, token_ids = decoded_text(tokenizer, generated[:rows])
        scores = scores[:rows, 0] if scores.shape.rank == 2 else scores[:rows]  # a beam search's best
        return {"caption": text, "token_ids": token_ids, "score": scores}

    return caption


def export_captioner(model, tokenizer, export_dir: str, search=None, version: int | None = None,
                     assets: dict[str, bytes] | None = None, warmup_image=None) -> str:
    """Writes `export_dir/<version>/` for a kseq.models.ImageCaptioner: a
    SavedModel whose `serving_default` takes `image` tf.string (None,),
    PNG or JPEG bytes of any size (resized to the model's `image_size`),
    and returns `caption` tf.string (None,), `token_ids` int32 (None, None)
    and `score` float32 (None,), decoding with `search` (default: beam
    search, 4 beams, 32 tokens). It serves with TensorFlow (and
    tensorflow_text's ops, for the tokenizer) alone.

    Written atomically (see `write_servable`); `assets` ({file name:
    bytes}) go to the version's `assets/` folder; `warmup_image` (PNG or
    JPEG bytes) is TF Serving's warm-up request, when given.

    Returns:
        The path of the new version.
    """
    model._ensure_built()
    search = search or BeamSearch(32, beam_size=4)
    endpoints = {"serving_default": (caption_function(model, tokenizer, search), [IMAGE_SPEC])}
    warmup = {"serving_default": {"image": [warmup_image]}} if warmup_image else None
    return write_servable(export_dir, endpoints, (model, tokenizer), version, assets, warmup=warmup)
