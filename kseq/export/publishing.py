"""Versioned, atomic publishing of a SavedModel in TF Serving's layout:
`<export_dir>/<version>/`, written beside the target and renamed when
complete, so a server never picks up a half-written version."""

import os
import shutil

import keras

from kseq.export.saved_model_writer import write_saved_model
from kseq.export.warmup import write_warmup_requests
from kseq.extras import missing
from kseq._validation import check_positive_int


def next_version(export_dir):
    """Gives the version after the highest numeric one under `export_dir` (TF Serving layout).

    Args:
        export_dir: the folder of the versions; it may not exist yet.

    Returns:
        1 + the highest numeric folder name, or 1 if there is none.
    """
    if not os.path.isdir(export_dir):
        return 1
    versions = [int(name) for name in os.listdir(export_dir) if name.isdigit()]
    return max(versions, default=0) + 1


def latest_version(export_dir):
    """Finds the highest numeric version under `export_dir` that holds a complete SavedModel (`saved_model.pb`).

    Args:
        export_dir: the folder of the versions.

    Returns:
        Its path, the folder name as written ("0007" stays "0007"), or None if there is none.
    """
    if not os.path.isdir(export_dir):
        return None
    versions = [name for name in os.listdir(export_dir) if name.isdigit()
                and os.path.isfile(os.path.join(export_dir, name, "saved_model.pb"))]
    return os.path.join(export_dir, max(versions, key=int)) if versions else None  # "0007" stays "0007"


def write_servable(export_dir, endpoints, resources, version=None, assets=None, warmup=None):
    """Writes `export_dir/<version>/`, a SavedModel with the given signatures.

    The SavedModel is written to a temporary folder beside the target and
    renamed when complete, so a crash never leaves a half-written version.

    Args:
        export_dir: the folder of the versions (TF Serving's model folder).
        endpoints: {signature name: (function, input_signature)}.
        resources: the models and tokenizers whose variables and tables the
            functions use. A kseq tokenizer (CharacterTokenizer,
            SubwordTokenizer, KerasHubTokenizer) is a `tf.Module`: tracking it
            saves its lookup tables and tensorflow_text resources (a keras-hub
            layer's too), so the SavedModel holds the vocabulary. A bare
            keras-hub tokenizer is refused (its ids are not kseq's: wrap it
            with `kseq.data.KerasHubTokenizer`).
        version: an int >= 0 whose folder is absent or empty (a version is
            never overwritten: a non-empty one raises ValueError before
            anything is written). Default None: the next free version.
        assets: {file name: bytes} for the version's `assets/` folder. Default None.
        warmup: {signature name: {input name: values}}: TF Serving's
            warm-up requests (`kseq.export.warmup`), one a signature. Default None.

    Returns:
        The path of the new version.

    Raises:
        ValueError: `export_dir` is a file, `version` is taken or not an int >= 0,
            or a resource is a bare keras-hub tokenizer.
    """
    if os.path.exists(export_dir) and not os.path.isdir(export_dir):
        raise ValueError(f"`export_dir` {export_dir!r} exists and is not a directory.")
    if version is not None:
        version = _check_version(export_dir, version)
    for resource in resources:
        _check_exportable(resource)

    def write(folder):
        write_saved_model(folder, endpoints, resources)
        for name, content in (assets or {}).items():
            os.makedirs(os.path.join(folder, "assets"), exist_ok=True)
            with open(os.path.join(folder, "assets", name), "wb") as f:
                f.write(content)
        if warmup and not missing("serving", "no TF Serving warm-up requests written"):
            write_warmup_requests(folder, os.path.basename(os.path.normpath(export_dir)), warmup)

    return publish(export_dir, version, write)


def publish(export_dir, version, write):
    """Publishes a version: calls `write(folder)` on a new folder beside the versions, then renames it.

    A reader never sees a half-written version; the temporary folder is
    removed whatever happens.

    Args:
        export_dir: the folder of the versions, made if missing.
        version: an int >= 0 (or its digits) whose folder is absent or empty;
            None, the next free one (another export taking it meanwhile moves
            this one to the number after).
        write: `(folder) -> None`, writes the version's files into `folder`.

    Returns:
        The path `export_dir/<version>`.

    Raises:
        ValueError: `version` is taken or not an int >= 0.
        OSError: no free version was found after 100 tries.
    """
    if version is not None:
        version = _check_version(export_dir, version)
    os.makedirs(export_dir, exist_ok=True)
    temporary = os.path.join(export_dir, f".tmp-{'next' if version is None else version}-{os.getpid()}")
    shutil.rmtree(temporary, ignore_errors=True)
    try:
        write(temporary)
        return _publish(temporary, export_dir, version)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def _check_exportable(resource):
    """A keras-hub tokenizer numbers its own vocabulary (no PAD/BOS/EOS/UNK
    at 0-3): a model trained on kseq's ids would get the wrong ones. An
    unbuilt layer has no variables to save yet."""
    if type(resource).__module__.startswith("keras_hub") and hasattr(resource, "detokenize"):
        raise ValueError(
            f"Got a bare keras-hub {type(resource).__name__} as a tokenizer; wrap it with "
            "kseq.data.KerasHubTokenizer(tokenizer) (the same wrapper the model's "
            "training data went through) so that ids 0-3 are kseq's PAD, BOS, EOS, UNK."
        )
    if isinstance(resource, keras.layers.Layer) and not resource.built:
        raise ValueError(f"The {type(resource).__name__} to export is not built yet: call it once, "
                         "or train it, before exporting.")


def _check_version(export_dir, version):
    """An explicit version: an int >= 0 (or its digits) whose folder is
    absent or empty; a version is never overwritten."""
    if isinstance(version, str) and version.isdigit():
        version = int(version)
    version = check_positive_int("version", version, allow_zero=True)
    final = os.path.join(export_dir, str(version))
    if os.path.exists(final) and (not os.path.isdir(final) or os.listdir(final)):
        raise ValueError(
            f"Export version {final!r} already exists and is not empty; pick another "
            "`version` or leave `version=None` for the next free one. Versions are "
            "never overwritten."
        )
    return version


def _publish(temporary, export_dir, version):
    """Renames the finished SavedModel to `export_dir/<version>` and returns
    that path. With `version=None`, a version that another export took
    meanwhile moves this one to the next free number."""
    for _ in range(100):  # other exports racing for the same numbers
        chosen = next_version(export_dir) if version is None else version
        final = os.path.join(export_dir, str(chosen))
        try:
            if os.path.isdir(final) and not os.listdir(final):
                os.rmdir(final)  # an empty leftover folder
            os.rename(temporary, final)
            return final
        except OSError:
            if version is not None or not os.path.exists(final):
                _check_version(export_dir, chosen)  # the clear error if taken
                raise
    raise OSError(f"No free version under {export_dir!r} after 100 tries.")
