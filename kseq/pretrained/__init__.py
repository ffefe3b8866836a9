"""Pretrained translators from other libraries: Marian checkpoints (OPUS-MT's
`Helsinki-NLP/opus-mt-SRC-TGT`) in the Hugging Face layout, loaded into
kseq's `TransformerSeq2Seq` with their tokenizers (`load_marian`,
`marian_tokenizers`; `TransformerSeq2Seq.from_pretrained` is the model alone).
`check_marian_folder` checks a folder's files without TensorFlow, as the
commands check `--pretrained` with their other options.

Names load when first asked for: the checks need no TensorFlow.
docs/DESIGN.md ("A Marian checkpoint in kseq") shows how each part maps.
"""

import importlib

_MODULES = {
    "MarianCheckpoint": "marian", "load_marian": "marian", "checkpoint_config": "marian",
    "marian_tokenizers": "marian", "MarianConfig": "marian_config", "read_marian_config": "marian_config",
    "checkpoint_folder": "folder", "check_marian_folder": "checks",
}

__all__ = sorted(_MODULES)


def __getattr__(name):
    if name not in _MODULES:
        raise AttributeError(f"module 'kseq.pretrained' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"kseq.pretrained.{_MODULES[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
