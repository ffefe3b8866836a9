"""Scenes: generated images of shapes with captions whose content is known.

An offline captioning data set with a checkable answer. Each 64x64 RGB image
holds one to three shapes (circle, square, triangle, cross) of five colours
and two sizes, each in its own cell of a 3x3 grid (top left ... bottom
right, jittered), on a noisy grey background. Each image gets several
reference captions from a small grammar: synonyms ("big"/"large",
"box"/"square", "upper"/"top", "middle"/"centre"), three clause orders ("a
red circle on the left", "on the left there is a red circle", "a red circle
is on the left"), the size sometimes left out, the shapes in reading order
(top left first: one order to learn, as people mostly describe a scene).
`parse_caption` reads any caption of the grammar back into its content
(kind, colour, size, position per shape), so a generated caption can be
checked against its scene (`content_matches`: kinds, colours and positions).

The split is fixed: `load_scenes(split)` draws each split from its own
seeded generator (train 6000, valid 500, test 500 images by default).
Pure numpy: thousands of images a second.

Example:
>>> scenes = generate_scenes(4, seed=1)
>>> scenes.images.shape, scenes.images.dtype, len(scenes.captions[0])
((4, 64, 64, 3), dtype('uint8'), 5)
>>> all(content_matches(c, s) for cs, s in zip(scenes.captions, scenes.shapes) for c in cs)
True
>>> parse_caption("in the upper left corner there is a big red box and a blue circle is in the middle")
[Shape(kind='square', colour='red', size='large', position='top left'), \
Shape(kind='circle', colour='blue', size=None, position='centre')]
"""

import collections
import dataclasses

import numpy as np

from kseq._validation import check_choice, check_positive_int

IMAGE_SIZE = 64
KINDS = ("circle", "square", "triangle", "cross")
COLOURS = {"red": (220, 45, 45), "green": (50, 180, 60), "blue": (55, 90, 235),
           "yellow": (235, 215, 50), "purple": (165, 70, 205)}
SIZES = {"small": 5.5, "large": 9.5}  # radius in pixels
# 3x3 cells, row-major: (vertical, horizontal) words; "centre" alone in the middle.
POSITIONS = ("top left", "top", "top right", "left", "centre", "right", "bottom left", "bottom", "bottom right")
SPLITS = {"train": 6000, "valid": 500, "test": 500}
REFERENCES = 5

Shape = collections.namedtuple("Shape", "kind colour size position")

# The grammar's words for each value: the first is the canonical one.
_KIND_WORDS = {"circle": ("circle", "disc"), "square": ("square", "box"), "triangle": ("triangle",),
               "cross": ("cross", "plus")}
_SIZE_WORDS = {"small": ("small", "little"), "large": ("large", "big")}
_POSITION_PHRASES = {
    "top left": ("in the top left corner", "at the upper left"),
    "top right": ("in the top right corner", "at the upper right"),
    "bottom left": ("in the bottom left corner", "at the lower left"),
    "bottom right": ("in the bottom right corner", "at the lower right"),
    "top": ("at the top", "near the top"),
    "bottom": ("at the bottom", "near the bottom"),
    "left": ("on the left", "at the left"),
    "right": ("on the right", "at the right"),
    "centre": ("in the centre", "in the middle"),
}
_CLAUSES = ("{np} {pp}", "{pp} there is {np}", "{np} is {pp}")
_FILLER = frozenset("a the in at on near corner there is".split())
_WORD_VALUES = {  # word -> (field, canonical value)
    **{w: ("kind", k) for k, words in _KIND_WORDS.items() for w in words},
    **{w: ("size", s) for s, words in _SIZE_WORDS.items() for w in words},
    **{c: ("colour", c) for c in COLOURS},
    **{w: ("vertical", "top") for w in ("top", "upper")},
    **{w: ("vertical", "bottom") for w in ("bottom", "lower")},
    **{w: ("horizontal", w) for w in ("left", "right")},
    **{w: ("centre", "centre") for w in ("centre", "middle")},
}


def vocabulary():
    """Every word the grammar writes, sorted (a word-level tokenizer's vocabulary)."""
    return sorted(set(_WORD_VALUES) | _FILLER | {"and"})


def scene_tokenizer():
    """A word-level kseq tokenizer of the grammar's words (keras-hub's
    WordPiece over `vocabulary()`: whole words only), ids 4 and up."""
    from kseq.data.keras_hub_tokenizer import KerasHubTokenizer, keras_hub_tokenizers

    return KerasHubTokenizer(keras_hub_tokenizers().WordPieceTokenizer(["[UNK]"] + vocabulary()))


@dataclasses.dataclass
class Scenes:
    """A set of scenes: `images` (N, 64, 64, 3) uint8, `shapes` (N lists of
    `Shape`), `boxes` (N lists of (top, left, bottom, right) pixel boxes,
    parallel to `shapes`) and `captions` (N lists of reference captions)."""

    images: np.ndarray
    shapes: list
    boxes: list
    captions: list

    def __len__(self):
        return len(self.images)


def load_scenes(split, count=None, seed=0):
    """Gives the fixed split `split`: its default number of images (`SPLITS`), or its first `count`.

    Splits come from different seeds, so they share no generator state.

    Args:
        split: "train", "valid" or "test".
        count: images to take from the split's start. Default None: its default number.
        seed: the seed shared by the splits. Default 0.

    Returns:
        `Scenes`.

    Raises:
        ValueError: an unknown `split` or a `count` that is not an int >= 1.
    """
    check_choice("split", split, tuple(SPLITS))
    count = SPLITS[split] if count is None else check_positive_int("count", count)
    return generate_scenes(count, seed=(seed, list(SPLITS).index(split)))


def generate_scenes(count, seed=0, references=REFERENCES, max_shapes=3):
    """Draws `count` random scenes, each with `references` captions; the same `seed` gives the same scenes.

    Args:
        count: scenes to draw, >= 0.
        seed: an int or a tuple of ints. Default 0.
        references: captions per scene. Default `REFERENCES` (5).
        max_shapes: the most shapes a scene holds, at most 9 (one a cell). Default 3.

    Returns:
        `Scenes`.

    Raises:
        ValueError: `count`, `references` or `max_shapes` out of range.
    """
    count = check_positive_int("count", count, allow_zero=True)
    references = check_positive_int("references", references)
    max_shapes = check_positive_int("max_shapes", max_shapes)
    if max_shapes > len(POSITIONS):
        raise ValueError(f"`max_shapes` must be <= {len(POSITIONS)} (one shape a cell); got {max_shapes}.")
    rng = np.random.default_rng(seed)
    images = np.empty((count, IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8)
    all_shapes, all_boxes, all_captions = [], [], []
    for i in range(count):
        shapes = random_shapes(rng, max_shapes)
        images[i], boxes = draw(shapes, rng)
        all_shapes.append(shapes)
        all_boxes.append(boxes)
        all_captions.append([describe(shapes, rng) for _ in range(references)])
    return Scenes(images, all_shapes, all_boxes, all_captions)


def random_shapes(rng, max_shapes=3):
    """Draws one to `max_shapes` shapes in distinct cells.

    Args:
        rng: a `numpy.random.Generator`.
        max_shapes: the most shapes. Default 3.

    Returns:
        A list of `Shape`s.
    """
    cells = rng.choice(len(POSITIONS), rng.integers(1, max_shapes + 1), replace=False)
    return [Shape(KINDS[rng.integers(len(KINDS))], list(COLOURS)[rng.integers(len(COLOURS))],
                  list(SIZES)[rng.integers(len(SIZES))], POSITIONS[cell]) for cell in cells]


_PIXELS = np.mgrid[0:IMAGE_SIZE, 0:IMAGE_SIZE] + 0.5  # (2, H, W) pixel centres


def draw(shapes, rng):
    """Draws the shapes over a noisy background.

    Args:
        shapes: `Shape`s in distinct cells.
        rng: a `numpy.random.Generator` (jitter, sizes and noise).

    Returns:
        (image, boxes): (64, 64, 3) uint8, and a (top, left, bottom, right)
        pixel box per shape.
    """
    image = rng.normal(60.0, 8.0, (IMAGE_SIZE, IMAGE_SIZE, 3))
    cell = IMAGE_SIZE / 3
    boxes = []
    for shape in shapes:
        row, column = divmod(POSITIONS.index(shape.position), 3)
        radius = SIZES[shape.size] + rng.uniform(-0.5, 0.5)
        # Jittered within the cell, never over the image's edge.
        centre = np.clip((np.array([row, column]) + 0.5) * cell + rng.uniform(-3, 3, 2),
                         radius + 1, IMAGE_SIZE - radius - 1)
        mask = _mask(shape.kind, _PIXELS[0] - centre[0], _PIXELS[1] - centre[1], radius)
        image[mask] = np.asarray(COLOURS[shape.colour]) + rng.normal(0.0, 10.0, 3)
        boxes.append(tuple(int(v) for v in (centre[0] - radius, centre[1] - radius,
                                            np.ceil(centre[0] + radius), np.ceil(centre[1] + radius))))
    return np.clip(image, 0, 255).astype(np.uint8), boxes


def _mask(kind, dy, dx, r):
    """(H, W) bool: the pixels of a shape of radius `r` at offsets (dy, dx)."""
    if kind == "circle":
        return dy**2 + dx**2 <= r**2
    if kind == "square":
        return np.maximum(abs(dy), abs(dx)) <= 0.8 * r
    if kind == "triangle":  # apex up
        return (dy <= 0.8 * r) & (abs(dx) <= 0.6 * (dy + r))
    thickness = r / 3  # a cross
    return ((abs(dx) <= thickness) & (abs(dy) <= r)) | ((abs(dy) <= thickness) & (abs(dx) <= r))


def describe(shapes, rng):
    """Writes one caption of `shapes` from the grammar.

    One clause order for the caption, synonyms drawn per word, the shapes in
    reading order (top left first), joined by "and".

    Args:
        shapes: `Shape`s.
        rng: a `numpy.random.Generator`.

    Returns:
        The caption.
    """
    clause = _CLAUSES[rng.integers(len(_CLAUSES))]
    parts = []
    for shape in sorted(shapes, key=lambda shape: POSITIONS.index(shape.position)):
        words = ["a"]
        if rng.random() < 0.8:
            words.append(_pick(rng, _SIZE_WORDS[shape.size]))
        words += [shape.colour, _pick(rng, _KIND_WORDS[shape.kind])]
        parts.append(clause.format(np=" ".join(words), pp=_pick(rng, _POSITION_PHRASES[shape.position])))
    return " and ".join(parts)


def _pick(rng, words):
    return words[rng.integers(len(words))]


def parse_caption(caption):
    """Reads the shapes a caption of the grammar describes, as `Shape`s in its order.

    Args:
        caption: a caption, lower case, words separated by spaces.

    Returns:
        A list of `Shape`s (size None where it names none; a field the clause
        lacks is None too), or None when a word is not the grammar's or a
        clause names a field twice.
    """
    shapes = []
    for clause in caption.split(" and "):
        fields = {}
        for word in clause.split():
            if word in _FILLER:
                continue
            if word not in _WORD_VALUES:
                return None
            field, value = _WORD_VALUES[word]
            if field in fields:
                return None
            fields[field] = value
        shapes.append(Shape(fields.get("kind"), fields.get("colour"), fields.get("size"), _position(fields)))
    return shapes


def _position(fields):
    """A clause's position words -> one of POSITIONS, or None."""
    vertical, horizontal = fields.get("vertical"), fields.get("horizontal")
    if "centre" in fields:
        return "centre" if vertical is None and horizontal is None else None
    position = " ".join(word for word in (vertical, horizontal) if word)
    return position or None


def content(shapes):
    """Gives the multiset of (kind, colour, position) that content checks compare.

    Args:
        shapes: `Shape`s.

    Returns:
        A `collections.Counter` of (kind, colour, position).
    """
    return collections.Counter((shape.kind, shape.colour, shape.position) for shape in shapes)


def content_matches(caption, shapes):
    """Tells whether `caption` names exactly the kinds, colours and positions of `shapes`.

    Sizes are not checked: references may leave them out.

    Args:
        caption: a caption.
        shapes: the scene's `Shape`s.

    Returns:
        True if they match; False too for a caption outside the grammar.
    """
    parsed = parse_caption(caption)
    return parsed is not None and content(parsed) == content(shapes)


def content_accuracy(captions, scenes_shapes):
    """Gives the fraction of `captions` whose content matches their scene's shapes.

    Args:
        captions: one caption a scene.
        scenes_shapes: each scene's `Shape`s, parallel to `captions`.

    Returns:
        A float in [0, 1].

    Raises:
        ValueError: the lists differ in length.
    """
    if len(captions) != len(scenes_shapes):
        raise ValueError(f"`captions` and `scenes_shapes` must be parallel; got {len(captions)} "
                         f"and {len(scenes_shapes)}.")
    return float(np.mean([content_matches(c, s) for c, s in zip(captions, scenes_shapes)]))


def box_cells(box, grid, image_size=IMAGE_SIZE):
    """Finds the cells of a `grid` x `grid` feature map that a pixel box overlaps.

    Args:
        box: (top, left, bottom, right) in pixels.
        grid: the feature map's cells a side.
        image_size: the image's side in pixels. Default `IMAGE_SIZE` (64).

    Returns:
        (grid, grid) bool.
    """
    cell = image_size / grid
    edges = np.arange(grid) * cell
    rows = (edges < box[2]) & (edges + cell > box[0])
    columns = (edges < box[3]) & (edges + cell > box[1])
    return rows[:, None] & columns[None, :]


def named_shape_attention(caption, attention, shapes, boxes):
    """Checks, for each shape word of `caption`, whether its attention falls on the shape it names.

    A shape word counts where its clause names exactly one shape of the
    scene; it hits when its attention map puts more weight on that shape's
    cells than on any other shape's.

    Args:
        caption: a caption of the grammar.
        attention: (T, h, w), one attention map a word of `caption` (word-level).
        shapes: the scene's `Shape`s.
        boxes: their pixel boxes, parallel to `shapes`.

    Returns:
        A list of bools, empty for a one-shape scene or where no clause names a
        shape of the scene.
    """
    attention = np.asarray(attention)
    grid = attention.shape[1]
    cells = [box_cells(box, grid) for box in boxes]
    hits, index = [], 0
    for clause in caption.split(" and "):
        words = clause.split()
        parsed = parse_caption(clause)
        named = [i for i, shape in enumerate(shapes) if parsed and content([shape]) == content(parsed)]
        kind_at = [index + i for i, word in enumerate(words) if _WORD_VALUES.get(word, ("",))[0] == "kind"]
        index += len(words) + 1  # the clause and its "and"
        if len(shapes) < 2 or len(named) != 1 or len(kind_at) != 1 or kind_at[0] >= len(attention):
            continue
        mass = [float(attention[kind_at[0]][mask].sum()) for mask in cells]
        hits.append(all(mass[named[0]] > m for i, m in enumerate(mass) if i != named[0]))
    return hits
