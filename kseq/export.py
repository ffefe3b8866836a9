"""SavedModel export: strings in, strings out, search in the graph.

The exported signature needs only TensorFlow at serving time (no kseq, no
keras, no Python functions), so TF Serving can load it.
"""

import os
import shutil

import keras
import tensorflow as tf

from kseq.decoding import GreedySearch, trim_padding
from kseq.special_ids import PAD_ID

SOURCE_SPEC = tf.TensorSpec([None], tf.string, name="source")


def translate_function(model, source_tokenizer, target_tokenizer, max_length=64,
                       max_source_length=256, search=None):
    """strings (B,) -> {"translation": strings (B,), "token_ids": (B, T')}.

    Tokenizer, search and detokenizer, all in TensorFlow ops: the function
    the exported signature serves, usable in-process too. `search` is a
    kseq.decoding search (default: greedy up to `max_length` tokens); beam
    search serves its best hypothesis.
    """
    search = search or GreedySearch(max_length)

    def translate(source):
        ids = source_tokenizer.tokenize(source)[:, :max_source_length]
        ids = ids.to_tensor(default_value=PAD_ID)
        # Keep at least one column so an all-empty batch still has a shape.
        ids = tf.pad(ids, [[0, 0], [0, tf.maximum(0, 1 - tf.shape(ids)[1])]])
        generated, _ = model.search(tf.cast(ids, tf.int32), search)
        if generated.shape.rank == 3:  # beam search: (B, N, L)
            generated = generated[:, 0]
        generated = trim_padding(generated)
        return {"translation": target_tokenizer.detokenize(generated), "token_ids": generated}

    return translate


def next_version(export_dir):
    """1 + the highest numeric version under `export_dir` (TF Serving layout)."""
    if not os.path.isdir(export_dir):
        return 1
    versions = [int(name) for name in os.listdir(export_dir) if name.isdigit()]
    return max(versions, default=0) + 1


def export_translator(
    model, source_tokenizer, target_tokenizer, export_dir, version=None, max_length=64,
    max_source_length=256, search=None, assets=None,
):
    """Writes `export_dir/<version>/`, a SavedModel with `serving_default`:
    {"source": tf.string (None,)} -> {"translation": tf.string (None,),
    "token_ids": int32 (None, None)}, decoding with `search` (see
    `translate_function`). `assets` ({file name: bytes}, e.g. the
    vocabulary) are written to the version's `assets/` folder.

    The model is written to a temporary folder beside the target and renamed
    when complete, so a crash never leaves a half-written version behind.

    Returns:
        The path of the new version.
    """
    if os.path.exists(export_dir) and not os.path.isdir(export_dir):
        raise ValueError(f"`export_dir` {export_dir!r} exists and is not a directory.")
    version = next_version(export_dir) if version is None else int(version)
    final = os.path.join(export_dir, str(version))
    if os.path.exists(final) and os.listdir(final):
        raise ValueError(
            f"Export version {final!r} already exists and is not empty; pick another "
            "version or leave `version=None` for the next free one."
        )
    model._ensure_built()
    # ExportArchive saves the variables and lookup tables the function uses,
    # not the Keras objects, so nothing but TensorFlow is needed to serve.
    archive = keras.export.ExportArchive()
    for resource in (model, source_tokenizer, target_tokenizer):
        archive.track(resource)
    archive.add_endpoint(
        "serving_default",
        translate_function(
            model, source_tokenizer, target_tokenizer, max_length, max_source_length, search
        ),
        input_signature=[SOURCE_SPEC],
    )
    os.makedirs(export_dir, exist_ok=True)
    temporary = os.path.join(export_dir, f".tmp-{version}-{os.getpid()}")
    shutil.rmtree(temporary, ignore_errors=True)
    try:
        archive.write_out(temporary, verbose=False)
        for name, content in (assets or {}).items():
            os.makedirs(os.path.join(temporary, "assets"), exist_ok=True)
            with open(os.path.join(temporary, "assets", name), "wb") as f:
                f.write(content)
        if os.path.isdir(final):  # an empty leftover folder
            os.rmdir(final)
        os.rename(temporary, final)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return final
