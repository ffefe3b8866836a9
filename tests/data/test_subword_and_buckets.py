"""The subword tokenizer and the length-bucketed pipeline."""

import random

import numpy as np
import pytest
import tensorflow as tf

from kseq.data.bucketing import bucketed_pair_dataset, default_boundaries, padding_fraction, xla_boundaries
from kseq.data.subword_tokenizer import SubwordTokenizer

FRENCH = [
    "Au commencement, Dieu créa les cieux et la terre.",
    "La terre était informe et vide: il y avait des ténèbres à la surface de l'abîme.",
    "Dieu dit: Que la lumière soit! Et la lumière fut.",
]


def corpus(count=2000, seed=0):
    rng = random.Random(seed)
    words = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyzéè", k=rng.randint(1, 8))) for _ in range(300)]
    sources = [" ".join(rng.choices(words, k=rng.randint(1, 30))) for _ in range(count)]
    return sources, [s.upper() for s in sources]


@pytest.fixture(scope="module")
def tokenizer():
    """Trained once for the module: no test changes it, and SentencePiece
    training (a second a time) gives the same vocabulary each time."""
    sources, targets = corpus()
    return SubwordTokenizer.train(sources + targets + FRENCH * 20, vocab_size=600)


def test_round_trip_is_lossless_for_normalized_text(tokenizer, tmp_path):
    texts = FRENCH + ["quelle rivière? «Voilà» — 42 %", ""]
    ids = tokenizer.tokenize(texts)
    assert ids.dtype == tf.int32 and int(tf.reduce_min(ids.flat_values)) >= 3
    back = [t.decode() for t in tokenizer.detokenize(ids.to_tensor()).numpy()]
    assert back == texts
    path = str(tmp_path / "spm.model")
    tokenizer.save(path)
    loaded = SubwordTokenizer.load(path)
    assert loaded.tokenize(texts).to_list() == ids.to_list()


def test_survives_a_reseed_after_creation(tokenizer):
    before = tokenizer.tokenize(FRENCH).to_list()
    tf.random.set_seed(5)  # clears TensorFlow's eager kernel cache
    assert tokenizer.tokenize(FRENCH).to_list() == before
    assert tokenizer.id_to_piece(tf.constant([0, 1, 2, 3])) == ["<pad>", "<s>", "</s>", "<unk>"]


def test_detokenize_stops_at_eos_and_drops_specials(tokenizer):
    ids = tokenizer.tokenize(["dieu dit"]).to_tensor().numpy()[0].tolist()
    with_specials = [[1] + ids + [2, 9, 9, 0, 0]]
    assert tokenizer.detokenize(with_specials).numpy()[0].decode() == "dieu dit"
    assert "⁇" in tokenizer.detokenize([[10**6, 2]]).numpy()[0].decode()


def test_bad_tokenizer_inputs_are_named():
    with pytest.raises(ValueError, match="`texts` must hold at least one"):
        SubwordTokenizer.train(["", ""], vocab_size=10)
    with pytest.raises(ValueError, match="`proto` must be"):
        SubwordTokenizer(b"")
    with pytest.raises(ValueError, match="`model_type` must be one of"):
        SubwordTokenizer.train(["a b"], model_type="wordpiece")


def test_buckets_fill_the_token_budget_with_little_padding(tokenizer):
    sources, targets = corpus()
    budget, max_length = 1024, 64
    dataset, report = bucketed_pair_dataset(sources, targets, tokenizer, tokenizer, budget, max_length, seed=1)
    edges = default_boundaries(max_length)
    widths, real_labels, batches = set(), 0, 0
    for inputs, labels in dataset:
        batches += 1
        rows, width = labels.shape
        assert inputs["source_ids"].shape == inputs["target_ids"].shape == (rows, width)
        assert width + 1 in edges, "padded to a bucket edge: a bounded set of shapes"
        assert rows * width <= budget or rows == 1
        assert np.all(inputs["target_ids"].numpy()[:, 0] == 1), "decoder input starts with BOS"
        real_labels += int(tf.math.count_nonzero(labels))
        widths.add(width)
    assert batches == int(dataset.cardinality())
    # Every kept pair once per epoch: its target tokens plus EOS.
    source_lengths = tokenizer.tokenize(sources).row_lengths().numpy()
    target_lengths = tokenizer.tokenize(targets).row_lengths().numpy() + 1
    kept = (source_lengths > 0) & (source_lengths <= max_length) & (target_lengths <= max_length)
    assert report.kept == kept.sum() and report.over_long == len(sources) - kept.sum()
    assert real_labels == target_lengths[kept].sum()
    bucketed = padding_fraction(dataset)
    naive = 1 - real_labels / (kept.sum() * target_lengths[kept].max())
    assert bucketed < 0.05 and bucketed < naive / 2, (bucketed, naive)  # narrow buckets: a few percent


def test_default_buckets_are_narrow_and_cover_every_length():
    """Edges about 5% and at least 2 apart: a bucket pads each sequence by
    less than 2 pieces or 5% of its length; the last edge takes max_length."""
    for max_length in (2, 14, 96, 512):
        edges = default_boundaries(max_length)
        assert edges[-1] == max_length + 1 and edges == sorted(set(edges))
        for low, high in zip(edges, edges[1:-1]):
            assert high - low == 2 or high <= low * 1.05 + 1, (low, high)
    assert len(default_boundaries(96)) == 41


def test_drop_remainder_gives_one_shape_per_bucket(tokenizer):
    """What `--jit-compile on` trains on: every batch full, so XLA compiles
    once per bucket; a budget no bucket can fill is a named error."""
    sources, targets = corpus()
    kept, _ = bucketed_pair_dataset(sources, targets, tokenizer, tokenizer, 1024, 64, seed=1)
    full, _ = bucketed_pair_dataset(sources, targets, tokenizer, tokenizer, 1024, 64, seed=1,
                                    drop_remainder=True)
    shapes = [tuple(labels.shape) for _, labels in full]
    assert len(shapes) == int(full.cardinality())
    rows_by_width = {}
    for rows, width in shapes:
        rows_by_width.setdefault(width, set()).add(rows)
    assert all(len(rows) == 1 for rows in rows_by_width.values()), rows_by_width
    all_shapes = {tuple(labels.shape) for _, labels in kept}
    assert len(all_shapes) > len(set(shapes)), "the remainders had shapes of their own"
    with pytest.raises(ValueError, match="`drop_remainder=True` leaves no batch"):
        bucketed_pair_dataset(sources[:3], targets[:3], tokenizer, tokenizer, 4096, 64,
                              drop_remainder=True)


def test_over_long_and_empty_pairs_are_counted(tokenizer):
    long = " ".join(["abcdefgh"] * 60)
    sources = ["dieu dit", long, "", "la terre"]
    targets = ["DIEU DIT", "X", "Y", long]
    dataset, report = bucketed_pair_dataset(sources, targets, tokenizer, tokenizer, 256, 16, shuffle=False)
    assert (report.kept, report.empty, report.over_long) == (1, 1, 2)
    assert "1 of 4 pairs kept" in str(report)
    _, truncated = bucketed_pair_dataset(
        sources, targets, tokenizer, tokenizer, 256, 16, shuffle=False, over_long="truncate"
    )
    assert truncated.kept == 3
    with pytest.raises(ValueError, match="`token_budget` \\(8\\) must be >= `max_length` \\(16\\)"):
        bucketed_pair_dataset(sources, targets, tokenizer, tokenizer, 8, 16)
    with pytest.raises(ValueError, match="No pair is left"):
        bucketed_pair_dataset([""], ["x"], tokenizer, tokenizer, 256, 16)
    with pytest.raises(ValueError, match="same length"):
        bucketed_pair_dataset(["a"], [], tokenizer, tokenizer, 256, 16)


def test_pad_remainder_keeps_every_pair_in_one_shape_per_bucket(tokenizer):
    """What training under XLA reads: coarse buckets, and each bucket's last
    batch filled with all-PAD rows, so every pair trains and each bucket has
    one shape."""
    sources, targets = corpus()
    boundaries = xla_boundaries(64)
    assert boundaries == [17, 25, 33, 49, 65] and len(boundaries) < len(default_boundaries(64))
    padded, report = bucketed_pair_dataset(sources, targets, tokenizer, tokenizer, 1024, 64, seed=1,
                                           boundaries=boundaries, pad_remainder=True)
    plain, _ = bucketed_pair_dataset(sources, targets, tokenizer, tokenizer, 1024, 64, seed=1,
                                     boundaries=boundaries)
    shapes = [tuple(labels.shape) for _, labels in padded]
    assert len(shapes) == int(padded.cardinality()) == int(plain.cardinality()) == report.batches_per_epoch
    assert len(set(shapes)) == report.batch_shapes == len({width for _, width in shapes})
    real = lambda data: sorted(  # noqa: E731
        tuple(row[row != 0]) for _, labels in data for row in labels.numpy() if row.any())
    assert real(padded) == real(plain), "the same pairs, none left out"
    with pytest.raises(ValueError, match="exclude each other"):
        bucketed_pair_dataset(sources, targets, tokenizer, tokenizer, 1024, 64, drop_remainder=True,
                              pad_remainder=True)


def test_several_epochs_in_one_pass_follow_the_position(tokenizer):
    """epochs=3 with a position: epoch e's batches are the one-epoch
    pipeline's at position e, and a position set from a global step skips
    exactly the batches before it."""
    from kseq.training.checkpoints.resume import TrainingPosition

    sources, targets = corpus()
    ids = lambda data: [x["source_ids"].numpy().tolist() for x, _ in data]  # noqa: E731
    position = TrainingPosition()
    three, report = bucketed_pair_dataset(sources, targets, tokenizer, tokenizer, 1024, 64, seed=4,
                                          epochs=3, position=position)
    per_epoch = report.batches_per_epoch
    assert position.steps_per_epoch == per_epoch and int(three.cardinality()) == 3 * per_epoch
    assert position.epochs == 3, "what `Fit` reads: the pass holds every epoch"
    every = ids(three)
    single = TrainingPosition()
    one, _ = bucketed_pair_dataset(sources, targets, tokenizer, tokenizer, 1024, 64, seed=4, position=single)
    for epoch in range(3):
        single.set(epoch)
        assert every[epoch * per_epoch : (epoch + 1) * per_epoch] == ids(one)
    position.set_step(per_epoch + 2)
    assert ids(three.take(5)) == every[per_epoch + 2 : per_epoch + 7]
