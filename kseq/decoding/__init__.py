"""Search strategies over a decoder step function.

Every search is a small object called as `search(step_fn, state,
batch_size, reorder_state=None, start_tokens=None)` with
`step_fn(token_ids, state, index) -> (logits, state)`; it returns fixed-shape ids (B, max_length) — (B, N,
max_length) for beam search — and scores, all in TensorFlow ops so it traces
once, compiles under XLA and exports. `trim_padding` cuts the PAD columns
afterwards, outside any compiled function. `Decoder` (kseq.decoding.protocol)
is what a model implements to be driven by them.
"""

from kseq.decoding.beam_search import BeamSearch, length_penalty
from kseq.decoding.factory import make_search
from kseq.decoding.output import trim_padding
from kseq.decoding.greedy import GreedySearch
from kseq.decoding.protocol import Decoder
from kseq.decoding.sampling import Sampler

__all__ = ["BeamSearch", "Decoder", "GreedySearch", "Sampler", "length_penalty", "make_search", "trim_padding"]
