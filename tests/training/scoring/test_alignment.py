"""The name alignment probe: which pairs and pieces it counts, and its scores."""

import numpy as np
import pytest

from kseq.data.subword_tokenizer import SubwordTokenizer
from kseq.models import RNNSeq2Seq
from kseq.training.scoring.alignment import name_alignment, name_probe, shared_names, word_pieces

SOURCES = ["and then David spoke to Saul at night", "the king saw Jonathan by the river", "no names are here"]
TARGETS = ["et alors David parla à Saül la nuit", "le roi vit Jonathan près du fleuve", "pas de noms ici"]


@pytest.fixture(scope="module")
def tokenizer():
    words = " ".join(SOURCES + TARGETS).split()
    return SubwordTokenizer.train([" ".join(words[i: i + 7]) for i in range(0, len(words), 2)] * 20, 330)


def test_shared_names_are_capitalised_words_found_once_on_both_sides_and_not_first():
    assert shared_names("Abram went, and Lot went with Abram.", "Abram partit, et Lot partit avec lui.") == [(3, 3)]
    assert shared_names("David said (to Saul).", "David dit à Saül.") == []  # first words and changed names
    assert shared_names("the Lord spoke", "le Seigneur parla") == []
    assert shared_names("and Og's land", "et le pays d'Og") == []  # too short to count as a name


def test_word_pieces_keep_letters_and_skip_split_punctuation():
    pieces = ["\u2581and", "\u2581Da", "vid", ",", "\u2581went"]
    assert word_pieces(pieces, 1) == [1, 2]
    assert word_pieces(pieces, 2) == [4]
    assert word_pieces(pieces, 5) == []


def test_probe_spans_cover_the_name_on_both_sides(tokenizer):
    probe = name_probe(tokenizer, SOURCES, TARGETS, max_length=40)
    assert len(probe) == 2  # the third pair has no name
    source_ids, target_ids, spans = probe[0]
    (source_positions, target_positions), = spans
    joined = lambda ids, positions: "".join(tokenizer.id_to_piece([ids[p] for p in positions]))  # noqa: E731
    assert joined(source_ids, source_positions).strip("\u2581") == "David"
    assert joined(target_ids, target_positions).strip("\u2581") == "David"
    assert name_probe(tokenizer, SOURCES, TARGETS, max_length=3) == []  # every pair over the length


class PointingModel:
    """`alignment` that attends to a given source position for every step."""

    def __init__(self, choose):
        self.choose = choose

    def alignment(self, source_ids, output_ids):
        return np.array([[self.choose(row, t) for t in range(output_ids.shape[1])] for row in range(len(output_ids))])


def test_scores_count_the_steps_that_attend_to_the_name(tokenizer):
    probe = name_probe(tokenizer, SOURCES, TARGETS, max_length=40)
    name_positions = {row: dict(zip(spans[0][1], spans[0][0] * 4)) for row, (_, _, spans) in enumerate(probe)}
    right = PointingModel(lambda row, t: name_positions[row].get(t, 0))
    found = name_alignment(right, tokenizer, SOURCES, TARGETS, max_length=40)
    assert found["pairs"] == 2 and found["name_pieces"] == sum(len(p) for p in name_positions.values())
    assert found["attention"] == 1.0
    assert 0.0 <= found["diagonal"] <= 1.0
    assert name_alignment(PointingModel(lambda row, t: -1), tokenizer, SOURCES, TARGETS, 40)["attention"] == 0.0


def test_runs_on_a_real_model_and_refuses_data_without_names(tokenizer):
    model = RNNSeq2Seq(tokenizer.vocab_size, tokenizer.vocab_size, embed_dim=8, units=8, attention="dot")
    found = name_alignment(model, tokenizer, SOURCES, TARGETS, max_length=40, batch_size=1)
    assert found["pairs"] == 2 and 0.0 <= found["attention"] <= 1.0
    with pytest.raises(ValueError, match="no pair with a name"):
        name_alignment(model, tokenizer, SOURCES[2:], TARGETS[2:], max_length=40)
