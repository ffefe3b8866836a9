"""The translator's servable: source strings in, translations out, the search in the graph."""

import tensorflow as tf

from kseq.decoding import BeamSearch, GreedySearch, n_best_search, trim_padding
from kseq.decoding.output import decoded_text
from kseq.export.compute_dtype import in_compute_dtype
from kseq.export.publishing import write_servable
from kseq.export.requests import few_shapes, id_matrix, length_within, normalized
from kseq.special_ids import PAD_ID

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


def n_best_function(model, source_tokenizer, target_tokenizer, search, n_best, max_source_length=256,
                    translate=None):
    """Makes the function that gives `n_best` translations of each string: the translation first, then its rivals.

    The first hypothesis is `translate`'s translation and score, as the
    translation signature serves them, whatever search the others need. The
    others are the best hypotheses of `n_best_search(search, n_best)` (the
    same limits, length penalty and patience, at least `n_best` beams) that
    are not the first, best first. Every score is on the scale of the
    translation's: a beam search's length-penalised log-probability, else
    the summed log-probability. A rival may score above the first where the
    wider search found one (a greedy translation, or fewer beams than `n_best`).

    Args:
        model: a built kseq seq2seq model.
        source_tokenizer: the kseq tokenizer of its sources.
        target_tokenizer: the kseq tokenizer of its targets.
        search: the kseq.decoding search of the translation.
        n_best: N >= 1, the hypotheses given per source.
        max_source_length: source tokens read from each request. Default 256.
        translate: the translation signature's function (`translate_function`'s)
            with `search`. Default None: `translate_function` with `search`.

    Returns:
        A function `(source (B,) tf.string) -> {"translations": (B, N) strings,
        "scores": (B, N) float32, "token_ids": (B, N, T) int32}`.

    Raises:
        ValueError: `max_source_length` or `n_best` is not an int >= 1.
    """
    rivals = n_best_search(search, n_best)
    max_source_length = length_within(model.length_limit, max_source_length, "max_source_length")
    translate = translate or translate_function(model, source_tokenizer, target_tokenizer,
                                                max_source_length=max_source_length, search=search)

    def translate_n_best(source):
        first = translate(source)
        if n_best == 1:
            return {"translations": first["translation"][:, None], "scores": first["score"][:, None],
                    "token_ids": first["token_ids"][:, None]}
        ids, _ = source_ids(source_tokenizer, source, max_source_length)
        generated, scores = model.search(ids, rivals)  # (B, N, L)
        return _first_then_rivals(target_tokenizer, first, generated, scores)

    return translate_n_best


def _first_then_rivals(tokenizer, first, generated, scores):
    """`n_best_function`'s outputs: the translation `first` (`translate`'s
    outputs), then the N - 1 best of a search's (B, N, L) hypotheses that
    are not it, with their (B, N) `scores`."""
    count, length = generated.shape[1], generated.shape[2]
    first_ids = _full_width(first["token_ids"], length)
    same = tf.reduce_all(tf.equal(generated, first_ids[:, None]), axis=2)
    rank = tf.range(count)[None, :]
    rivals = tf.argsort(tf.where(same, count + rank, rank), axis=1, stable=True)[:, : count - 1]
    rival_ids = tf.gather(generated, rivals, batch_dims=1)
    texts, _ = decoded_text(tokenizer, tf.reshape(rival_ids, [-1, length]))
    return {"translations": tf.concat([first["translation"][:, None], tf.reshape(texts, [-1, count - 1])], 1),
            "scores": tf.concat([first["score"][:, None], tf.gather(scores, rivals, batch_dims=1)], 1),
            "token_ids": trim_padding(tf.concat([first_ids[:, None], rival_ids], 1))}


def _full_width(token_ids, length):
    """A translation's (B, T) `token_ids` padded with PAD to `length` >= T columns, a static width (B, length)."""
    padded = tf.pad(token_ids, [[0, 0], [0, length - tf.shape(token_ids)[1]]], constant_values=PAD_ID)
    return tf.ensure_shape(padded, [None, length])


def alignment_function(model, source_tokenizer, target_tokenizer, search, max_source_length=256, translate=None):
    """Makes the function that translates strings and aligns each output token with a source position.

    The translation is `translate`'s, as the translation signature serves
    it; the position is the source token each output token attends to most
    (`Seq2Seq.alignment`), -1 on padding.

    Args:
        model: a built kseq seq2seq model with attention.
        source_tokenizer: the kseq tokenizer of its sources.
        target_tokenizer: the kseq tokenizer of its targets.
        search: the kseq.decoding search of the translation.
        max_source_length: source tokens read from each request. Default 256.
        translate: the translation signature's function (`translate_function`'s)
            with `search`. Default None: `translate_function` with `search`.

    Returns:
        A function `(source (B,) tf.string) -> {"translation": (B,) strings,
        "token_ids": (B, T) int32, "alignment": (B, T) int32}`.

    Raises:
        ValueError: `max_source_length` is not an int >= 1.
    """
    max_source_length = length_within(model.length_limit, max_source_length, "max_source_length")
    translate = translate or translate_function(model, source_tokenizer, target_tokenizer,
                                                max_source_length=max_source_length, search=search)

    def align(source):
        ids, _ = source_ids(source_tokenizer, source, max_source_length)
        translated = translate(source)
        token_ids = translated["token_ids"]
        alignment = model.alignment(ids, _full_width(token_ids, search.max_length))[:, : tf.shape(token_ids)[1]]
        return {"translation": translated["translation"], "token_ids": token_ids, "alignment": alignment}

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

    Sources are read as training read text. The signatures (docs/SERVING.md):

    - `serving_default` -> `translation` tf.string (None,), `token_ids`
      int32 (None, None), `score` float32 (None,): `search`'s translation
      (`translate_function`; `jit_compile` serves the search compiled by
      XLA, as TF Serving does on a GPU or a CPU build with XLA);
    - `n_best` -> `translations` (None, N), `scores`, `token_ids`: that
      translation first, then the best others of `search` widened to
      `n_best` hypotheses (`n_best_function`; 0: no such signature), read
      from the translation's own search where it finds the same translation
      returning N (`_returning_n_best`: one search for both);
    - `alignment` (models with attention) -> that `translation` and
      `token_ids`, and `alignment` int32 (None, None): the source position
      each output token attends to most;
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
            or a bad `max_source_length`, `n_best`, `export_dir` or `version`.
    """
    model = in_compute_dtype(model)
    endpoints = _endpoints(model, (source_tokenizer, target_tokenizer), search or GreedySearch(max_length),
                           max_source_length, n_best, jit_compile)
    warmup = {name: {spec.name: ["warm-up"] for spec in specs} for name, (_, specs) in endpoints.items()}
    return write_servable(export_dir, endpoints, (model, source_tokenizer, target_tokenizer), version, assets,
                          warmup=warmup)


def _endpoints(model, tokenizers, search, max_source_length, n_best, jit_compile):
    """`export_translator`'s {signature name: (function, input specs)}.

    One translation function, its search traced once, which every signature
    that decodes starts from: they serve the same translation. Where that
    search can return the n-best list itself (`_returning_n_best`), `n_best`
    reads it from the same traced search: one search a request, one trace.
    """
    max_source_length = _checked_source_length(model, search, max_source_length)
    wide = _returning_n_best(search, n_best)
    run_search = _search_function(model, wide or search, jit_compile)
    translate = _translating(*tokenizers, max_source_length, run_search, jit_compile)
    endpoints = {"serving_default": (translate, [SOURCE_SPEC]),
                 "score": (score_function(model, *tokenizers, max_source_length), [SOURCE_SPEC, TARGET_SPEC])}
    if wide:
        endpoints["n_best"] = (_all_hypotheses(*tokenizers, max_source_length, run_search, jit_compile),
                               [SOURCE_SPEC])
    elif n_best:
        endpoints["n_best"] = (n_best_function(model, *tokenizers, search, n_best, max_source_length, translate),
                               [SOURCE_SPEC])
    if model.has_attention:
        endpoints["alignment"] = (alignment_function(model, *tokenizers, search, max_source_length, translate),
                                  [SOURCE_SPEC])
    return endpoints


def _returning_n_best(search, n_best):
    """`n_best_search(search, n_best)` where it finds the translation `search` finds, else None.

    That holds for a beam search that keeps as many beams either way and
    stops a row at as many finished hypotheses whether it returns one or N
    (a patience: ceil(patience x beams) >= N; the exact rule waits for the
    N-th best, which costs the translation time). Then the translation is
    the first of the N, and one search serves both signatures.
    """
    if not isinstance(search, BeamSearch) or n_best < 2 or search.finished_to_stop is None:
        return None
    wide = n_best_search(search, n_best)
    return wide if (wide.beam_size, wide.finished_to_stop) == (search.beam_size, search.finished_to_stop) else None


def _all_hypotheses(source_tokenizer, target_tokenizer, max_source_length, run_search, few):
    """The `n_best` function of a search that returns N hypotheses a row (`run_search`),
    the translation's own: its (B, N) texts, scores and (B, N, T) ids, best first."""

    def translate_n_best(source):
        ids, rows = source_ids(source_tokenizer, source, max_source_length, few)
        generated, scores = run_search(ids)
        generated, shape = generated[:rows], tf.shape(generated[:rows])  # (B, N, L)
        texts, token_ids = decoded_text(target_tokenizer, tf.reshape(generated, [-1, shape[2]]))
        return {"translations": tf.reshape(texts, shape[:2]), "scores": scores[:rows],
                "token_ids": tf.reshape(token_ids, tf.concat([shape[:2], [-1]], 0))}

    return translate_n_best
