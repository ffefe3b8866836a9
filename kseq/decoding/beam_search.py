"""Beam search with the GNMT length penalty and a pool of finished hypotheses."""

import tensorflow as tf

from kseq.decoding.constraints import apply_limits, suppress_special_tokens
from kseq.decoding.limits import search_limits
from kseq.decoding.state import gather_beams, tile_beams
from kseq.special_ids import BOS_ID, EOS_ID, PAD_ID
from kseq._validation import check_float, check_positive_int


def length_penalty(length, alpha):
    """GNMT's ((5 + |Y|) / 6) ** alpha; scores are log P(Y) / penalty."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


class BeamSearch:
    """Keeps the `beam_size` most likely hypotheses of every row alive.

    At each step every alive hypothesis is extended by every token and the
    2K most likely extensions are kept. Those among the best K that end in
    EOS join a pool of finished hypotheses, scored log P / length penalty
    (|Y| counts EOS); the K best that do not end in EOS stay alive. A row
    stops when no alive hypothesis can beat its `num_return`-th best
    finished one (log-probabilities only fall, so the best an alive
    hypothesis can reach is its log-probability over the largest penalty
    still reachable); every row stops at `max_length`, where unfinished
    hypotheses are scored as they are. All state lives in fixed-shape loop
    variables of one `tf.while_loop`.

    Finishing only the EOS extensions ranked within the best K (as fairseq
    does) makes `beam_size=1` exactly greedy search when
    `length_penalty=0`. With a positive penalty even one beam may search on
    past greedy's EOS, since a longer hypothesis can score better once
    normalised; its result then scores at least as well as greedy's.

    Args:
        max_length: the most tokens to generate (a Python int).
        beam_size: K, hypotheses kept alive per row. Defaults to 4.
        length_penalty: alpha of the GNMT penalty ((5 + |Y|) / 6) ** alpha;
            0 ranks by log-probability alone. Defaults to 0.6.
        num_return: N <= K best hypotheses returned per row. Defaults to 1.
        eos_id, no_repeat_ngram_size, max_length_ratio, max_ngram_count: the
            other limits, applied to every hypothesis (see
            `kseq.decoding.Limits`; `eos_id` -1: none ever ends).
        limits: a `kseq.decoding.Limits` instead of `max_length` and the
            limits above.

    Example:
    >>> import tensorflow as tf
    >>> # Id 4 looks best first, but only 5 leads to a confident EOS.
    >>> table = {0: [0.0, 0, 0, 0, 0.6, 0.4], 4: [0.0, 0, 0.5, 0, 0.25, 0.25],
    ...          5: [0.0, 0, 1.0, 0, 0, 0]}
    >>> def step(tokens, state, index):
    ...     previous = tf.where(index == 0, 0, tokens)
    ...     probs = tf.gather(tf.constant([table.get(i, [0.0, 0, 1, 0, 0, 0])
    ...                                    for i in range(6)]), previous)
    ...     return tf.math.log(probs), state
    >>> search = BeamSearch(max_length=3, beam_size=2, length_penalty=0.0)
    >>> ids, scores = search(step, (), batch_size=1)
    >>> ids.numpy().tolist()
    [[[5, 2, 0]]]

    References:
        Wu et al., 2016, "Google's Neural Machine Translation System" (length
        penalty); Koehn, 2004 (beam search for translation).
    """

    def __init__(self, max_length: int | None = None, beam_size: int = 4, length_penalty: float = 0.6,
                 num_return: int = 1,
                 eos_id: int = EOS_ID, bos_id: int = BOS_ID, pad_id: int = PAD_ID, no_repeat_ngram_size: int = 0,
                 max_length_ratio: float | None = None, max_ngram_count: int = 1, limits=None) -> None:
        self.limits = search_limits(limits, max_length, eos_id=eos_id, no_repeat_ngram_size=no_repeat_ngram_size,
                                    max_length_ratio=max_length_ratio, max_ngram_count=max_ngram_count)
        self.beam_size = check_positive_int("beam_size", beam_size)
        self.length_penalty = check_float("length_penalty", length_penalty)
        self.num_return = check_positive_int("num_return", num_return)
        if self.num_return > self.beam_size:
            raise ValueError(
                f"`num_return` ({num_return}) must be <= `beam_size` ({beam_size})."
            )
        self.bos_id, self.pad_id = int(bos_id), int(pad_id)

    @property
    def max_length(self):
        return self.limits.max_length

    def __call__(self, step_fn, state, batch_size, reorder_state=None, start_tokens=None,
                 length_limits=None, tile_state=None):
        """Decodes a batch.

        Args:
            step_fn: `(token_ids (B*K,), state, index) -> (logits (B*K, V),
                state)`, the beams of a row in consecutive rows.
            state: the decoder state for B rows; it is tiled to B*K rows.
            batch_size: B (int or scalar tensor).
            reorder_state: `(state, indices (B*K,)) -> state` picking rows
                (a model can skip parts that are equal across beams, such as
                the source); defaults to gathering every tensor.
            start_tokens: (B,) int32 tokens fed at the first step (default BOS).
            tile_state: `(state, K) -> state` for the B*K beams (a model can
                keep parts that are equal across a row's beams once a row);
                defaults to repeating every tensor's rows.
            length_limits: (B,) int32, the most tokens of each row's
                hypotheses (EOS included), or None (`max_length`).

        Returns:
            (ids, scores): ids (B, N, max_length) int32, best first, no BOS,
            EOS kept, PAD after EOS; scores (B, N) float32 length-penalised
            log-probabilities.
        """
        reorder_state = reorder_state or gather_beams
        beams, length, alpha = self.beam_size, self.max_length, self.length_penalty
        # The most any continuation can be divided by: penalties grow with
        # length for alpha >= 0 and shrink for alpha < 0.
        best_penalty_at_max = length_penalty(length, alpha)
        state = (tile_state or tile_beams)(state, beams)
        positions = tf.range(length)
        row_offsets = tf.range(batch_size)[:, None] * beams  # (B, 1)
        neg_inf = tf.constant(-float("inf"))

        alive_ids = tf.fill([batch_size, beams, length], tf.constant(self.pad_id, tf.int32))
        # Only the first beam is live at the start: the others would repeat it.
        alive_logp = tf.tile(
            tf.concat([[0.0], tf.fill([beams - 1], neg_inf)], 0)[None, :], [batch_size, 1]
        )
        finished_ids = alive_ids
        finished_scores = tf.fill([batch_size, beams], neg_inf)
        if start_tokens is None:
            tokens = tf.fill([batch_size * beams], tf.constant(self.bos_id, tf.int32))
        else:
            tokens = tf.repeat(tf.cast(start_tokens, tf.int32), beams)

        def keep_going(index, tokens, alive_ids, alive_logp, finished_ids, finished_scores, state):
            reachable = tf.maximum(length_penalty(index + 1, alpha), best_penalty_at_max)
            best_alive = tf.reduce_max(alive_logp, axis=1) / reachable
            to_beat = finished_scores[:, self.num_return - 1]
            return tf.logical_and(index < length, tf.reduce_any(best_alive > to_beat))

        def body(index, tokens, alive_ids, alive_logp, finished_ids, finished_scores, state):
            old = (tokens, alive_ids, alive_logp, finished_ids, finished_scores, state)
            logits, state = step_fn(tokens, state, index)
            logp = tf.nn.log_softmax(suppress_special_tokens(tf.cast(logits, tf.float32)))
            history = tf.reshape(alive_ids, [-1, length])
            logp = apply_limits(logp, history, index, length_limits, self.limits)
            vocab = tf.shape(logp)[-1]
            total = alive_logp[:, :, None] + tf.reshape(logp, [batch_size, beams, vocab])
            top_logp, top_index = tf.math.top_k(tf.reshape(total, [batch_size, -1]), 2 * beams)
            source_beam, token = top_index // vocab, top_index % vocab  # (B, 2K)
            candidates = tf.gather(alive_ids, source_beam, batch_dims=1)
            candidates = tf.where(positions == index, token[:, :, None], candidates)

            # Finished: EOS candidates ranked within the best K, and at the
            # last step every such candidate.
            in_beam = tf.range(2 * beams) < beams
            ends = tf.logical_or(tf.equal(token, self.limits.eos_id), index + 1 >= length)
            ends = tf.logical_and(ends, in_beam[None, :])
            scores = tf.where(ends, top_logp / length_penalty(index + 1, alpha), neg_inf)
            finished_scores, pick = tf.math.top_k(
                tf.concat([finished_scores, scores], 1), beams
            )
            finished_ids = tf.gather(
                tf.concat([finished_ids, candidates], 1), pick, batch_dims=1
            )

            # Alive: the K best candidates that did not emit EOS (2K hold at
            # least K, since each alive beam has one EOS extension).
            not_eos = tf.where(tf.equal(token, self.limits.eos_id), neg_inf, top_logp)
            alive_logp, pick = tf.math.top_k(not_eos, beams)
            alive_ids = tf.gather(candidates, pick, batch_dims=1)
            parents = tf.gather(source_beam, pick, batch_dims=1) + row_offsets
            state = reorder_state(state, tf.reshape(parents, [-1]))
            tokens = tf.reshape(tf.gather(token, pick, batch_dims=1), [-1])
            new = (tokens, alive_ids, alive_logp, finished_ids, finished_scores, state)
            return (index + 1,) + _keep_shapes(new, old)

        loop = tf.while_loop(
            keep_going,
            body,
            (tf.constant(0), tokens, alive_ids, alive_logp, finished_ids, finished_scores, state),
        )
        finished_ids, finished_scores = loop[4], loop[5]
        return finished_ids[:, : self.num_return], finished_scores[:, : self.num_return]


def _keep_shapes(new, old):
    """Restores the static shapes a loop variable had on entry (dynamic
    batch sizes in reshapes and gathers lose them; the loop must not)."""

    def keep(new_tensor, old_tensor):
        new_tensor.set_shape(new_tensor.shape.merge_with(old_tensor.shape))
        return new_tensor

    return tf.nest.map_structure(keep, new, old)
