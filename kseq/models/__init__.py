"""kseq models: sequence-to-sequence, language models, classifiers, conditioned generators and image captioners."""

from kseq import _backend  # noqa: F401  (first: the TensorFlow backend checked before keras loads)

from kseq.models.conditioned_generator import ConditionedGenerator
from kseq.models.image_captioner import ImageCaptioner
from kseq.models.rnn_language_model import RNNLanguageModel
from kseq.models.rnn_seq2seq import RNNSeq2Seq
from kseq.models.sequence_classifier import SequenceClassifier
from kseq.models.transformer_seq2seq import TransformerSeq2Seq

__all__ = ["ConditionedGenerator", "ImageCaptioner", "RNNLanguageModel", "RNNSeq2Seq", "SequenceClassifier", "TransformerSeq2Seq"]
