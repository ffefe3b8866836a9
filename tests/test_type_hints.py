"""The public API carries type hints (kseq ships py.typed): every argument of
the contract's constructors, searches, exports and fit driver that is a
number, a flag or a string is annotated, and the exports say they return
the version's path."""

import inspect

import pytest

import kseq
from kseq.data import CharacterTokenizer, text_pair_dataset
from kseq.decoding import BeamSearch, GreedySearch, Sampler
from kseq.training.loop import Fit

PUBLIC = [
    kseq.models.RNNSeq2Seq, kseq.models.TransformerSeq2Seq, kseq.models.RNNLanguageModel,
    kseq.models.SequenceClassifier, kseq.models.ConditionedGenerator, kseq.models.ImageCaptioner,
    kseq.models.RNNSeq2Seq.generate, kseq.layers.LuongAttention, kseq.layers.BahdanauAttention,
    kseq.layers.SinusoidalPositionEncoding, kseq.layers.TokenAndPositionEmbedding, kseq.layers.RNNEncoder,
    kseq.layers.TransformerEncoderBlock, kseq.layers.TransformerDecoderBlock, BeamSearch, GreedySearch, Sampler,
    kseq.losses.MaskedSparseCategoricalCrossentropy, kseq.metrics.MaskedAccuracy, kseq.schedules.TransformerSchedule,
    CharacterTokenizer, text_pair_dataset, Fit, Fit.fit,
]
EXPORTS = [kseq.export.export_translator, kseq.export.export_language_model, kseq.export.export_classifier,
           kseq.export.export_conditioned_generator]


@pytest.mark.parametrize("function", PUBLIC + EXPORTS, ids=lambda f: f.__qualname__)
def test_every_plain_argument_is_annotated(function):
    parameters = inspect.signature(function).parameters.values()
    plain = [p for p in parameters if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name != "self"
             and isinstance(p.default, (int, float, str, bool, type(None)))
             and p.name not in ("model", "tokenizer", "source_tokenizer", "target_tokenizer", "search", "dtype",
                                "limits", "position", "schedule", "warmup_image", "initializer",
                                "embeddings_initializer", "layer_norm_epsilon_initializer")]
    missing = [p.name for p in plain if p.annotation is inspect.Parameter.empty]
    assert not missing, f"{function.__qualname__}: {missing}"


@pytest.mark.parametrize("function", EXPORTS, ids=lambda f: f.__name__)
def test_exports_return_the_version_path(function):
    assert inspect.signature(function).return_annotation is str
