"""Where a pretrained checkpoint's files come from: a local folder always, a
Hugging Face Hub name through `huggingface_hub` (the `hub` extra)."""

import importlib.util
import os
import re

from kseq.errors import UsageError

# What a Marian checkpoint's folder holds that kseq reads; the weights are
# fetched apart, model.safetensors in preference to pytorch_model.bin.
MARIAN_FILES = ("config.json", "generation_config.json", "source.spm", "target.spm", "vocab.json",
                "target_vocab.json", "tokenizer_config.json")
HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
GET_A_FOLDER = ("give a local folder instead: on a machine with a network, "
                "`hf download NAME --local-dir FOLDER` (huggingface_hub's command), then copy FOLDER here")


def checkpoint_folder(name_or_path):
    """The local folder of a checkpoint: `name_or_path` itself, or a Hub name downloaded.

    Args:
        name_or_path: a folder, or a Hub name such as "Helsinki-NLP/opus-mt-en-de".

    Returns:
        The folder's path.

    Raises:
        UsageError: no such folder; a Hub name without `huggingface_hub` or
            without a network (saying how to give a folder instead).
    """
    path = os.path.expanduser(str(name_or_path))
    if os.path.isdir(path):
        return path
    if os.path.exists(path):
        raise UsageError(f"{path} is a file; expected a checkpoint folder (config.json, weights, tokenizer files)")
    if not HUB_NAME.match(path) or path.startswith((".", "/")):
        raise UsageError(f"{path}: no such folder; expected a checkpoint folder or a Hub name (ORG/NAME)")
    return _downloaded(path)


def _downloaded(name):
    if importlib.util.find_spec("huggingface_hub") is None:
        raise UsageError(f"{name} is no local folder, and a Hub name needs huggingface_hub "
                         f"(pip install 'kseq[hub]'); or {GET_A_FOLDER}")
    import huggingface_hub

    try:
        files = set(huggingface_hub.list_repo_files(name))
        weights = "model.safetensors" if "model.safetensors" in files else "pytorch_model.bin"
        wanted = [file for file in (*MARIAN_FILES, weights) if file in files]
        folder = None
        for file in wanted:
            folder = os.path.dirname(huggingface_hub.hf_hub_download(name, file))
    except Exception as error:  # no network, offline mode, no such repository: all one answer
        folder = _cached(huggingface_hub, name)
        if folder is None:
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise UsageError(f"{name} is no local folder and could not be downloaded ({reason}); {GET_A_FOLDER}") \
                from None
    if folder is None:
        raise UsageError(f"{name} on the Hub holds none of a Marian checkpoint's files; {GET_A_FOLDER}")
    return folder


def _cached(huggingface_hub, name):
    """The folder of `name` in huggingface_hub's cache, downloaded before, or None."""
    try:
        folder = huggingface_hub.snapshot_download(name, local_files_only=True)
    except Exception:  # not in the cache (huggingface_hub says so with its own errors)
        return None
    return folder if os.path.isfile(os.path.join(folder, "config.json")) else None
