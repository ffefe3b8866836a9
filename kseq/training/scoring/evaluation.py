"""Scores of generated text (sacreBLEU and chrF, exact match), and batched
translation for scoring."""

import collections
import os
import time

import numpy as np
import sacrebleu
import tensorflow as tf

from kseq._atomic import write_bytes_atomic
from kseq._compat import align_function_names
from kseq.special_ids import EOS_ID


def translation_scores(hypotheses, references):
    """Corpus-level sacreBLEU and chrF of detokenized outputs.

    Args:
        hypotheses: list of output strings.
        references: list of reference strings, one per hypothesis.

    Returns:
        {"bleu", "chrf"} floats (0-100) and {"bleu_signature",
        "chrf_signature"}, sacrebleu's strings saying how they were computed.

    Example:
    >>> scores = translation_scores(["the cat sat on the mat"], ["the cat sat on the mat"])
    >>> round(scores["bleu"]), round(scores["chrf"])
    (100, 100)
    """
    if len(hypotheses) != len(references):
        raise ValueError(
            f"`hypotheses` ({len(hypotheses)}) and `references` ({len(references)}) "
            "must have the same length."
        )
    bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    return {
        "bleu": float(bleu_score.score),
        "chrf": float(chrf_score.score),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


def exact_match(hypotheses, references):
    """Gives the share of hypotheses equal to their reference.

    Args:
        hypotheses: output strings.
        references: their reference strings, as many.

    Returns:
        A float in [0, 1]; 0.0 for no references.

    Raises:
        ValueError: the two lists differ in length.

    Example:
    >>> exact_match(["tac", "god"], ["tac", "dog"])
    0.5
    """
    if len(hypotheses) != len(references):
        raise ValueError(
            f"`hypotheses` ({len(hypotheses)}) and `references` ({len(references)}) "
            "must have the same length."
        )
    return float(np.mean([h == r for h, r in zip(hypotheses, references)])) if references else 0.0


def looping_outputs(hypotheses, n=4, times=3):
    """Counts the hypotheses that repeat some word n-gram `times` times or more.

    Such a hypothesis is a decoder stuck in a loop: "de l'arche de l'arche de l'arche".

    Args:
        hypotheses: output strings, words split on whitespace.
        n: the n-gram's words. Default 4.
        times: repeats that count as a loop. Default 3.

    Returns:
        The count, an int.

    Example:
    >>> looping_outputs(["a b a b a b a b", "a b c d a b c d", "x"], n=2, times=3)
    1
    """
    def loops(words):
        grams = collections.Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))
        return any(count >= times for count in grams.values())

    return sum(loops(hypothesis.split()) for hypothesis in hypotheses)


def exact_match_ids(generated, targets):
    """Gives the share of generated rows that begin with their target and EOS.

    Args:
        generated: (B, T) generated ids, padded after EOS.
        targets: B lists of target ids, without EOS.

    Returns:
        A float in [0, 1].

    Example:
    >>> exact_match_ids([[5, 6, 2, 0], [5, 5, 2, 0]], [[5, 6], [6, 5]])
    0.5
    """
    generated = np.asarray(generated)
    hits = 0
    for row, target in zip(generated, targets):
        expected = [*target, EOS_ID]
        hits += row[: len(expected)].tolist() == expected
    return hits / len(targets)


class BatchTranslator:
    """Translates strings through an in-graph translate function, in batches of one size.

    The function is what the export serves (`kseq.export.translate_function`).

    The last batch is padded with empty strings, so the function sees one
    batch shape (one XLA compilation per source width when compiled). With
    `seconds`, no batch starts once that much time has passed: the outputs
    then cover the first sentences only (a bounded evaluation).

    Args:
        translate: strings (B,) -> {"translation": strings (B,), ...}.
        batch_size: sentences per call. Defaults to 64.
        seconds: the time bound, or None.
    """

    def __init__(self, translate, batch_size=64, seconds=None):
        self.function = tf.function(
            translate, input_signature=[tf.TensorSpec([None], tf.string)], autograph=False
        )
        self.batch_size, self.seconds = batch_size, seconds
        self._traced = False

    def __call__(self, texts):
        if not self._traced:  # a stable name for XLA's cache (kseq._compat)
            align_function_names()
            self._traced = True
        texts, outputs, start = list(texts), [], time.monotonic()
        for first in range(0, len(texts), self.batch_size):
            if self.seconds is not None and outputs and time.monotonic() - start > self.seconds:
                break
            batch = texts[first : first + self.batch_size]
            padded = batch + [""] * (self.batch_size - len(batch))
            translated = self.function(tf.constant(padded))["translation"].numpy()
            outputs += [t.decode("utf-8") for t in translated[: len(batch)]]
        return outputs


def write_test_report(sources, hypotheses, references, logdir, shown=3):
    """Scores the test outputs, prints them with a few samples and writes them all to a TSV file.

    The scores are BLEU, chrF, exact match and looping outputs; every output
    goes beside its source and reference in `<logdir>/test_translations.tsv`.

    Args:
        sources: the test sources.
        hypotheses: their outputs.
        references: their references.
        logdir: the run's folder.
        shown: samples printed and kept. Default 3.

    Returns:
        metrics.json's test part: {"test_bleu", "test_chrf", "test_exact_match"
        (in %), "test_looping_outputs", the signatures, "test_sentences", "samples"}.
    """
    scores = translation_scores(hypotheses, references)
    matched = 100.0 * exact_match(hypotheses, references)
    looping = looping_outputs(hypotheses)
    print(f"test BLEU {scores['bleu']:.2f} ({scores['bleu_signature']})")
    print(f"test chrF {scores['chrf']:.2f} ({scores['chrf_signature']})")
    print(f"test exact match {matched:.2f}%")
    print(f"test outputs repeating a 4-gram 3 times or more: {looping} of {len(hypotheses)}")
    rows = list(zip(sources, hypotheses, references))
    for source, hypothesis, reference in rows[:shown]:
        print(f"  {source}\n  -> {hypothesis}\n  (reference: {reference})")
    text = "source\toutput\treference\n" + "".join("\t".join(row) + "\n" for row in rows)
    write_bytes_atomic(os.path.join(logdir, "test_translations.tsv"), text.encode("utf-8"))
    return {
        "test_bleu": round(scores["bleu"], 2), "test_chrf": round(scores["chrf"], 2),
        "test_exact_match": round(matched, 2), "test_looping_outputs": looping,
        "bleu_signature": scores["bleu_signature"], "chrf_signature": scores["chrf_signature"],
        "test_sentences": len(sources),
        "samples": [{"source": s, "output": h, "reference": r} for s, h, r in rows[:shown]],
    }


def test_translations(translate, test_pairs, logdir, limit=None):
    """Translates the test sources and scores the outputs (`write_test_report`).

    Args:
        translate: a function of a list of strings giving a list of strings.
        test_pairs: (sources, references).
        logdir: the run's folder, for the report.
        limit: test only the first `limit` pairs; None (default): all.

    Returns:
        `write_test_report`'s entries, and "test_seconds" the whole took.
    """
    sources, references = (texts[:limit] for texts in test_pairs)
    start = time.time()
    hypotheses = translate(sources)
    return {**write_test_report(sources, hypotheses, references, logdir), "test_seconds": round(time.time() - start, 1)}


def model_translator(model, tokenizer, max_source_length, search, jit_compile=False, seconds=None,
                     target_tokenizer=None):
    """Makes a translator of strings through the export's in-graph translate function.

    That is `kseq.export.translate_function`, one tokenizer for both sides
    (or the sources' and `target_tokenizer`), in batches of 64 (`BatchTranslator`).

    Args:
        model: the translator model.
        tokenizer: the joint tokenizer.
        max_source_length: source pieces kept at most.
        search: the decoding search.
        jit_compile: compile the function with XLA. Default False.
        seconds: a time bound for each call; None (default) for none.
        target_tokenizer: the targets' tokenizer; None (default): `tokenizer`.

    Returns:
        A `BatchTranslator`.
    """
    from kseq.export import translate_function

    function = translate_function(model, tokenizer, target_tokenizer or tokenizer, max_source_length=max_source_length,
                                  search=search, jit_compile=jit_compile)
    return BatchTranslator(function, batch_size=64, seconds=seconds)
