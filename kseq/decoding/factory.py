"""Building a search from `generate`'s arguments, and trimming its output."""

import tensorflow as tf

from kseq.decoding.beam_search import BeamSearch
from kseq.decoding.greedy import GreedySearch
from kseq.decoding.sampling import Sampler
from kseq.special_ids import PAD_ID
from kseq.validation import check_choice

METHODS = ("greedy", "beam", "sample")


def make_search(method, max_length, beam_size=4, length_penalty=0.6, num_return=1,
                temperature=1.0, top_k=None, top_p=None, seed=None, **kwargs):
    """The search object for `method` ("greedy", "beam" or "sample"); the
    options of the other methods are ignored."""
    check_choice("method", method, METHODS)
    if method == "beam":
        return BeamSearch(max_length, beam_size, length_penalty, num_return, **kwargs)
    if num_return != 1:
        raise ValueError(f"`num_return` > 1 needs method='beam'; got method={method!r}.")
    if method == "sample":
        return Sampler(max_length, temperature, top_k, top_p, seed, **kwargs)
    return GreedySearch(max_length, **kwargs)


def trim_padding(ids, pad_id=PAD_ID):
    """Drops the trailing columns that are PAD in every row: (..., L) -> (..., T')."""
    ids = tf.convert_to_tensor(ids)
    used = tf.reduce_any(tf.not_equal(ids, pad_id), axis=tf.range(tf.rank(ids) - 1))
    width = tf.reduce_max(tf.where(used, tf.range(1, tf.shape(ids)[-1] + 1), 0))
    return ids[..., :width]
