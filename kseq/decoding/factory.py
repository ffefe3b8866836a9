"""Building a search: from `generate`'s arguments, or the n-best form of another search."""

from kseq.decoding.beam_search import BeamSearch
from kseq.decoding.greedy import GreedySearch
from kseq.decoding.sampling import Sampler
from kseq._validation import check_choice, check_positive_int

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


def n_best_search(search, n_best):
    """Gives the search that returns `n_best` hypotheses a row, with `search`'s settings otherwise.

    The one place an n-best list's search comes from (an export's `n_best`
    signature, and so `kseq-translate --n-best`): what decides the hypotheses
    is kept, and only what `n_best` needs changes. A `BeamSearch` keeps its
    limits (length, length ratio, n-gram limit, EOS), length penalty and
    patience, and has at least `n_best` beams. Any other search (greedy, a
    sampler) ranks by the summed log-probability its own score is, so it
    becomes a beam search of `n_best` beams with its limits, no length
    penalty and the exact stopping rule.

    Args:
        search: the search an export translates with.
        n_best: N >= 1, the hypotheses returned per row.

    Returns:
        A `BeamSearch` with `num_return` N: `search` itself where it already
        returns N hypotheses.

    Raises:
        ValueError: `n_best` is not an int >= 1.

    Example:
    >>> wide = n_best_search(BeamSearch(20, beam_size=2, length_penalty=2.0, patience=1.0), 4)
    >>> wide.beam_size, wide.num_return, wide.length_penalty, wide.patience
    (4, 4, 2.0, 1.0)
    >>> n_best_search(GreedySearch(20, no_repeat_ngram_size=3), 2).length_penalty
    0.0
    """
    n_best = check_positive_int("n_best", n_best)
    if not isinstance(search, BeamSearch):
        return BeamSearch(beam_size=n_best, length_penalty=0.0, num_return=n_best, bos_id=search.bos_id,
                          pad_id=search.pad_id, limits=search.limits)
    if search.num_return == n_best and search.beam_size >= n_best:
        return search
    return BeamSearch(beam_size=max(n_best, search.beam_size), length_penalty=search.length_penalty,
                      num_return=n_best, bos_id=search.bos_id, pad_id=search.pad_id, limits=search.limits,
                      patience=search.patience)
