"""Data: tokenizers, tf.data pipelines and generated tasks."""

from kseq.data.character_tokenizer import CharacterTokenizer
from kseq.data.pipeline import text_pair_dataset
from kseq.data.synthetic import exact_match, pad_sequences, reversal_task, teacher_forcing

__all__ = [
    "CharacterTokenizer",
    "exact_match",
    "pad_sequences",
    "reversal_task",
    "teacher_forcing",
    "text_pair_dataset",
]
