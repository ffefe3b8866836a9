"""The image captioner's servable: PNG or JPEG bytes in, a caption out, the search in the graph."""

import tensorflow as tf

from kseq.decoding import BeamSearch
from kseq.decoding.output import decoded_text
from kseq.export.publishing import write_servable

IMAGE_SPEC = tf.TensorSpec([None], tf.string, name="image")
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def decode_images(image_bytes, size):
    """Decodes PNG or JPEG bytes into images of `size` x `size` pixels, with stock TensorFlow ops.

    TF Serving runs these ops: each image is decoded, then resized (bilinear,
    antialiased) where it is not `size` x `size` already.

    Args:
        image_bytes: (B,) tf.string, one PNG or JPEG file each.
        size: the side of the output images, in pixels.

    Returns:
        (B, size, size, 3) float32 in [0, 1].

    Raises:
        tf.errors.InvalidArgumentError: an empty string, bytes that are no PNG
            or JPEG, or an image that is not RGB (greyscale, with alpha) fails
            the whole request, with a message that names `image`, its row and
            the problem.
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
    """Makes the function that captions image bytes: `decode_images`, the model's `search`, the tokenizer's text.

    It runs in TensorFlow ops: the function the exported signature serves,
    usable in-process too.

    Args:
        model: a built kseq.models.ImageCaptioner.
        tokenizer: the kseq tokenizer of its captions.
        search: a kseq.decoding search; a beam search gives its best hypothesis.

    Returns:
        A function `(image (B,) tf.string) -> {"caption": (B,) strings,
        "token_ids": (B, T) int32, "score": (B,) float32}`.
    """

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
    """Writes `export_dir/<version>/`, a SavedModel that captions images, for a kseq.models.ImageCaptioner.

    Its `serving_default` takes `image` tf.string (None,),
    PNG or JPEG bytes of any size (resized to the model's `image_size`),
    and returns `caption` tf.string (None,), `token_ids` int32 (None, None)
    and `score` float32 (None,). It serves with TensorFlow (and
    tensorflow_text's ops, for the tokenizer) alone. Written atomically
    (see `write_servable`).

    Args:
        model: the ImageCaptioner.
        tokenizer: the kseq tokenizer of its captions.
        export_dir: the folder of the versions (TF Serving's model folder).
        search: the kseq.decoding search. Default: beam search, 4 beams, 32 tokens.
        version: an int >= 0 whose folder is absent or empty. Default None: the next free version.
        assets: {file name: bytes} for the version's `assets/` folder. Default None.
        warmup_image: PNG or JPEG bytes, TF Serving's warm-up request. Default None: none written.

    Returns:
        The path of the new version.

    Raises:
        ValueError: `export_dir` is a file, or `version` is taken or not an int >= 0.
    """
    model._ensure_built()
    search = search or BeamSearch(32, beam_size=4)
    endpoints = {"serving_default": (caption_function(model, tokenizer, search), [IMAGE_SPEC])}
    warmup = {"serving_default": {"image": [warmup_image]}} if warmup_image else None
    return write_servable(export_dir, endpoints, (model, tokenizer), version, assets, warmup=warmup)
