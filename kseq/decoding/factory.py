"""Building a search from `generate`'s arguments."""

from kseq.decoding.beam_search import BeamSearch
from kseq.decoding.greedy import GreedySearch
from kseq.decoding.sampling import Sampler
from kseq._validation import check_choice

METHODS = ("greedy", "beam", "sample")


def make_search(method, max_length, beam_size=4, length_penalty=0.6, num_return=1,
                temperature=1.0, top_k=None, top_p=None, seed=None, patience=None, **kwargs):
    """The search object for `method` ("greedy", "beam" or "sample"); the
    options of the other methods are ignored. `kwargs` go to every search
    (e.g. `no_repeat_ngram_size`, `eos_id`)."""
    check_choice("method", method, METHODS)
    if method == "beam":
        return BeamSearch(max_length, beam_size, length_penalty, num_return, patience=patience, **kwargs)
    if num_return != 1:
        raise ValueError(f"`num_return` > 1 needs method='beam'; got method={method!r}.")
    if method == "sample":
        return Sampler(max_length, temperature, top_k, top_p, seed, **kwargs)
    return GreedySearch(max_length, **kwargs)
