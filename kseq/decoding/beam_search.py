"""Beam search with the GNMT length penalty and a pool of finished hypotheses."""

import math

import tensorflow as tf

from kseq.decoding.constraints import apply_limits, suppress_special_tokens
from kseq.decoding.limits import search_limits
from kseq.decoding.state import gather_beams, tile_beams
from kseq.special_ids import BOS_ID, EOS_ID, PAD_ID
from kseq._shapes import dynamic_shape
from kseq._validation import check_float, check_positive_int


def length_penalty(length, alpha):
    """Computes GNMT's length penalty ((5 + |Y|) / 6) ** alpha.

    Hypotheses are scored log P(Y) / penalty.

    Args:
        length: |Y|, the hypotheses' lengths (any shape; cast to float32).
        alpha: the penalty's exponent; 0 makes every penalty 1.

    Returns:
        float32 penalties of `length`'s shape.
    """
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def _checked_penalty(value):
    if not isinstance(value, tf.Variable):
        return check_float("length_penalty", value)
    if value.dtype != tf.float32 or value.shape.rank != 0:
        raise ValueError(f"`length_penalty` as a variable must be a scalar float32; got {value.dtype.name} "
                         f"of shape {value.shape}.")
    return value


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
            0 ranks by log-probability alone. Defaults to 0.6. A scalar
            float32 `tf.Variable` is read at each call instead: one traced
            search then serves every value it is set to.
        num_return: N <= K best hypotheses returned per row. Defaults to 1.
        eos_id, no_repeat_ngram_size, max_length_ratio, max_ngram_count: the
            other limits, applied to every hypothesis (see
            `kseq.decoding.Limits`; `eos_id` -1: none ever ends).
        limits: a `kseq.decoding.Limits` instead of `max_length` and the
            limits above.
        patience: in (0, 1]: a row ends once ceil(patience x `beam_size`)
            hypotheses, at least `num_return`, have finished (CTranslate2's
            rule). Defaults to None: once no alive hypothesis can win.

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
        self.length_penalty = _checked_penalty(length_penalty)
        self.num_return = check_positive_int("num_return", num_return)
        if self.num_return > self.beam_size:
            raise ValueError(
                f"`num_return` ({num_return}) must be <= `beam_size` ({beam_size})."
            )
        self.bos_id, self.pad_id = int(bos_id), int(pad_id)
        if patience is not None and not 0 < patience <= 1:
            raise ValueError(f"`patience` must be in (0, 1] or None; got {patience!r}.")
        self.patience = patience
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
        loop = _BeamLoop(self, step_fn, reorder_state or gather_beams, select_rows)
        variables = loop.initial(state, batch_size, start_tokens, length_limits, tile_state)
        (variables,) = tf.while_loop(loop.keep_going, loop.body, (variables,), shape_invariants=loop.shapes)
        return loop.results(variables)


class _BeamLoop:
    """One `BeamSearch` call's `tf.while_loop`: its first loop variables, its
    condition and its body. Made afresh by every call, in the caller's graph,
    so no tensor or Python state is shared between traces.

    Args:
        search: the `BeamSearch`.
        step_fn, reorder_state, select_rows: as `BeamSearch.__call__` takes
            them (`reorder_state` given).
    """

    def __init__(self, search, step_fn, reorder_state, select_rows):
        self.search, self.step_fn, self.reorder_state, self.select_rows = search, step_fn, reorder_state, select_rows
        self.beams, self.length = search.beam_size, search.max_length
        self.alpha, self.returned = search.length_penalty, search.num_return
        # The most any continuation can be divided by: penalties grow with
        # length for alpha >= 0 and shrink for alpha < 0.
        self.best_penalty_at_max = length_penalty(self.length, self.alpha)
        self.positions = tf.range(self.length)
        self.neg_inf = tf.constant(-float("inf"))
        self.pad = tf.constant(search.pad_id, tf.int32)
        self.shapes = None  # the shape invariants, once `initial` made the loop variables

    def initial(self, state, batch_size, start_tokens, length_limits, tile_state):
        """The loop variables before the first step (a dict); sets `shapes`.

        Args:
            state, batch_size, start_tokens, length_limits, tile_state: as
                `BeamSearch.__call__` takes them.

        Returns:
            The dict of loop variables.
        """
        beams, neg_inf = self.beams, self.neg_inf
        alive_ids = tf.fill([batch_size, beams, self.length], self.pad)
        if start_tokens is None:
            tokens = tf.fill([batch_size * beams], tf.constant(self.search.bos_id, tf.int32))
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
        if self.select_rows is not None:
            loop.update(rows=tf.range(batch_size), out_ids=tf.fill([batch_size, self.returned, self.length], self.pad),
                        out_scores=tf.fill([batch_size, self.returned], neg_inf))
            self.shapes = (_row_invariants(loop),)
        elif self.search.finished_to_stop is not None:
            # Rows that stopped for their count stay in the loop: no later
            # hypothesis may join their pool (the result would then depend on
            # the rest of the batch).
            loop["done"] = tf.zeros([batch_size], tf.bool)
        return loop

    def searching(self, index, alive_logp, finished_scores):
        """(rows,): whether a row's alive hypotheses can still beat its
        `num_return`-th finished one from step `index` on (and, with a
        `patience`, it holds too few finished ones)."""
        reachable = tf.maximum(length_penalty(index + 1, self.alpha), self.best_penalty_at_max)
        going = tf.reduce_max(alive_logp, axis=1) / reachable > finished_scores[:, self.returned - 1]
        if self.search.finished_to_stop is None:
            return going
        finished = tf.reduce_sum(tf.cast(finished_scores > self.neg_inf, tf.int32), axis=1)
        return tf.logical_and(going, finished < self.search.finished_to_stop)

    def keep_going(self, v):
        """The loop's condition: steps are left and some row still searches."""
        if self.select_rows is not None:
            return tf.logical_and(v["index"] < self.length, tf.size(v["rows"]) > 0)
        if "done" in v:
            return tf.logical_and(v["index"] < self.length, tf.logical_not(tf.reduce_all(v["done"])))
        return tf.logical_and(v["index"] < self.length,
                              tf.reduce_any(self.searching(v["index"], v["alive_logp"], v["finished_scores"])))

    def body(self, v):
        """One step: every alive hypothesis extended, the best finished and
        alive ones kept, the state reordered to the kept beams.

        Args:
            v: the loop variables (a dict).

        Returns:
            A 1-tuple of the next step's loop variables.
        """
        index, rows = v["index"], dynamic_shape(v["alive_logp"])[0]
        logp, state = self.log_probs(v)
        top_logp, source_beam, token, candidates = self.extensions(v, logp, rows)
        finished_ids, finished_scores = self.finished(v, top_logp, token, candidates)
        # Alive: the K best candidates that did not emit EOS (2K hold at
        # least K, since each alive beam has one EOS extension).
        not_eos = tf.where(tf.equal(token, self.search.limits.eos_id), self.neg_inf, top_logp)
        alive_logp, pick = tf.math.top_k(not_eos, self.beams)
        new = dict(v, index=index + 1, tokens=tf.gather(token, pick, batch_dims=1),
                   alive_ids=tf.gather(candidates, pick, batch_dims=1), alive_logp=alive_logp,
                   finished_ids=finished_ids, finished_scores=finished_scores, state=state)
        parents = tf.gather(source_beam, pick, batch_dims=1) + tf.range(rows)[:, None] * self.beams
        new, parents = self.stop_rows(v, new, parents)
        new["state"] = self.reorder_state(new["state"], tf.reshape(parents, [-1]))
        new["tokens"] = tf.reshape(new["tokens"], [-1])
        return (_keep_shapes(new, self.shapes[0] if self.shapes else v),)

    def log_probs(self, v):
        """The step's (B*K, V) log-probabilities, limits applied, and the
        step function's new state."""
        logits, state = self.step_fn(v["tokens"], v["state"], v["index"])
        logp = tf.nn.log_softmax(suppress_special_tokens(tf.cast(logits, tf.float32)))
        history = tf.reshape(v["alive_ids"], [-1, self.length])
        return apply_limits(logp, history, v["index"], v.get("limits"), self.search.limits), state

    def extensions(self, v, logp, rows):
        """The 2K most likely extensions of each row's alive hypotheses:
        (log-probabilities, source beams, tokens, ids (rows, 2K, length))."""
        vocab = dynamic_shape(logp)[-1]
        total = v["alive_logp"][:, :, None] + tf.reshape(logp, [rows, self.beams, vocab])
        top_logp, top_index = tf.math.top_k(tf.reshape(total, [rows, -1]), 2 * self.beams)
        source_beam, token = top_index // vocab, top_index % vocab  # (B, 2K)
        candidates = tf.gather(v["alive_ids"], source_beam, batch_dims=1)
        candidates = tf.where(self.positions == v["index"], token[:, :, None], candidates)
        return top_logp, source_beam, token, candidates

    def finished(self, v, top_logp, token, candidates):
        """The pool of finished hypotheses with this step's joined:
        (ids (rows, K, length), scores (rows, K)), best first. Finished: EOS
        candidates ranked within the best K, and at the last step every
        such candidate."""
        index, beams = v["index"], self.beams
        in_beam = tf.range(2 * beams) < beams
        ends = tf.logical_or(tf.equal(token, self.search.limits.eos_id), index + 1 >= self.length)
        ends = tf.logical_and(ends, in_beam[None, :])
        scores = tf.where(ends, top_logp / length_penalty(index + 1, self.alpha), self.neg_inf)
        if "done" in v:
            scores = tf.where(v["done"][:, None], self.neg_inf, scores)
        finished_scores, pick = tf.math.top_k(tf.concat([v["finished_scores"], scores], 1), beams)
        finished_ids = tf.gather(tf.concat([v["finished_ids"], candidates], 1), pick, batch_dims=1)
        return finished_ids, finished_scores

    def stop_rows(self, v, new, parents):
        """Marks the rows that stopped `done`, or, given `select_rows`,
        retires them from the loop; returns (new, parents)."""
        index = v["index"]
        if "done" in v:
            stopped = tf.logical_not(self.searching(index + 1, new["alive_logp"], new["finished_scores"]))
            new["done"] = tf.logical_or(v["done"], stopped)
        if self.select_rows is not None:
            going = tf.logical_and(self.searching(index + 1, new["alive_logp"], new["finished_scores"]),
                                   index + 1 < self.length)
            new, parents = tf.cond(tf.reduce_all(going), lambda: (new, parents),
                                   lambda: _retire(new, parents, going, self.returned, self.select_rows))
        return new, parents

    def results(self, v):
        """(ids (B, N, length), scores (B, N)) from the final loop variables."""
        if self.select_rows is not None:
            return v["out_ids"], v["out_scores"]
        return v["finished_ids"][:, :self.returned], v["finished_scores"][:, :self.returned]


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


def _row_invariants(loop):
    """The loop variables' shape invariants where rows leave the loop: every
    row-major tensor may lose rows; the step and the results keep theirs."""
    shapes = {key: tf.nest.map_structure(_any_rows, value) for key, value in loop.items()}
    shapes.update(index=loop["index"].shape, out_ids=loop["out_ids"].shape, out_scores=loop["out_scores"].shape)
    return shapes


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
