"""Building a search from `generate`'s arguments."""

from kseq.decoding.beam_search import BeamSearch
from kseq.decoding.greedy import GreedySearch
from kseq.decoding.sampling import Sampler
from kseq._validation import check_choice

METHODS = ("greedy", "beam", "sample")


def make_search(method, max_length, beam_size=4, length_penalty=0.6, num_return=1,
                temperature=1.0, top_k=None, top_p=None, seed=None, patience=None, **kwargs):
    """Builds the search object for `method`; the options of the other methods are ignored.

    Args:
        method: "greedy", "beam" or "sample".
        max_length: the most tokens a row generates, EOS included.
        beam_size: beams ("beam"). Default 4.
        length_penalty: the beam search's length penalty ("beam"). Default 0.6.
        num_return: hypotheses returned per row; above 1 only with "beam". Default 1.
        temperature: the sampling temperature ("sample"). Default 1.0.
        top_k: sample among the k most likely tokens ("sample"). Default None: all.
        top_p: sample within this probability mass ("sample"). Default None: all.
        seed: the sampler's seed ("sample"). Default None: a fresh seed at every call.
        patience: in (0, 1]: a row's beam search ends once ceil(patience x beams)
            hypotheses, at least `num_return`, have finished ("beam"). Default None:
            only when no alive hypothesis can win.
        **kwargs: options for every search (e.g. `no_repeat_ngram_size`, `eos_id`).

    Returns:
        A `GreedySearch`, `BeamSearch` or `Sampler`.

    Raises:
        ValueError: an unknown `method`, `num_return` > 1 without "beam", or a
            bad option (see each search).
    """
    check_choice("method", method, METHODS)
    if method == "beam":
        return BeamSearch(max_length, beam_size, length_penalty, num_return, patience=patience, **kwargs)
    if num_return != 1:
        raise ValueError(f"`num_return` > 1 needs method='beam'; got method={method!r}.")
    if method == "sample":
        return Sampler(max_length, temperature, top_k, top_p, seed, **kwargs)
    return GreedySearch(max_length, **kwargs)
