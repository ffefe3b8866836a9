"""Does attention point at the right source word? A probe on proper names.

Names such as "David" or "Jacob" are copied unchanged from an English verse
to its French translation, so their pieces on both sides are known to align
without a word aligner. Teacher-forced on the reference, each target piece
of such a name counts as aligned when the source position its decoding step
attends to most lies inside the same name in the source. The diagonal (the
target piece's relative position mapped onto the source) is the baseline
that any attention should beat.
"""

import collections
import re
import string

import numpy as np

from kseq.special_ids import PAD_ID

NAME = re.compile(r"[A-Z][a-z]{2,}")
WORD_START = "\u2581"  # SentencePiece's mark of a piece that begins a word


def shared_names(source, target):
    """Finds the names a pair shares: capitalised words, not first in their sentence, once on each side.

    Args:
        source: the source sentence.
        target: the target sentence.

    Returns:
        [(source word index, target word index)], sorted; words split on
        whitespace, punctuation stripped.

    Example:
    >>> shared_names("And David said to Saul", "Et David dit à Saül")
    [(1, 1)]
    """
    def names(text):
        words = [word.strip(string.punctuation + "«»“”‘’") for word in text.split()]
        counts = collections.Counter(words)
        return {word: i for i, word in enumerate(words) if i > 0 and counts[word] == 1 and NAME.fullmatch(word)}

    in_source, in_target = names(source), names(target)
    return sorted((in_source[word], in_target[word]) for word in in_source.keys() & in_target.keys())


def word_pieces(pieces, word):
    """Finds the pieces of a whitespace word that hold a letter.

    Not the punctuation that SentencePiece may split off it.

    Args:
        pieces: a sentence's SentencePiece pieces.
        word: the word's index among the sentence's whitespace words.

    Returns:
        The pieces' positions.
    """
    index, found = -1, []
    for position, piece in enumerate(pieces):
        if piece.startswith(WORD_START):
            index += 1
        if index == word and any(char.isalpha() for char in piece):
            found.append(position)
    return found


def name_probe(tokenizer, sources, targets, max_length, target_tokenizer=None):
    """Tokenises the pairs that hold shared names, for the probe.

    Args:
        tokenizer: the joint tokenizer (with `id_to_piece`), or the sources'
            with `target_tokenizer`.
        sources: source sentences.
        targets: their references.
        max_length: pairs with a side over this many pieces are left out.
        target_tokenizer: the targets' tokenizer; None (default): `tokenizer`.

    Returns:
        [(source ids, target ids, [(source positions, target positions)]
        of each name)].
    """
    probe = []
    target_tokenizer = target_tokenizer or tokenizer
    source_ids, target_ids = (side.tokenize(texts).to_list() for side, texts in ((tokenizer, sources),
                                                                              (target_tokenizer, targets)))
    for source, target, s_ids, t_ids in zip(sources, targets, source_ids, target_ids):
        names = shared_names(source, target)
        if not names or len(s_ids) > max_length or len(t_ids) > max_length:
            continue
        s_pieces, t_pieces = tokenizer.id_to_piece(s_ids), target_tokenizer.id_to_piece(t_ids)
        spans = [(word_pieces(s_pieces, s), word_pieces(t_pieces, t)) for s, t in names]
        spans = [(s, t) for s, t in spans if s and t]
        if spans:
            probe.append((s_ids, t_ids, spans))
    return probe


def name_alignment(model, tokenizer, sources, targets, max_length, batch_size=32, target_tokenizer=None):
    """Measures how often the attention points at a copied name's source pieces.

    Args:
        model: a translator with attention (`model.alignment`).
        tokenizer: the joint tokenizer.
        sources: source sentences.
        targets: their references, teacher-forced.
        max_length: pairs with a side over this many pieces are left out.
        batch_size: pairs a call of `model.alignment`. Default 32.
        target_tokenizer: the targets' tokenizer; None (default): `tokenizer`.

    Returns:
        {"pairs", "name_pieces", "attention", "diagonal"}: how many pairs
        and target name pieces the probe found, and the fraction of those
        pieces whose most-attended source position or diagonal position
        lies on the same name.

    Raises:
        ValueError: no pair holds a name copied from source to target.
    """
    probe = name_probe(tokenizer, sources, targets, max_length, target_tokenizer)
    if not probe:
        raise ValueError("the name alignment probe found no pair with a name copied from source to target.")
    hits = {"attention": 0, "diagonal": 0}
    total = 0
    for start in range(0, len(probe), batch_size):
        batch = probe[start: start + batch_size]
        argmax = np.asarray(model.alignment(padded([s for s, _, _ in batch]), padded([t for _, t, _ in batch])))
        for row, (s_ids, t_ids, spans) in enumerate(batch):
            for source_positions, target_positions in spans:
                for t in target_positions:
                    diagonal = int((t + 0.5) * len(s_ids) / len(t_ids))
                    hits["attention"] += int(argmax[row, t]) in source_positions
                    hits["diagonal"] += diagonal in source_positions
                    total += 1
    return {"pairs": len(probe), "name_pieces": total, **{key: round(count / total, 4) for key, count in hits.items()}}


def report_name_alignment(model, tokenizer, sources, targets, max_length, target_tokenizer=None):
    """Measures and prints `name_alignment`, for metrics.json.

    Args:
        model: a translator with attention.
        tokenizer: the joint tokenizer.
        sources: source sentences.
        targets: their references.
        max_length: pairs with a side over this many pieces are left out.
        target_tokenizer: the targets' tokenizer; None (default): `tokenizer`.

    Returns:
        {"name_alignment": `name_alignment`'s figures}; {} where the pairs
        hold no copied name to probe (a user's data may hold none).
    """
    try:
        found = name_alignment(model, tokenizer, sources, targets, max_length, target_tokenizer=target_tokenizer)
    except ValueError as error:
        print(f"name alignment: not measured ({error})")
        return {}
    print(f"name alignment: attention on the name for {found['attention']:.1%} of {found['name_pieces']} name pieces "
          f"in {found['pairs']} test pairs (the diagonal: {found['diagonal']:.1%})")
    return {"name_alignment": found}


def padded(rows):
    """Pads rows of ids with PAD_ID into one array.

    Args:
        rows: lists of ids, not empty.

    Returns:
        (B, longest row) int32.
    """
    ids = np.full((len(rows), max(map(len, rows))), PAD_ID, np.int32)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
    return ids
