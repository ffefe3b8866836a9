"""The language model's servable: prompt strings in, continuations out."""

import tensorflow as tf

from kseq.decoding.output import decoded_text
from kseq.export.publishing import write_servable
from kseq.export.requests import blank_out, id_matrix, length_within, normalized

PROMPT_SPEC = tf.TensorSpec([None], tf.string, name="prompt")


def continue_function(model, tokenizer, search, max_prompt_length=256):
    """Makes the function that continues prompts: a language model's `search`, in TensorFlow ops.

    Prompts are read as training read text; the search starts from the last
    `max_prompt_length` tokens of each. A blank prompt gets "".

    Args:
        model: a built kseq language model.
        tokenizer: the kseq tokenizer it was trained with.
        search: a kseq.decoding search.
        max_prompt_length: tokens kept from the end of each prompt, never more
            than the model's own limit. Default 256.

    Returns:
        A function `(prompt (B,) tf.string) -> {"continuation": (B,) strings,
        "token_ids": (B, T) int32}`.

    Raises:
        ValueError: `max_prompt_length` is not an int >= 1.
    """
    max_prompt_length = length_within(model.length_limit, max_prompt_length, "max_prompt_length")

    def continue_text(prompt):
        prompt, blank = normalized(prompt)
        ids = tokenizer.tokenize(prompt)
        generated, _ = model.search(id_matrix(ids[:, -max_prompt_length:]), search)
        text, ids = decoded_text(tokenizer, generated)
        return blank_out(blank, {"continuation": text, "token_ids": ids})

    return continue_text


def export_language_model(
    model, tokenizer, export_dir: str, search, version: int | None = None, max_prompt_length: int = 256,
    assets: dict[str, bytes] | None = None
) -> str:
    """Writes `export_dir/<version>/`, a SavedModel that continues prompts.

    Its `serving_default` maps {"prompt": tf.string (None,)} to
    {"continuation": tf.string (None,), "token_ids": int32 (None, None)}
    (see `continue_function`); a seeded `kseq.decoding.Sampler` gives the
    same continuation for the same prompt. Written atomically (see
    `write_servable`).

    Args:
        model: a built kseq language model.
        tokenizer: the kseq tokenizer it was trained with.
        export_dir: the folder of the versions (TF Serving's model folder).
        search: the kseq.decoding search.
        version: an int >= 0 whose folder is absent or empty. Default None: the next free version.
        max_prompt_length: tokens kept from the end of each prompt. Default 256.
        assets: {file name: bytes} for the version's `assets/` folder. Default None.

    Returns:
        The path of the new version.

    Raises:
        ValueError: a bad `max_prompt_length`, `export_dir` or `version`.
    """
    model._ensure_built()
    function = continue_function(model, tokenizer, search, max_prompt_length)
    return write_servable(
        export_dir, {"serving_default": (function, [PROMPT_SPEC])}, (model, tokenizer),
        version, assets, warmup={"serving_default": {"prompt": ["warm-up"]}},
    )
