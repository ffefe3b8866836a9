"""The decoder protocol: what a model implements so that searches drive it."""

import abc

import tensorflow as tf

from kseq.decoding.state import gather_beams, tile_beams
from kseq.layers.recurrent import portable_recurrence


class Decoder(abc.ABC):
    """A model that decodes one token at a time, for kseq's searches.

    A model implements two methods:
    - `begin_decoding(input_ids, max_length) -> (state, start_tokens)`: the
      state before the first step (a nest of batch-major tensors, the
      encoded source included) and the (B,) tokens the first step reads
      (BOS for a translator, each prompt's last token for a language model).
      `max_length` sizes a state of fixed shapes; None lets it grow.
      The Seq2Seq models build it with `encode` and `initial_state`.
    - `step_with_attention(token_ids, state, index) -> (logits (B, V),
      state, attention (B, S) or None)`: one step; `index` is the position
      of `token_ids`. The attention is over the source, for plots.

    and inherits `step(token_ids, state, index) -> (logits, state)` (what a
    search calls), `reorder_state`, `tile_state` and `select_rows` (beam
    search's row gathering, tiling and dropping of finished rows; a model can
    skip the parts that are equal across a row's beams), `search` (runs a
    search in TensorFlow ops, with recurrent layers on their portable loop so
    that it compiles with XLA and exports to any device) and
    `attention_by_steps` (the attention of every step of a teacher-forced
    target, through the same `step_with_attention`).
    """

    @abc.abstractmethod
    def begin_decoding(self, input_ids, max_length):
        """Prepares decoding: the state before the first step and the tokens that step reads.

        Args:
            input_ids: (B, S) ids (a translator's sources, a language model's prompts).
            max_length: the most tokens the search generates, which sizes a state
                of fixed shapes; None lets the state grow.

        Returns:
            (state, start_tokens): a nest of batch-major tensors, and (B,) int32.
        """

    @abc.abstractmethod
    def step_with_attention(self, token_ids, state, index):
        """Runs one decoding step and gives the attention over the source with it.

        Args:
            token_ids: (B,) tokens at position `index`.
            state: the decoding state.
            index: the position of `token_ids`.

        Returns:
            (logits, state, attention): next-token logits (B, V), the new state, and
            the (B, S) attention (for plots) or None.
        """

    def step(self, token_ids, state, index):
        """Runs one decoding step: what a search calls.

        Args:
            token_ids: (B,) tokens at position `index`.
            state: the decoding state.
            index: the position of `token_ids`.

        Returns:
            (logits, state): next-token logits (B, V) and the new state.
        """
        logits, state, _ = self.step_with_attention(token_ids, state, index)
        return logits, state

    def reorder_state(self, state, indices):
        """Reorders the state's rows: row i of the new state is row indices[i] of `state`.

        Args:
            state: the decoding state.
            indices: (R,) int32 rows to take.

        Returns:
            The reordered state.
        """
        return gather_beams(state, indices)

    def tile_state(self, state, beam_size):
        """Gives the state of `beam_size` beams a row, each row's beams side by side (beam search's start).

        By default every tensor's rows are repeated.

        Args:
            state: the decoding state of B rows.
            beam_size: the beams per row.

        Returns:
            The state of B * beam_size rows.
        """
        return tile_beams(state, beam_size)

    def select_rows(self, state, rows):
        """Keeps only rows `rows` of the parts of a beam search's state that `tile_state` keeps one a row.

        A beam search calls it when it drops rows that are done; `reorder_state`
        then picks the other rows' beams. By default no part is kept one a row.

        Args:
            state: the decoding state.
            rows: (A,) int32, the rows still searching.

        Returns:
            The state, those parts cut to A rows.
        """
        del rows
        return state

    def _row_selection(self):
        """`select_rows`, or None where dropping rows is not safe: a model
        that reorders only part of its tiled state (the rest equal across
        beams) and keeps nothing one a row must say how its rows are kept."""
        model = type(self)
        if model.reorder_state is not Decoder.reorder_state and model.select_rows is Decoder.select_rows:
            return None
        return self.select_rows

    def finish_search(self, input_ids, ids, scores):
        """Adjusts a search's output to the inputs (a hook; by default unchanged).

        Args:
            input_ids: (B, S) the inputs searched from.
            ids: the search's generated ids.
            scores: the search's scores.

        Returns:
            (ids, scores).
        """
        return ids, scores

    def search(self, input_ids, search, fixed_shapes=False):
        """Runs a kseq.decoding search on a batch, in TensorFlow ops (callable inside any tf.function).

        Recurrent layers run on their portable loop, so the search compiles with
        XLA and exports to any device.

        Args:
            input_ids: (B, S) ids.
            search: a kseq.decoding search (`GreedySearch`, `BeamSearch`, `Sampler`).
            fixed_shapes: keep every loop tensor's shape fixed across steps, as
                XLA needs (a Transformer then preallocates its cache for the search's
                `max_length`); without it, a state may grow with the steps and a
                beam search drops the rows that are done, which costs less where
                shapes may change. Default False.

        Returns:
            The search's fixed-shape (ids, scores): (B, L) and (B,), or (B, N, L)
            and (B, N) for a beam search returning N hypotheses.

        Raises:
            ValueError: the search has a `max_length_ratio` and the model no sources.
        """
        with portable_recurrence(self):
            state, start_tokens = self.begin_decoding(input_ids, search.max_length if fixed_shapes else None)
            ids, scores = search(
                self.step, state, tf.shape(input_ids)[0], reorder_state=self.reorder_state,
                start_tokens=start_tokens, length_limits=self.length_limits(input_ids, search),
                tile_state=self.tile_state, select_rows=None if fixed_shapes else self._row_selection(),
            )
        return self.finish_search(input_ids, ids, scores)

    def length_limits(self, input_ids, search):
        """Gives the most tokens each row may generate under `search`; only a model with sources (Seq2Seq) has them.

        Args:
            input_ids: (B, S) ids.
            search: a kseq.decoding search.

        Returns:
            (B,) int32, or None for no limit beyond `max_length`.

        Raises:
            ValueError: the search has a `max_length_ratio` (this model has no sources).
        """
        if search.limits.max_length_ratio is not None:
            raise ValueError(
                f"`max_length_ratio` needs a model with source sequences; {type(self).__name__} has none."
            )
        return None

    def attention_by_steps(self, input_ids, target_ids):
        """Gives the attention of each step over the inputs, the steps fed `target_ids` (teacher forcing).

        A Python loop of T steps: for plots of a few sentences.

        Args:
            input_ids: (B, S) ids.
            target_ids: (B, T) ids each step reads.

        Returns:
            (B, T, S) attention, or None for a model without attention.
        """
        state, _ = self.begin_decoding(input_ids, max_length=target_ids.shape[1])
        weights = []
        for index in range(target_ids.shape[1]):
            _, state, attention = self.step_with_attention(target_ids[:, index], state, index)
            if attention is None:
                return None
            weights.append(attention)
        return tf.stack(weights, axis=1)
