"""The examples in kseq's docstrings run and print what they say."""

import doctest
import importlib
import pkgutil

import keras
import numpy as np
import pytest

import kseq

def modules_with_examples():
    """The kseq modules whose docstrings hold doctest examples."""
    finder = doctest.DocTestFinder()
    found = []
    for _, name, _ in pkgutil.walk_packages(kseq.__path__, "kseq."):
        module = importlib.import_module(name)
        if any(test.examples for test in finder.find(module, module=module)):
            found.append(name)
    return sorted(found)


MODULES = modules_with_examples()


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(
        module,
        extraglobs={"keras": keras, "kseq": kseq, "np": np},
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
        verbose=False,
    )
    assert result.attempted > 0, f"{name} was listed for examples but none ran"
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"


def test_examples_exist_for_every_public_class():
    public = [getattr(kseq.layers, n) for n in kseq.layers.__all__] + [
        kseq.models.RNNSeq2Seq, kseq.models.TransformerSeq2Seq, kseq.models.RNNLanguageModel,
        kseq.models.SequenceClassifier,
        kseq.losses.MaskedSparseCategoricalCrossentropy, kseq.metrics.MaskedAccuracy,
        kseq.metrics.Perplexity, kseq.schedules.TransformerSchedule, kseq.optimizers.FusedAdam,
        kseq.data.CharacterTokenizer,
        kseq.data.KerasHubTokenizer, kseq.data.SubwordTokenizer,
    ]
    missing = [cls.__name__ for cls in public if ">>>" not in (cls.__doc__ or "")]
    assert missing == []
