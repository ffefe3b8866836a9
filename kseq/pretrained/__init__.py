"""Pretrained translators from other libraries: Marian checkpoints (OPUS-MT's
`Helsinki-NLP/opus-mt-SRC-TGT`) in the Hugging Face layout, loaded into
kseq's `TransformerSeq2Seq` with their tokenizers (`load_marian`,
`marian_tokenizers`; `TransformerSeq2Seq.from_pretrained` is the model alone).

docs/DESIGN.md ("A Marian checkpoint in kseq") shows how each part maps.
"""

from kseq import _backend  # noqa: F401  (first: the TensorFlow backend checked before keras loads)

from kseq.pretrained.folder import checkpoint_folder
from kseq.pretrained.marian import MarianCheckpoint, load_marian, marian_config, marian_tokenizers
from kseq.pretrained.marian_config import MarianConfig, read_marian_config

__all__ = ["MarianCheckpoint", "MarianConfig", "checkpoint_folder", "load_marian", "marian_config",
           "marian_tokenizers", "read_marian_config"]
