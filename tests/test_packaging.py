"""kseq as users install it: the built wheel, in a fresh virtual environment
outside the checkout, trains and exports with `kseq-train` (this Python, the
versions of constraints.txt), and installs, trains and serves on every other
Python pyproject.toml admits (its ranges alone), and not on Python 3.10. Slow: each venv downloads or
unpacks TensorFlow; .ci/run runs these after the default suite."""

import glob
import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "tasks"))  # its folder, for:
from test_translate import write_pairs  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OTHER_PYTHONS = ("3.12", "3.13")

pytestmark = pytest.mark.slow

# A Transformer of a few thousand weights: one epoch of 60 steps' worth is enough to export.
TINY = ["--num-layers", "1", "--d-model", "32", "--num-heads", "2", "--ff-dim", "64", "--vocab-size", "300",
        "--epochs", "1", "--token-budget", "512", "--max-length", "24", "--eval-sentences", "6",
        "--beam-size", "2", "--jit-compile", "off"]

SMOKE = """
import numpy as np, tensorflow as tf, keras, kseq, sys
from kseq.data import CharacterTokenizer
tokenizer = CharacterTokenizer("abcdef")
model = kseq.models.TransformerSeq2Seq(tokenizer.vocab_size, tokenizer.vocab_size, num_layers=1, d_model=16,
                                       num_heads=2, ff_dim=32, max_length=16)
ids = np.random.default_rng(0).integers(4, tokenizer.vocab_size, (8, 6))
inputs = {"source_ids": ids, "target_ids": np.concatenate([np.ones((8, 1), int), ids[:, :-1]], 1)}
model.compile(keras.optimizers.Adam(1e-3), kseq.losses.MaskedSparseCategoricalCrossentropy())
model.fit(inputs, ids, epochs=1, verbose=0)
path = kseq.export.export_translator(model, tokenizer, tokenizer, sys.argv[1], max_length=8)
served = tf.saved_model.load(path).signatures["serving_default"](source=tf.constant(["abc", "fed"]))
print(sys.version_info[:2], kseq.__file__, served["translation"].numpy())
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """Built from a copy of what the wheel holds: setuptools' build/ folder in the
    checkout would be shared by concurrent builds."""
    folder = tmp_path_factory.mktemp("wheel")
    source = folder / "source"
    shutil.copytree(os.path.join(ROOT, "kseq"), source / "kseq", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(os.path.join(ROOT, name), source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(folder), str(source)],
                   check=True)
    (built,) = glob.glob(str(folder / "kseq-*.whl"))
    with zipfile.ZipFile(built) as archive:
        assert "kseq/py.typed" in archive.namelist() and "kseq/tasks/translate.py" in archive.namelist()
    return built


def fresh_venv(python, folder):
    subprocess.run([python, "-m", "venv", str(folder)], check=True)
    return os.path.join(folder, "bin")


def installed(bin_folder, *requirements):
    subprocess.run([os.path.join(bin_folder, "pip"), "install", "-q", *requirements], check=True)
    return bin_folder


def outside_env():
    """The environment without this checkout on any path: the venv's kseq or none."""
    return {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}


def interpreter(version):
    """This machine's python`version`: pyenv's folders first (its shims fail for versions not selected)."""
    found = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")))
    for candidate in found + [f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"]:
        if os.path.exists(candidate):
            return candidate
    pytest.skip(f"no python{version} on this machine")


def test_the_wheel_trains_and_exports_outside_the_checkout(wheel, tmp_path):
    bin_folder = installed(fresh_venv(sys.executable, tmp_path / "venv"),
                           "-c", os.path.join(ROOT, "constraints.txt"), f"{wheel}[all]")
    work = tmp_path / "work"
    work.mkdir()
    train, valid = write_pairs(work / "train.tsv", 300, 0), write_pairs(work / "valid.tsv", 12, 1)
    run = subprocess.run([os.path.join(bin_folder, "kseq-train"), "translate", "--train-tsv", train,
                          "--valid-tsv", valid, *TINY], cwd=work, env=outside_env(), capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "evaluation and checkpoints" in run.stdout
    metrics = json.loads((work / "runs" / "translate" / "metrics.json").read_text())
    assert "test_bleu" in metrics and metrics["steps"] > 0
    assert glob.glob(str(work / "savedmodels" / "translate" / "*" / "saved_model.pb"))
    assert (work / "runs" / "translate" / "config.yaml").exists()
    where = subprocess.run([os.path.join(bin_folder, "python"), "-c", "import kseq; print(kseq.__file__)"],
                           cwd=work, env=outside_env(), capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(tmp_path / "venv")), where


@pytest.mark.parametrize("version", OTHER_PYTHONS)
def test_the_wheel_installs_trains_and_serves_on_another_python(wheel, tmp_path, version):
    bin_folder = installed(fresh_venv(interpreter(version), tmp_path / "venv"), wheel)
    run = subprocess.run([os.path.join(bin_folder, "python"), "-c", SMOKE, str(tmp_path / "export")],
                         cwd=tmp_path, env=outside_env(), capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"({version.replace('.', ', ')})" in run.stdout and str(tmp_path / "venv") in run.stdout
    assert glob.glob(str(tmp_path / "export" / "*" / "saved_model.pb"))


def test_python_3_10_is_refused(wheel, tmp_path):
    """keras 3.15 and keras-hub 0.32 need Python 3.11, and the wheel says so (pip
    23 on 3.10 reads it only from an index, so it fails on those two instead)."""
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
        assert "Requires-Python: <3.14,>=3.11" in archive.read(metadata).decode()
    pip = os.path.join(fresh_venv(interpreter("3.10"), tmp_path / "venv"), "pip")
    refused = subprocess.run([pip, "install", wheel], capture_output=True, text=True)
    assert refused.returncode != 0 and "Requires-Python >=3.11" in refused.stderr, refused.stderr[-2000:]
