"""Search strategies over a decoder step function.

Every search is a small object called as `search(step_fn, state,
batch_size, reorder_state=None, start_tokens=None, length_limits=None,
tile_state=None, select_rows=None)` with
`step_fn(token_ids, state, index) -> (logits, state)`; it returns fixed-shape ids (B, max_length) — (B, N,
max_length) for beam search — and scores, all in TensorFlow ops so it traces
once, compiles under XLA and exports. Every search holds its `Limits` (length,
length ratio, n-gram limits, EOS). `kseq.decoding.output` turns the output
into text: the best hypothesis, PAD columns cut, detokenized. `Decoder` (kseq.decoding.protocol)
is what a model implements to be driven by them.
"""

from kseq import _backend  # noqa: F401  (first: the TensorFlow backend checked before keras loads)

from kseq.decoding.beam_search import BeamSearch, length_penalty
from kseq.decoding.factory import make_search, n_best_search
from kseq.decoding.output import trim_padding
from kseq.decoding.greedy import GreedySearch
from kseq.decoding.limits import Limits
from kseq.decoding.protocol import Decoder
from kseq.decoding.sampling import Sampler

__all__ = ["BeamSearch", "Decoder", "GreedySearch", "Limits", "Sampler", "length_penalty", "make_search",
           "n_best_search", "trim_padding"]
