"""Beam search with the GNMT length penalty and a pool of finished hypotheses."""

import math

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
    hypotheses are scored as they are. All state lives in loop variables of
    one `tf.while_loop`: of fixed shapes, or, given `select_rows`, losing the
    rows that are done.

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
                 max_length_ratio: float | None = None, max_ngram_count: int = 1, limits=None,
                 patience: float | None = None) -> None:
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
        if patience is not None and not 0 < patience <= 1:
            raise ValueError(f"`patience` must be in (0, 1] or None; got {patience!r}.")
        # The finished hypotheses that end a row's search (None: the bound alone).
        self.finished_to_stop = None if patience is None else max(self.num_return, math.ceil(patience * self.beam_size))

    @property
    def max_length(self):
        return self.limits.max_length

    def __call__(self, step_fn, state, batch_size, reorder_state=None, start_tokens=None,
                 length_limits=None, tile_state=None, select_rows=None):
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
            select_rows: `(state, rows (A,)) -> state` keeping the rows
                `rows` of the parts `tile_state` left one a row. Given, a row
                that is done leaves the loop, so that the rows still
                searching carry no finished ones (shapes then change between
                steps, which XLA cannot compile); `reorder_state` picks the
                remaining rows' beams. None: every row runs every step.

        Returns:
            (ids, scores): ids (B, N, max_length) int32, best first, no BOS,
            EOS kept, PAD after EOS; scores (B, N) float32 length-penalised
            log-probabilities.
        """
        reorder_state = reorder_state or gather_beams
        beams, length, alpha, returned = self.beam_size, self.max_length, self.length_penalty, self.num_return
        # The most any continuation can be divided by: penalties grow with
        # length for alpha >= 0 and shrink for alpha < 0.
        best_penalty_at_max = length_penalty(length, alpha)
        positions = tf.range(length)
        neg_inf = tf.constant(-float("inf"))
        pad = tf.constant(self.pad_id, tf.int32)

        def searching(index, alive_logp, finished_scores):
            """(rows,): whether a row's alive hypotheses can still beat its
            `num_return`-th finished one from step `index` on (and, with a
            `patience`, it holds too few finished ones)."""
            reachable = tf.maximum(length_penalty(index + 1, alpha), best_penalty_at_max)
            going = tf.reduce_max(alive_logp, axis=1) / reachable > finished_scores[:, returned - 1]
            if self.finished_to_stop is None:
                return going
            finished = tf.reduce_sum(tf.cast(finished_scores > neg_inf, tf.int32), axis=1)
            return tf.logical_and(going, finished < self.finished_to_stop)

        alive_ids = tf.fill([batch_size, beams, length], pad)
        if start_tokens is None:
            tokens = tf.fill([batch_size * beams], tf.constant(self.bos_id, tf.int32))
        else:
            tokens = tf.repeat(tf.cast(start_tokens, tf.int32), beams)
        loop = dict(
            index=tf.constant(0), tokens=tokens, alive_ids=alive_ids,
            # Only the first beam is live at the start: the others would repeat it.
            alive_logp=tf.tile(tf.concat([[0.0], tf.fill([beams - 1], neg_inf)], 0)[None, :], [batch_size, 1]),
            finished_ids=alive_ids, finished_scores=tf.fill([batch_size, beams], neg_inf),
            state=(tile_state or tile_beams)(state, beams),
        )
        if length_limits is not None:
            loop["limits"] = length_limits
        if select_rows is not None:
            loop.update(rows=tf.range(batch_size), out_ids=tf.fill([batch_size, returned, length], pad),
                        out_scores=tf.fill([batch_size, returned], neg_inf))
        elif self.finished_to_stop is not None:
            # Rows that stopped for their count stay in the loop: no later
            # hypothesis may join their pool (the result would then depend on
            # the rest of the batch).
            loop["done"] = tf.zeros([batch_size], tf.bool)

        shapes = None
        if select_rows is not None:  # every row-major loop tensor may lose rows
            shapes = {key: tf.nest.map_structure(_any_rows, value) for key, value in loop.items()}
            shapes.update(index=loop["index"].shape, out_ids=loop["out_ids"].shape,
                          out_scores=loop["out_scores"].shape)
            shapes = (shapes,)

        def keep_going(v):
            if select_rows is not None:
                return tf.logical_and(v["index"] < length, tf.size(v["rows"]) > 0)
            if "done" in v:
                return tf.logical_and(v["index"] < length, tf.logical_not(tf.reduce_all(v["done"])))
            return tf.logical_and(v["index"] < length,
                                  tf.reduce_any(searching(v["index"], v["alive_logp"], v["finished_scores"])))

        def body(v):
            index, rows = v["index"], tf.shape(v["alive_logp"])[0]
            logits, state = step_fn(v["tokens"], v["state"], index)
            logp = tf.nn.log_softmax(suppress_special_tokens(tf.cast(logits, tf.float32)))
            history = tf.reshape(v["alive_ids"], [-1, length])
            logp = apply_limits(logp, history, index, v.get("limits"), self.limits)
            vocab = tf.shape(logp)[-1]
            total = v["alive_logp"][:, :, None] + tf.reshape(logp, [rows, beams, vocab])
            top_logp, top_index = tf.math.top_k(tf.reshape(total, [rows, -1]), 2 * beams)
            source_beam, token = top_index // vocab, top_index % vocab  # (B, 2K)
            candidates = tf.gather(v["alive_ids"], source_beam, batch_dims=1)
            candidates = tf.where(positions == index, token[:, :, None], candidates)

            # Finished: EOS candidates ranked within the best K, and at the
            # last step every such candidate.
            in_beam = tf.range(2 * beams) < beams
            ends = tf.logical_or(tf.equal(token, self.limits.eos_id), index + 1 >= length)
            ends = tf.logical_and(ends, in_beam[None, :])
            scores = tf.where(ends, top_logp / length_penalty(index + 1, alpha), neg_inf)
            if "done" in v:
                scores = tf.where(v["done"][:, None], neg_inf, scores)
            finished_scores, pick = tf.math.top_k(tf.concat([v["finished_scores"], scores], 1), beams)
            finished_ids = tf.gather(tf.concat([v["finished_ids"], candidates], 1), pick, batch_dims=1)

            # Alive: the K best candidates that did not emit EOS (2K hold at
            # least K, since each alive beam has one EOS extension).
            not_eos = tf.where(tf.equal(token, self.limits.eos_id), neg_inf, top_logp)
            alive_logp, pick = tf.math.top_k(not_eos, beams)
            new = dict(v, index=index + 1, tokens=tf.gather(token, pick, batch_dims=1),
                       alive_ids=tf.gather(candidates, pick, batch_dims=1), alive_logp=alive_logp,
                       finished_ids=finished_ids, finished_scores=finished_scores, state=state)
            parents = tf.gather(source_beam, pick, batch_dims=1) + tf.range(rows)[:, None] * beams
            if "done" in v:
                stopped = tf.logical_not(searching(index + 1, alive_logp, finished_scores))
                new["done"] = tf.logical_or(v["done"], stopped)
            if select_rows is not None:
                going = tf.logical_and(searching(index + 1, alive_logp, finished_scores), index + 1 < length)
                new, parents = tf.cond(tf.reduce_all(going), lambda: (new, parents),
                                       lambda: _retire(new, parents, going, returned, select_rows))
            new["state"] = reorder_state(new["state"], tf.reshape(parents, [-1]))
            new["tokens"] = tf.reshape(new["tokens"], [-1])
            return (_keep_shapes(new, shapes[0] if shapes else v),)

        (loop,) = tf.while_loop(keep_going, body, (loop,), shape_invariants=shapes)
        if select_rows is not None:
            return loop["out_ids"], loop["out_scores"]
        return loop["finished_ids"][:, :returned], loop["finished_scores"][:, :returned]


_PER_ROW = ("rows", "tokens", "alive_ids", "alive_logp", "finished_ids", "finished_scores", "limits")


def _retire(loop, parents, going, returned, select_rows):
    """Writes the results of the rows that are done (not `going`) and drops
    them from the loop's tensors; returns (loop, parents) of the others."""
    done = tf.logical_not(going)
    at = tf.boolean_mask(loop["rows"], done)[:, None]
    out_ids = tf.tensor_scatter_nd_update(
        loop["out_ids"], at, tf.boolean_mask(loop["finished_ids"], done)[:, :returned])
    out_scores = tf.tensor_scatter_nd_update(
        loop["out_scores"], at, tf.boolean_mask(loop["finished_scores"], done)[:, :returned])
    kept = tf.where(going)[:, 0]
    loop = dict(loop, out_ids=out_ids, out_scores=out_scores, state=select_rows(loop["state"], kept),
                **{key: tf.gather(loop[key], kept) for key in _PER_ROW if key in loop})
    return loop, tf.gather(parents, kept)


def _any_rows(tensor):
    """A loop tensor's shape with any number of rows."""
    return tf.TensorShape([None]).concatenate(tensor.shape[1:])


def _keep_shapes(new, old):
    """Restores the static shapes a loop variable had on entry, or its
    shape invariant (dynamic batch sizes in reshapes and gathers lose them;
    the loop must not)."""

    def keep(new_tensor, old_shape):
        if not isinstance(old_shape, tf.TensorShape):
            old_shape = old_shape.shape
        new_tensor.set_shape(new_tensor.shape.merge_with(old_shape))
        return new_tensor

    return tf.nest.map_structure(keep, new, old)
