"""Corpus BLEU and chrF with sacrebleu, signatures included."""

import sacrebleu


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
