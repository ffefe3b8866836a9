"""The translator's servable: source strings in, translations out, the search in the graph."""

import tensorflow as tf

from kseq.decoding import BeamSearch, GreedySearch
from kseq.decoding.output import best_hypotheses, decoded_text
from kseq.export.compute_dtype import in_compute_dtype
from kseq.export.publishing import write_servable
from kseq.export.requests import few_shapes, id_matrix, length_within, normalized

SOURCE_SPEC = tf.TensorSpec([None], tf.string, name="source")
TARGET_SPEC = tf.TensorSpec([None], tf.string, name="target")


def translate_function(model, source_tokenizer, target_tokenizer, max_length=64,
                       max_source_length=256, search=None, jit_compile=False):
    """Makes the function that translates strings: tokenizer, search and detokenizer, all in TensorFlow ops.

    It is the function the exported signature serves, usable in-process too.
    Beam search serves its best hypothesis; the score is the search's score
    of the translation, as `generate(return_scores=True)` gives. Sources are
    cut to their first `max_source_length` tokens, and never more than the
    model's own `max_length` (a Transformer's position table): an over-long
    request gets the translation of its beginning, not an error.

    With `jit_compile`, the search (not the tokenizers, which XLA cannot
    compile) is compiled with XLA, once per input shape: requests are padded
    to a power-of-two number of rows and a multiple of 16 source tokens, so
    few shapes ever compile (decoding on a GPU is many times faster so).

    Args:
        model: a built kseq seq2seq model.
        source_tokenizer: the kseq tokenizer of its sources.
        target_tokenizer: the kseq tokenizer of its targets.
        max_length: tokens the default search generates at most. Default 64.
        max_source_length: source tokens read from each request. Default 256.
        search: a kseq.decoding search. Default None: greedy up to `max_length` tokens.
        jit_compile: compile the search with XLA. Default False.

    Returns:
        A function `(source (B,) tf.string) -> {"translation": (B,) strings,
        "token_ids": (B, T) int32, "score": (B,) float32}`.

    Raises:
        ValueError: the search would generate more tokens than the model's
            `max_length` allows, or `max_source_length` is not an int >= 1.
    """
    search = search or GreedySearch(max_length)
    max_source_length = _checked_source_length(model, search, max_source_length)
    return _translating(source_tokenizer, target_tokenizer, max_source_length,
                        _search_function(model, search, jit_compile), jit_compile)


def _checked_source_length(model, search, max_source_length):
    """`max_source_length` within the model's `max_length`, once `search` is checked to fit it too."""
    max_source_length = length_within(model.length_limit, max_source_length, "max_source_length")
    if model.length_limit is not None and search.max_length > model.length_limit:
        raise ValueError(
            f"`max_length` (the search's, {search.max_length}) is over the model's "
            f"max_length {model.length_limit}."
        )
    return max_source_length


def _translating(source_tokenizer, target_tokenizer, max_source_length, run_search, few):
    """`translate_function`'s function, decoding with `run_search` (`_search_function`)."""

    def translate(source):
        ids, rows = source_ids(source_tokenizer, source, max_source_length, few)
        generated, scores = run_search(ids)
        text, token_ids = decoded_text(target_tokenizer, generated[:rows])
        scores = scores[:rows, 0] if scores.shape.rank == 2 else scores[:rows]  # a beam search's best
        return {"translation": text, "token_ids": token_ids, "score": scores}

    return translate


def source_ids(tokenizer, source, max_source_length, few=False):
    """Reads source requests into ids, as training read text, cut to `max_source_length` tokens.

    A blank request has no ids: it translates to "".

    Args:
        tokenizer: the kseq tokenizer of the sources.
        source: (B,) tf.string.
        max_source_length: tokens kept from the start of each source.
        few: pad the ids to few shapes (see `few_shapes`). Default False.

    Returns:
        (ids, B): the (B', S) int32 ids (B' = B unless `few`) and the number of requests.
    """
    source, _ = normalized(source)
    ids = id_matrix(tokenizer.tokenize(source)[:, :max_source_length])
    rows = tf.shape(ids)[0]
    return (few_shapes(ids, max_source_length) if few else ids), rows


def n_best_function(model, source_tokenizer, target_tokenizer, search, n_best, max_source_length=256):
    """Makes the function that gives the `n_best` best translations of each string, best first.

    They come from a beam search with `search`'s limits and length penalty
    (0.6 if it has none) and at least `n_best` beams.

    Args:
        model: a built kseq seq2seq model.
        source_tokenizer: the kseq tokenizer of its sources.
        target_tokenizer: the kseq tokenizer of its targets.
        search: the kseq.decoding search whose limits, beams and length penalty are taken.
        n_best: N, the hypotheses given per source.
        max_source_length: source tokens read from each request. Default 256.

    Returns:
        A function `(source (B,) tf.string) -> {"translations": (B, N) strings,
        "scores": (B, N) float32, "token_ids": (B, N, T) int32}`.

    Raises:
        ValueError: `max_source_length` is not an int >= 1.
    """
    beams = BeamSearch(limits=search.limits, beam_size=max(n_best, getattr(search, "beam_size", 1)),
                       length_penalty=getattr(search, "length_penalty", 0.6), num_return=n_best)
    max_source_length = length_within(model.length_limit, max_source_length, "max_source_length")

    def translate_n_best(source):
        ids, _ = source_ids(source_tokenizer, source, max_source_length)
        generated, scores = model.search(ids, beams)  # (B, N, L)
        shape = tf.shape(generated)
        flat, token_ids = decoded_text(target_tokenizer, tf.reshape(generated, [-1, shape[2]]))
        return {"translations": tf.reshape(flat, shape[:2]), "scores": scores,
                "token_ids": tf.reshape(token_ids, tf.concat([shape[:2], [-1]], 0))}

    return translate_n_best


def alignment_function(model, source_tokenizer, target_tokenizer, search, max_source_length=256, run_search=None):
    """Makes the function that translates strings and aligns each output token with a source position.

    The position is the source token the output token attends to most
    (`Seq2Seq.alignment`), -1 on padding.

    Args:
        model: a built kseq seq2seq model with attention.
        source_tokenizer: the kseq tokenizer of its sources.
        target_tokenizer: the kseq tokenizer of its targets.
        search: a kseq.decoding search; a beam search gives its best hypothesis.
        max_source_length: source tokens read from each request. Default 256.
        run_search: ids (B, S) -> `search`'s (ids, scores), e.g. the traced
            function the translation signature calls (`_search_function`).
            Default None: `model.search` with `search`.

    Returns:
        A function `(source (B,) tf.string) -> {"translation": (B,) strings,
        "token_ids": (B, T) int32, "alignment": (B, T) int32}`.

    Raises:
        ValueError: `max_source_length` is not an int >= 1.
    """
    max_source_length = length_within(model.length_limit, max_source_length, "max_source_length")
    run_search = run_search or (lambda ids: model.search(ids, search))

    def align(source):
        ids, _ = source_ids(source_tokenizer, source, max_source_length)
        generated, _ = run_search(ids)
        generated = best_hypotheses(generated)
        text, token_ids = decoded_text(target_tokenizer, generated)
        alignment = model.alignment(ids, generated)[:, : tf.shape(token_ids)[1]]
        return {"translation": text, "token_ids": token_ids, "alignment": alignment}

    return align


def score_function(model, source_tokenizer, target_tokenizer, max_source_length=256):
    """Makes the function that scores each target's log-probability given its source (`Seq2Seq.score`).

    Both are read as training read text; targets are cut to what the model can hold.

    Args:
        model: a built kseq seq2seq model.
        source_tokenizer: the kseq tokenizer of its sources.
        target_tokenizer: the kseq tokenizer of its targets.
        max_source_length: source tokens read from each request. Default 256.

    Returns:
        A function `(source (B,) tf.string, target (B,) tf.string) -> {"log_probability": (B,) float32}`.

    Raises:
        ValueError: `max_source_length` is not an int >= 1.
    """
    max_source_length = length_within(model.length_limit, max_source_length, "max_source_length")
    max_target_length = None if model.length_limit is None else model.length_limit - 1  # + BOS

    def score(source, target):
        ids, _ = source_ids(source_tokenizer, source, max_source_length)
        target, _ = normalized(target)
        target_ids = id_matrix(target_tokenizer.tokenize(target)[:, :max_target_length])
        return {"log_probability": model.score(ids, target_ids)}

    return score


def _search_function(model, search, jit_compile):
    """ids (B, S) -> the search's (ids, scores), compiled with XLA if asked.

    A traced function of its own: signatures that decode with the same
    search call it, and an export traces the search once for all of them.
    """
    return tf.function(
        lambda ids: model.search(ids, search, fixed_shapes=jit_compile),
        input_signature=[tf.TensorSpec([None, None], tf.int32)], jit_compile=jit_compile, autograph=False,
    )


def export_translator(
    model, source_tokenizer, target_tokenizer, export_dir: str, version: int | None = None, max_length: int = 64,
    max_source_length: int = 256, search=None, assets: dict[str, bytes] | None = None, jit_compile: bool = False,
    n_best: int = 4,
) -> str:
    """Writes `export_dir/<version>/`, a SavedModel whose signatures translate `source` tf.string (None,).

    Sources are read as training read text. The signatures:

    - `serving_default` -> `translation` tf.string (None,), `token_ids`
      int32 (None, None), `score` float32 (None,), decoding with `search`
      (see `translate_function`; `jit_compile` serves the search compiled by
      XLA, as TF Serving does on a GPU or a CPU build with XLA);
    - `n_best` -> `translations` (None, N), `scores`, `token_ids`: the
      `n_best` best hypotheses of a beam search (0: no such signature);
    - `alignment` (models with attention) -> `translation`, `token_ids`,
      `alignment` int32 (None, None): the source position each output
      token attends to most;
    - `score`, also taking `target` tf.string (None,) -> `log_probability`
      float32 (None,): the target's log-probability given the source.

    A model under a mixed dtype policy is served with its weights stored in
    its compute dtype (`in_compute_dtype`): no cast at each step. TF
    Serving's warm-up requests, one a signature, go to `assets.extra/`.
    Written atomically (see `write_servable`).

    Args:
        model: a kseq seq2seq model.
        source_tokenizer: the kseq tokenizer of its sources.
        target_tokenizer: the kseq tokenizer of its targets.
        export_dir: the folder of the versions (TF Serving's model folder).
        version: an int >= 0 whose folder is absent or empty. Default None: the next free version.
        max_length: tokens the default search generates at most. Default 64.
        max_source_length: source tokens read from each request. Default 256.
        search: a kseq.decoding search. Default None: greedy up to `max_length` tokens.
        assets: {file name: bytes} (e.g. the vocabulary) for the version's `assets/` folder. Default None.
        jit_compile: serve the search compiled by XLA. Default False.
        n_best: hypotheses of the `n_best` signature; 0 leaves it out. Default 4.

    Returns:
        The path of the new version.

    Raises:
        ValueError: the search generates more tokens than the model allows,
            or a bad `max_source_length`, `export_dir` or `version`.
    """
    model = in_compute_dtype(model)
    search = search or GreedySearch(max_length)
    tokenizers = (source_tokenizer, target_tokenizer)
    source_length = _checked_source_length(model, search, max_source_length)
    run_search = _search_function(model, search, jit_compile)
    endpoints = {"serving_default": (_translating(*tokenizers, source_length, run_search, few=jit_compile),
                                     [SOURCE_SPEC]),
                 "score": (score_function(model, *tokenizers, max_source_length), [SOURCE_SPEC, TARGET_SPEC])}
    if n_best:
        endpoints["n_best"] = (n_best_function(model, *tokenizers, search, n_best, max_source_length), [SOURCE_SPEC])
    if model.has_attention:
        # The translation's search, traced once for both, unless XLA's (padded to few shapes).
        endpoints["alignment"] = (alignment_function(model, *tokenizers, search, max_source_length,
                                                     run_search=None if jit_compile else run_search), [SOURCE_SPEC])
    warmup = {name: {spec.name: ["warm-up"] for spec in specs} for name, (_, specs) in endpoints.items()}
    return write_servable(export_dir, endpoints, (model, *tokenizers), version, assets, warmup=warmup)
