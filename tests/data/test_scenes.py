"""kseq.data.scenes: images, captions and the parser agree with the scenes."""

import numpy as np
import pytest

from kseq.data import scenes
from kseq.data.scenes import Shape


@pytest.fixture(scope="module")
def sample():
    return scenes.generate_scenes(300, seed=5)


def test_seeded_fixed_splits():
    first, again = scenes.load_scenes("valid", 20), scenes.load_scenes("valid", 20)
    np.testing.assert_array_equal(first.images, again.images)
    assert first.captions == again.captions
    # A prefix of a larger draw: `count` picks the first N of one fixed split.
    np.testing.assert_array_equal(scenes.load_scenes("valid", 40).images[:20], first.images)
    other = scenes.load_scenes("test", 20)
    assert not np.array_equal(other.images, first.images)
    assert scenes.load_scenes("valid", 20, seed=1).captions != first.captions


def test_every_reference_parses_back_to_its_scene(sample):
    assert sample.images.shape == (300, 64, 64, 3) and sample.images.dtype == np.uint8
    counts = {len(shapes) for shapes in sample.shapes}
    assert counts == {1, 2, 3}
    for captions, shapes in zip(sample.captions, sample.shapes):
        assert len(captions) == scenes.REFERENCES and len(set(captions)) > 1  # the references vary
        for caption in captions:
            parsed = scenes.parse_caption(caption)
            assert scenes.content(parsed) == scenes.content(shapes), caption
            order = [scenes.POSITIONS.index(p.position) for p in parsed]
            assert order == sorted(order), caption  # reading order, top left first
            # A size, where a clause names one, is the shape's.
            by_content = {(s.kind, s.colour, s.position): s.size for s in shapes}
            assert all(p.size in (None, by_content[(p.kind, p.colour, p.position)]) for p in parsed)


def test_grammar_varies_words_and_orders(sample):
    captions = [c for cs in sample.captions for c in cs]
    words = {w for c in captions for w in c.split()}
    assert set(scenes.vocabulary()) == words  # every word is used, none is unknown
    assert any(c.startswith("a ") and " is " in c for c in captions)  # "a red disc is on the left"
    assert any(" there is " in c for c in captions)  # "on the left there is a red disc"
    assert any(c.startswith("a ") and " is " not in c for c in captions)  # "a red disc on the left"


def test_images_show_the_shapes_where_the_captions_say(sample):
    for image, shapes, boxes in zip(sample.images[:100], sample.shapes, sample.boxes):
        for shape, (top, left, bottom, right) in zip(shapes, boxes):
            row, column = divmod(scenes.POSITIONS.index(shape.position), 3)
            centre = ((top + bottom) / 2, (left + right) / 2)
            assert row * 64 / 3 - 4 <= centre[0] <= (row + 1) * 64 / 3 + 4
            assert column * 64 / 3 - 4 <= centre[1] <= (column + 1) * 64 / 3 + 4
            # The box's pixels nearest the shape's colour are close to it:
            # the shape is drawn in its colour (every kind covers its centre).
            pixels = image[top:bottom, left:right].reshape(-1, 3).astype(float)
            distance = np.abs(pixels - scenes.COLOURS[shape.colour]).sum(1)
            assert (distance < 60).sum() >= 10


@pytest.mark.parametrize("caption, expected", [
    ("a big red box on the left", [Shape("square", "red", "large", "left")]),
    ("at the lower right there is a plus and a little green triangle is near the top",
     None),  # the first clause names no colour: parsed, with colour None
    ("a red circle is in the flat middle", "unknown word"),
    ("a red blue circle on the left", "a field twice"),
    ("a red circle at the top in the middle", "centre with a side"),
])
def test_parser_reads_or_refuses(caption, expected):
    parsed = scenes.parse_caption(caption)
    if isinstance(expected, list):
        assert parsed == expected
    elif expected is None:
        assert parsed[0] == Shape("cross", None, None, "bottom right")
        assert parsed[1] == Shape("triangle", "green", "small", "top")
    elif expected == "centre with a side":
        assert parsed[0].position is None
    else:
        assert parsed is None


def test_content_check_catches_each_kind_of_mistake():
    shapes = [Shape("circle", "red", "small", "left"), Shape("square", "blue", "large", "top right")]
    right = "a red circle on the left and a big blue box in the top right corner"
    assert scenes.content_matches(right, shapes)
    assert scenes.content_matches("a small blue square is at the upper right and a red disc is at the left", shapes)
    for wrong in ["a red circle on the left",  # a shape missing
                  right + " and a red circle on the left",  # one too many
                  right.replace("blue", "green"), right.replace("circle", "triangle"),
                  right.replace("top right", "bottom right"), right.replace("left", "middle", 1),
                  "a red circle on the left and", ""]:
        assert not scenes.content_matches(wrong, shapes), wrong
    assert scenes.content_accuracy([right, "a red circle"], [shapes, shapes]) == 0.5
    with pytest.raises(ValueError, match="`captions` and `scenes_shapes` must be parallel"):
        scenes.content_accuracy([right], [])


def test_box_cells_and_attention_on_the_named_shape():
    cells = scenes.box_cells((0, 0, 10, 20), grid=8)  # 8-pixel cells: rows 0-1, columns 0-2
    assert cells.sum() == 6 and cells[:2, :3].all()
    shapes = [Shape("circle", "red", "small", "top left"), Shape("square", "blue", "small", "bottom right")]
    boxes = [(2, 2, 12, 12), (50, 50, 60, 60)]
    caption = "a red circle in the top left corner and a blue box at the lower right"
    attention = np.full((len(caption.split()), 8, 8), 1 / 64)
    attention[2] = 0.0
    attention[2, 0, 0] = 1.0  # "circle" looks at the circle
    attention[10] = 0.0
    attention[10, 0, 0] = 1.0  # "box" looks at the circle too
    assert scenes.named_shape_attention(caption, attention, shapes, boxes) == [True, False]
    # One shape: nothing to tell apart.
    assert scenes.named_shape_attention("a red circle in the top left corner", attention, shapes[:1],
                                        boxes[:1]) == []


def test_tokenizer_spells_every_caption(sample):
    tokenizer = scenes.scene_tokenizer()
    captions = sample.captions[0] + sample.captions[1]
    ids = tokenizer.tokenize(captions)
    assert int(np.min(ids.flat_values)) > 4  # no UNK, no "[UNK]" word (id 4)
    assert [t.decode() for t in tokenizer.detokenize(ids.to_tensor()).numpy()] == captions


@pytest.mark.parametrize("call, message", [
    (lambda: scenes.load_scenes("dev"), r"`split` must be one of \['train', 'valid', 'test'\]"),
    (lambda: scenes.load_scenes("train", count=0), "`count` must be >= 1"),
    (lambda: scenes.generate_scenes(2, max_shapes=10), "`max_shapes` must be <= 9"),
    (lambda: scenes.generate_scenes(2, references=0), "`references` must be >= 1"),
])
def test_bad_arguments_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()
