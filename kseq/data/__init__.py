"""Data: tokenizers, tf.data pipelines and generated tasks."""

from kseq import _backend  # noqa: F401  (first: the TensorFlow backend checked before keras loads)

from kseq.data.bible import load_bible_pairs
from kseq.data.bucketing import bucketed_pair_dataset, padding_fraction
from kseq.data.character_tokenizer import CharacterTokenizer
from kseq.data.corpus import HoldOut, corpus_files, scan_corpus
from kseq.data.keras_hub_tokenizer import KerasHubTokenizer
from kseq.data.marian_tokenizer import MarianTokenizer
from kseq.data.text_pairs import text_pair_dataset
from kseq.data.rotten_tomatoes import load_rotten_tomatoes
from kseq.data.software_messages import load_message_pairs
from kseq.data.subword_tokenizer import SubwordTokenizer
from kseq.data.streaming import streamed_pair_dataset
from kseq.data.streams import join_documents, stream_batches
from kseq.data.text import normalize_text
from kseq.data.tokenizers import from_keras_hub, load_tokenizer
from kseq.data.tsv import format_problems, read_tsv
from kseq.data.synthetic import pad_sequences, reversal_task, teacher_forcing

__all__ = [
    "CharacterTokenizer",
    "HoldOut",
    "KerasHubTokenizer",
    "MarianTokenizer",
    "SubwordTokenizer",
    "bucketed_pair_dataset",
    "corpus_files",
    "format_problems",
    "from_keras_hub",
    "join_documents",
    "load_bible_pairs",
    "load_message_pairs",
    "load_rotten_tomatoes",
    "load_tokenizer",
    "normalize_text",
    "padding_fraction",
    "read_tsv",
    "scan_corpus",
    "stream_batches",
    "streamed_pair_dataset",
    "pad_sequences",
    "reversal_task",
    "teacher_forcing",
    "text_pair_dataset",
]
