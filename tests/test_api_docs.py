"""The API reference builds from the docstrings (pdoc, the `docs` extra) and
documents the public names users call. Slow (pdoc imports and renders every
module): .ci/run runs it after the default suite."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.slow


def test_pdoc_builds_the_reference_of_every_public_subpackage(tmp_path):
    built = subprocess.run([sys.executable, "-m", "pdoc", "-o", str(tmp_path), "kseq"], cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    pages = {name: (tmp_path / "kseq" / f"{name}.html") for name in
             ("layers", "models", "decoding", "data", "training", "export")}
    assert all(page.exists() for page in pages.values()), sorted(os.listdir(tmp_path / "kseq"))
    models, layers = pages["models"].read_text(), pages["layers"].read_text()
    for name in ("TransformerSeq2Seq", "RNNSeq2Seq", "RNNLanguageModel", "SequenceClassifier"):
        assert f'id="{name}"' in models, name
    for name in ("LuongAttention", "BahdanauAttention", "SinusoidalPositionEncoding"):
        assert f'id="{name}"' in layers, name
    assert 'id="export_translator"' in pages["export"].read_text()
