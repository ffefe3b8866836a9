"""ImageCaptioner (with and without attention over the image grid) and its export."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import kseq
from kseq.data import scenes
from kseq.decoding import BeamSearch
from kseq.export.captioner import caption_function, decode_images, export_captioner
from kseq.models import ImageCaptioner
from support import TF_ONLY_PREAMBLE, assert_close, pad_right, subprocess_env, uncached_greedy

VOCAB, SIZE, EOS = 30, 16, kseq.EOS_ID
GRID = (4, 4)  # 16x16 images through two stride-2 stages
CONFIGS = {
    "plain-lstm": dict(cell="lstm"),
    "plain-gru-peeky-flatten": dict(cell="gru", peeky=True, pooling="flatten"),
    "general-lstm": dict(cell="lstm", attention="general"),
    "bahdanau-gru-2-layers": dict(cell="gru", attention="bahdanau", num_layers=2),
    "dot-rnn-peeky": dict(cell="rnn", attention="dot", peeky=True),  # grid width 8 != units 12: projected
}
ATTENTION = [name for name, config in CONFIGS.items() if config.get("attention")]
EACH_CONFIG = pytest.mark.parametrize("name", list(CONFIGS))


def small_model(name, **overrides):
    config = dict(image_size=SIZE, filters=(4, 8), embed_dim=8, units=12, dropout=0.1, **CONFIGS[name])
    config.update(overrides)
    return ImageCaptioner(VOCAB, **config)


def images(batch=3, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (batch, SIZE, SIZE, 3)).astype("uint8")


def targets(batch=3, length=6, seed=0):
    """BOS-first target ids, row r with r PAD at its end."""
    ids = np.random.default_rng(seed).integers(4, VOCAB, (batch, length)).astype("int32")
    ids[:, 0] = kseq.BOS_ID
    for row in range(batch):
        ids[row, length - row:] = 0
    return ids


@EACH_CONFIG
def test_padding_never_changes_real_positions(name):
    model = small_model(name)
    image, target_ids = images(), targets()
    logits = np.asarray(model({"images": image, "target_ids": target_ids}))
    padded = np.asarray(model({"images": image, "target_ids": pad_right(target_ids, 3)}))
    real = target_ids != 0
    assert_close(padded[:, : target_ids.shape[1]][real], logits[real])
    alone = np.asarray(model({"images": image[2:], "target_ids": target_ids[2:, :4]}))
    assert_close(alone[0], logits[2, :4])
    # The image matters, and uint8 pixels are floats / 255.
    other = np.asarray(model({"images": images(seed=5), "target_ids": target_ids}))
    assert not np.allclose(other, logits, atol=1e-3)
    floats = np.asarray(model({"images": image.astype("float32") / 255, "target_ids": target_ids}))
    assert_close(floats, logits)


@EACH_CONFIG
def test_cached_steps_equal_the_teacher_forced_pass(name):
    model = small_model(name)
    image, target_ids = images(), targets()
    logits = np.asarray(model((image, target_ids)))  # the pair form, as fit passes it
    state, start = model.begin_decoding(model.pack_images(image), max_length=8)
    np.testing.assert_array_equal(start, [kseq.BOS_ID] * 3)
    steps = []
    for index in range(target_ids.shape[1]):
        step_logits, state = model.step(tf.constant(target_ids[:, index]), state, index)
        steps.append(step_logits)
    real = target_ids != 0
    assert_close(np.stack(steps, 1)[real], logits[real], atol=2e-5)


@pytest.mark.parametrize("name", ATTENTION)
def test_attention_covers_the_whole_grid_and_sums_to_one(name):
    model = small_model(name)
    image, target_ids = images(), targets()
    state, _ = model.begin_decoding(model.pack_images(image), max_length=8)
    cells = GRID[0] * GRID[1]
    assert state["memory"].shape[:2] == (3, cells)
    assert state["memory_mask"].shape == (3, cells) and bool(tf.reduce_all(state["memory_mask"]))
    weights = np.asarray(model.attention_weights({"images": image, "target_ids": target_ids}))
    assert weights.shape == (3, target_ids.shape[1], cells)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert (weights > 0).all()  # no grid cell is masked
    assert weights.std(-1).max() > 1e-4  # and the weights are not uniform: they depend on the cells
    # generate's words come with the weights their steps used, over the (H', W') grid.
    out = model.generate_with_attention(image, max_length=6)
    ids, attention = np.asarray(out["ids"]), np.asarray(out["attention"])
    assert attention.shape == ids.shape + GRID
    real = ids != 0
    np.testing.assert_allclose(attention.sum((2, 3))[real], 1.0, atol=1e-5)
    assert not attention[~real].any()
    forced = np.concatenate([np.full((3, 1), kseq.BOS_ID), ids[:, :-1]], 1)
    again = np.asarray(model.attention_weights({"images": image, "target_ids": forced}))
    assert_close(attention.reshape(attention.shape[:2] + (-1,))[real], again[real])


def eos_prone(model, image, max_length=8):
    """Moves the EOS bias until greedy outputs end at >= 2 different steps,
    some before `max_length` (so the searches' early ends are exercised)."""
    model.generate(image, max_length=1)  # builds it
    bias = model.output_projection.bias
    start = bias.numpy()
    for weight in model.decoder.weights + model.output_projection.weights + model.embedding.weights:
        if len(weight.shape) >= 2:
            weight.assign(weight.numpy() * 3.0)  # logits that vary from step to step
    for amount in np.linspace(-2.0, 6.0, 33):
        bias.assign(start + amount * np.eye(VOCAB, dtype="float32")[EOS])
        ids = np.asarray(model.generate(image, max_length=max_length))
        lengths = {int(np.argmax(row == EOS)) + 1 if EOS in row else max_length for row in ids}
        if len(lengths) >= 2 and min(lengths) < max_length:
            return model
    raise AssertionError("test setup: no EOS bias gives outputs of different lengths")


@pytest.mark.parametrize("name", ["plain-gru-peeky-flatten", "general-lstm", "bahdanau-gru-2-layers"])
def test_greedy_is_the_naive_loop_and_beam_of_one(name):
    model = small_model(name, dropout=0.0)
    image = images(batch=6, seed=1)
    eos_prone(model, image)
    greedy = np.asarray(model.generate(image, max_length=8))
    expected = uncached_greedy(model, {"images": image}, 8)
    np.testing.assert_array_equal(greedy, expected[:, : greedy.shape[1]])
    assert not expected[:, greedy.shape[1]:].any()
    beam = model.generate(image, max_length=8, method="beam", beam_size=1, length_penalty=0.0)
    np.testing.assert_array_equal(beam, greedy)
    _, greedy_scores = model.generate(image, max_length=8, return_scores=True)
    _, beam_scores = model.generate(image, max_length=8, method="beam", beam_size=4, length_penalty=0.0,
                                    return_scores=True)
    assert np.all(np.asarray(beam_scores) >= np.asarray(greedy_scores) - 1e-5)
    sampled = [np.asarray(model.generate(image, max_length=8, method="sample", seed=3)) for _ in "ab"]
    np.testing.assert_array_equal(*sampled)


def test_fit_under_two_replicas_matches_one_device():
    """A tf.data set of ((images, target ids), labels) under a 2-replica
    MirroredStrategy trains the weights one device trains."""
    target_ids = targets(batch=8, length=7, seed=2)
    labels = np.roll(target_ids, -1, axis=1)
    labels[:, -1] = 0
    labels[(labels == 0) & (target_ids != 0)] = EOS
    data = tf.data.Dataset.from_tensor_slices(((images(8, seed=3), target_ids), labels)).batch(4)
    weights = {}
    for replicas in (1, 2):
        strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)])
        with strategy.scope():
            keras.utils.set_random_seed(7)
            model = small_model("general-lstm", dropout=0.0, peeky=True)
            model.build()
            start = [w.numpy() for w in model.weights]
            model.compile(keras.optimizers.SGD(0.5), kseq.losses.MaskedSparseCategoricalCrossentropy())
        model.fit(data, epochs=1, verbose=0)
        weights[replicas] = [w.numpy() for w in model.weights]
    assert max(np.abs(a - b).max() for a, b in zip(weights[1], start)) > 1e-2, "it trained"
    for one, two in zip(weights[1], weights[2]):
        np.testing.assert_allclose(two, one, atol=2e-5)


@pytest.mark.parametrize("name", ["plain-gru-peeky-flatten", "bahdanau-gru-2-layers"])
def test_keras_round_trip(name, tmp_path):
    model = small_model(name)
    image, target_ids = images(), targets()
    expected = model({"images": image, "target_ids": target_ids})
    model.save(tmp_path / "captioner.keras")
    loaded = keras.saving.load_model(tmp_path / "captioner.keras")
    assert isinstance(loaded, ImageCaptioner)
    assert loaded.get_config() == model.get_config()
    assert_close(loaded({"images": image, "target_ids": target_ids}), expected, atol=1e-6)
    np.testing.assert_array_equal(loaded.generate(image, max_length=5), model.generate(image, max_length=5))


def test_backbone_by_name_with_random_weights():
    model = ImageCaptioner(VOCAB, image_size=32, backbone="MobileNetV2", embed_dim=8, units=8,
                           attention="general")
    assert model.grid_shape == (1, 1)  # MobileNetV2 divides by 32
    logits = model({"images": np.zeros((2, 32, 32, 3), "uint8"), "target_ids": targets(2)})
    assert tuple(logits.shape) == (2, 6, VOCAB)


@pytest.mark.parametrize("image, message", [
    (np.zeros((2, 16, 16, 1), "uint8"), r"`images` must hold images of shape \(batch, 16, 16, 3\) \(RGB\); "
                                        r"got shape \(2, 16, 16, 1\)"),
    (np.zeros((16, 16, 3), "uint8"), r"got shape \(16, 16, 3\)"),
    (np.zeros((2, 20, 16, 3), "uint8"), r"\(image_size=16\); got 20x16 images: resize them first"),
    (np.zeros((2, 16, 16, 3), bool), "float .* or uint8 pixels; got dtype bool"),
    (tf.ragged.constant([[1], [2, 3]]), "dense tensor"),
])
def test_bad_images_name_the_argument(image, message):
    model = small_model("general-lstm")
    with pytest.raises(ValueError, match=message):
        model.generate(image, max_length=4)
    with pytest.raises(ValueError, match=message):
        model({"images": image, "target_ids": targets(2)})


def test_bad_config_and_calls():
    for config, message in [(dict(pooling="max"), "`pooling` must be one of"),
                            (dict(backbone="NoSuchNet"), "`backbone` must be None or the name of a keras"),
                            (dict(filters=()), "`filters` must be a non-empty list"),
                            (dict(attention="luong"), "`attention` must be one of"),
                            (dict(image_size=0), "`image_size` must be >= 1")]:
        with pytest.raises(ValueError, match=message):
            small_model("plain-lstm", **config)
    model = small_model("plain-lstm")
    with pytest.raises(ValueError, match=r"keys 'images' \(B, H, W, 3\) and 'target_ids'"):
        model({"source_ids": targets(2), "target_ids": targets(2)})
    with pytest.raises(ValueError, match="same batch size; got 3 and 2"):
        model({"images": images(3), "target_ids": targets(2)})
    with pytest.raises(ValueError, match="needs a model with `attention`"):
        model.generate_with_attention(images(2), max_length=3)


# Export --------------------------------------------------------------------------------


def png(image):
    return tf.io.encode_png(image).numpy()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    keras.utils.set_random_seed(3)
    model = ImageCaptioner(scenes.scene_tokenizer().vocab_size, image_size=SIZE, filters=(4, 8), embed_dim=8,
                           units=12, attention="general")
    tokenizer = scenes.scene_tokenizer()
    search = BeamSearch(10, beam_size=3)
    path = export_captioner(model, tokenizer, str(tmp_path_factory.mktemp("export")), search=search,
                            warmup_image=png(images(1)[0]))
    return model, tokenizer, search, path


@pytest.fixture(scope="module")
def served(exported):
    """The export's serving signature, loaded once for the tests that only
    call it (a load takes about a second)."""
    return tf.saved_model.load(exported[3]).signatures["serving_default"]


def test_export_captions_png_and_jpeg_as_the_model_does(exported, served):
    model, tokenizer, search, _ = exported
    image = images(3, seed=9)
    jpeg = [tf.io.encode_jpeg(i).numpy() for i in image]
    large = tf.image.resize(image[:1].astype("float32"), [40, 40]).numpy().round().astype("uint8")
    requests = [png(i) for i in image] + jpeg[:1] + [png(large[0])]
    inputs = np.concatenate([image, tf.io.decode_jpeg(jpeg[0]).numpy()[None],
                             np.zeros((1, SIZE, SIZE, 3), "uint8")])
    out = served(image=tf.constant(requests))
    expected = caption_function(model, tokenizer, search)
    # The model's own beam search on the same pixels gives the same captions.
    ids = np.asarray(model.generate(inputs[:4], max_length=10, method="beam", beam_size=3))
    np.testing.assert_array_equal(out["token_ids"].numpy()[:4, : ids.shape[1]], ids)
    texts = [t.decode() for t in out["caption"].numpy()]
    assert texts[:4] == [t.decode() for t in tokenizer.detokenize(ids).numpy()]
    assert all(text and set(text.split()) <= set(scenes.vocabulary()) | {"[UNK]"} for text in texts)
    # A 40x40 image is resized in the graph, as tf.image.resize would.
    resized = tf.image.resize(tf.image.convert_image_dtype(large, tf.float32), [SIZE, SIZE], antialias=True)
    in_process = expected(tf.constant([png(large[0])]))
    assert in_process["caption"].numpy()[0] == out["caption"].numpy()[-1]
    np.testing.assert_allclose(decode_images(tf.constant([png(large[0])]), SIZE), resized, atol=1e-6)
    assert served(image=tf.constant([], tf.string))["caption"].shape == (0,)


def grey_png():
    return tf.io.encode_png(np.zeros((SIZE, SIZE, 1), "uint8")).numpy()


@pytest.mark.parametrize("request_, message", [
    ([b""], r"`image` 0 is empty \(0 bytes\)"),
    ([b"not an image at all"], "`image` 0 is not a PNG or JPEG image"),
    (["png", b"GIF89a..."], "`image` 1 is not a PNG or JPEG image"),
    ([grey_png()], r"`image` 0 must have 3 colour channels \(RGB\); got 1"),
    ([tf.io.encode_png(np.zeros((4, 4, 4), "uint8")).numpy()], "3 colour channels.*got 4"),
])
def test_bad_images_get_a_clear_error(served, request_, message):
    request_ = [png(images(1)[0]) if r == "png" else r for r in request_]
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        served(image=tf.constant(request_))


SERVE_IMAGES = TF_ONLY_PREAMBLE + """
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
images = [open(path, "rb").read() for path in sys.argv[2:]]
print(json.dumps([c.decode() for c in serve(image=tf.constant(images))["caption"].numpy()]))
"""


def test_export_serves_with_tensorflow_alone(exported, tmp_path):
    model, tokenizer, search, path = exported
    files = []
    for row, image in enumerate(images(2, seed=11)):
        files.append(str(tmp_path / f"{row}.png"))
        open(files[-1], "wb").write(png(image))
    result = subprocess.run([sys.executable, "-c", SERVE_IMAGES, path, *files], capture_output=True, text=True,
                            env=subprocess_env(), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    served = json.loads(result.stdout.strip().splitlines()[-1])
    expected = caption_function(model, tokenizer, search)(tf.constant([open(f, "rb").read() for f in files]))
    assert served == [t.decode() for t in expected["caption"].numpy()]
    assert os.path.exists(os.path.join(path, "assets.extra", "tf_serving_warmup_requests"))
