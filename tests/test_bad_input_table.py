"""Bad input, everywhere a user meets it: one table of inputs tried and what
each gets.

Each row is (where, input, action, expected): `where` is the surface (the
Python API, kseq.export, a task's command line, the served signature);
`expected` is either an error (exception type and a regex on its message,
which names the argument and what was expected), a task's exit (code and
a regex on stderr) or a behaviour (a check on the result). The served
signatures are exported once and called in ONE TensorFlow-only process
(tensorflow and tensorflow_text's ops, no keras, no kseq), as TF Serving
runs them; every bad request must come back well-formed and the process
must keep answering.
"""

import base64
import fcntl
import json
import os
import random
import re
import string
import subprocess
import sys
from typing import Callable, NamedTuple

import keras
import numpy as np
import pytest
import tensorflow as tf

from kseq.tasks import classify  # noqa: E402
from kseq.tasks import language_model  # noqa: E402
from kseq.tasks import translate  # noqa: E402

import kseq.export  # noqa: E402
from kseq import EOS_ID  # noqa: E402
from kseq.data import CharacterTokenizer, normalize_text  # noqa: E402
from kseq.data.subword_tokenizer import SubwordTokenizer  # noqa: E402
from kseq.decoding import BeamSearch, GreedySearch  # noqa: E402
from kseq.errors import UsageError  # noqa: E402
from kseq.export import export_classifier, export_language_model, export_translator  # noqa: E402
from kseq.models import RNNLanguageModel, RNNSeq2Seq, SequenceClassifier, TransformerSeq2Seq  # noqa: E402
from support import subprocess_env  # noqa: E402


class Raises(NamedTuple):
    """The action raises `type` with a message matching `pattern`."""
    type: type
    pattern: str


class Exits(NamedTuple):
    """A task stops with SystemExit `code` and `pattern` on stderr (argparse's
    `parser.error`), or in the exit message when `code` is None."""
    code: object
    pattern: str


class Gives(NamedTuple):
    """The action returns a result that `check` accepts (asserts on)."""
    behaviour: str
    check: Callable


# ---------------------------------------------------------------------------
# Python API

VOCAB = 30
S = np.array([[5, 6, 7, 8], [9, 10, 0, 0]], "int32")  # (B=2, S=4)
T = np.array([[1, 11, 12], [1, 13, 0]], "int32")  # (B=2, T=3)


def shape_is(*shape):
    def check(result):
        assert tuple(result.shape) == shape, result.shape
    return check


def eos_only(result):
    assert np.asarray(result).tolist() == [[EOS_ID]]


def model_class(cls):
    def check(result):
        assert type(result) is cls
    return check


def pair(source=S, target=T):
    return {"source_ids": source, "target_ids": target}


IDS = r"must hold integer token ids \(int32 or int64\); got dtype"
API_ROWS = [
    # wrong dtype
    ("RNNSeq2Seq call", "float32 source_ids", lambda m: m.rnn(pair(S.astype("float32"))), Raises(ValueError, rf"`source_ids` {IDS} float32")),
    ("TransformerSeq2Seq call", "float64 target_ids", lambda m: m.transformer(pair(target=T.astype("float64"))), Raises(ValueError, rf"`target_ids` {IDS} float")),
    ("RNNSeq2Seq call", "string tensor source_ids", lambda m: m.rnn(pair(tf.constant([["a"], ["b"]]))), Raises(ValueError, rf"`source_ids` {IDS} string")),
    ("RNNSeq2Seq call", "bool source_ids", lambda m: m.rnn(pair(S > 0)), Raises(ValueError, rf"`source_ids` {IDS} bool")),
    ("RNNLanguageModel call", "float32 token_ids", lambda m: m.lm(S.astype("float32")), Raises(ValueError, rf"`token_ids` {IDS} float32")),
    ("generate", "a Python string", lambda m: m.rnn.generate("hello", max_length=4), Raises(ValueError, r"`source_ids` must be an integer array or tensor of shape \(batch, length\); got str")),
    ("generate", "None", lambda m: m.transformer.generate(None, max_length=4), Raises(ValueError, r"`source_ids` must be an integer array or tensor .*got NoneType")),
    # wrong rank or shape
    ("RNNSeq2Seq call", "rank-1 source_ids", lambda m: m.rnn(pair(S[0])), Raises(ValueError, r"`source_ids` must have rank 2, shape \(batch, length\); got shape \(4,\)")),
    ("TransformerSeq2Seq call", "rank-3 target_ids", lambda m: m.transformer(pair(target=T[..., None])), Raises(ValueError, r"`target_ids` must have rank 2.*got shape \(2, 3, 1\)")),
    ("SequenceClassifier call", "rank-1 token_ids", lambda m: m.classifier(S[0]), Raises(ValueError, r"`token_ids` must have rank 2")),
    ("RNNLanguageModel call", "rank-3 token_ids", lambda m: m.lm(S[..., None]), Raises(ValueError, r"`token_ids` must have rank 2")),
    ("RNNSeq2Seq call", "tf.RaggedTensor source_ids", lambda m: m.rnn(pair(tf.ragged.constant([[5, 6], [7]]))), Raises(ValueError, r"`source_ids` must be a dense \(batch, length\) tensor; got a RaggedTensor.*to_tensor")),
    ("TransformerSeq2Seq call", "ragged nested list", lambda m: m.transformer(pair([[5, 6], [7]])), Raises(ValueError, r"`source_ids` must be a rectangular \(batch, length\) array; pad")),
    ("RNNSeq2Seq call", "batch 2 sources, batch 1 targets", lambda m: m.rnn(pair(target=T[:1])), Raises(ValueError, r"`source_ids` and `target_ids` must have the same batch size; got 2 and 1")),
    ("RNNSeq2Seq call", "ids array instead of the dict", lambda m: m.rnn(S), Raises(ValueError, r"dict with keys 'source_ids' \(B, S\) and 'target_ids' \(B, T\); got \w+")),
    ("TransformerSeq2Seq call", "dict without target_ids", lambda m: m.transformer({"source_ids": S}), Raises(ValueError, r"dict with keys .*got \['source_ids'\]")),
    ("TransformerSeq2Seq call", "source longer than max_length 10", lambda m: m.transformer(pair(np.full((2, 11), 5, "int32"))), Raises(ValueError, r"`source_ids` has length 11, over the model's max_length 10")),
    ("generate", "source length 0", lambda m: m.rnn.generate(S[:, :0], max_length=4), Raises(ValueError, r"`source_ids` is empty: its length axis has size 0")),
    ("SequenceClassifier call", "token_ids length 0", lambda m: m.classifier(S[:, :0]), Raises(ValueError, r"`token_ids` is empty")),
    # out-of-range ids
    ("RNNSeq2Seq call", "source id == vocab size", lambda m: m.rnn(pair(S + VOCAB)), Raises(ValueError, r"`source_ids` must hold ids in \[0, 30\); got ids from")),
    ("TransformerSeq2Seq call", "negative target id", lambda m: m.transformer(pair(target=-T)), Raises(ValueError, r"`target_ids` must hold ids in \[0, 30\); got ids from -13")),
    ("RNNSeq2Seq call", "int64 id 2**32 + 5 (wraps to 5 in int32)", lambda m: m.rnn(pair(S.astype("int64") + 2**32)), Raises(ValueError, r"`source_ids` must hold ids in \[0, 30\); got ids from 4294967296")),
    ("RNNSeq2Seq in a tf.function", "target id 40", lambda m: tf.function(m.rnn)(pair(tf.constant(S), tf.constant(T) + 40)), Raises(tf.errors.InvalidArgumentError, r"`target_ids` must hold ids in \[0, 30\)")),
    ("generate", "source id 100", lambda m: m.transformer.generate(S + 100, max_length=4), Raises(ValueError, r"`source_ids` must hold ids in \[0, 30\)")),
    ("RNNLanguageModel call", "token id 35", lambda m: m.lm(S + VOCAB), Raises(ValueError, r"`token_ids` must hold ids in \[0, 30\); got ids from 30")),
    ("RNNLanguageModel generate", "prompt id -1", lambda m: m.lm.generate(S - 10, max_length=3), Raises(ValueError, r"`prompt_ids` must hold ids in \[0, 30\)")),
    ("SequenceClassifier call", "token id 30", lambda m: m.classifier(S + VOCAB), Raises(ValueError, r"`token_ids` must hold ids in \[0, 30\)")),
    # empty batch (0 rows): an empty result of the right shape
    ("RNNSeq2Seq call", "batch of 0", lambda m: m.rnn(pair(S[:0], T[:0])), Gives("logits (0, T, V)", shape_is(0, 3, VOCAB))),
    ("TransformerSeq2Seq call", "batch of 0", lambda m: m.transformer(pair(S[:0], T[:0])), Gives("logits (0, T, V)", shape_is(0, 3, VOCAB))),
    ("RNNSeq2Seq attention_weights", "batch of 0", lambda m: m.rnn.attention_weights(pair(S[:0], T[:0])), Gives("weights (0, T, S)", shape_is(0, 3, 4))),
    ("RNNLanguageModel call", "batch of 0", lambda m: m.lm(S[:0]), Gives("logits (0, T, V)", shape_is(0, 4, VOCAB))),
    ("SequenceClassifier call", "batch of 0", lambda m: m.classifier(S[:0]), Gives("logits (0, C)", shape_is(0, 3))),
    ("SequenceClassifier pooling_weights", "batch of 0", lambda m: m.classifier.pooling_weights(S[:0]), Gives("weights (0, S)", shape_is(0, 4))),
    ("generate (RNN)", "batch of 0", lambda m: m.rnn.generate(S[:0], max_length=4), Gives("ids (0, 0)", shape_is(0, 0))),
    ("generate (Transformer, beam)", "batch of 0", lambda m: m.transformer.generate(S[:0], max_length=4, method="beam", beam_size=2), Gives("ids (0, 0)", shape_is(0, 0))),
    ("RNNLanguageModel generate", "batch of 0", lambda m: m.lm.generate(S[:0], max_length=3), Gives("ids (0, 0)", shape_is(0, 0))),
    ("generate (Transformer)", "an all-PAD source (empty sentence)", lambda m: m.transformer.generate(np.zeros((1, 3), "int32"), max_length=4), Gives("[[EOS]]: nothing to translate", eos_only)),
    ("generate (RNN, beam)", "an all-PAD source (empty sentence)", lambda m: m.rnn.generate(np.zeros((1, 3), "int32"), max_length=4, method="beam", beam_size=2), Gives("[[EOS]]: nothing to translate", eos_only)),
    # generation options
    ("generate", "max_length=0", lambda m: m.rnn.generate(S, max_length=0), Raises(ValueError, r"`max_length` must be >= 1; got 0")),
    ("generate", "max_length 11 > the Transformer's 10", lambda m: m.transformer.generate(S, max_length=11), Raises(ValueError, r"`max_length`=11 is over the model's max_length 10")),
    ("generate", "method='viterbi'", lambda m: m.rnn.generate(S, max_length=4, method="viterbi"), Raises(ValueError, r"`method` must be one of \['greedy', 'beam', 'sample'\]")),
    ("generate", "top_k 31 > vocabulary 30", lambda m: m.rnn.generate(S, max_length=4, method="sample", top_k=31), Raises(ValueError, r"`top_k` \(31\) must be <= target_vocab_size \(30\)")),
    # configuration conflicts
    ("TransformerSeq2Seq()", "d_model=30, num_heads=4", lambda m: TransformerSeq2Seq(VOCAB, VOCAB, d_model=30, num_heads=4), Raises(ValueError, r"`d_model` \(30\) must be divisible by `num_heads` \(4\)")),
    ("TransformerSeq2Seq()", "share_embeddings=True, vocabularies 30 and 40", lambda m: TransformerSeq2Seq(30, 40, share_embeddings=True), Raises(ValueError, r"`share_embeddings=True` needs one vocabulary")),
    ("RNNSeq2Seq()", "cell='transformer'", lambda m: RNNSeq2Seq(VOCAB, VOCAB, cell="transformer"), Raises(ValueError, r"`cell` must be one of \['rnn', 'lstm', 'gru'\]")),
    ("RNNSeq2Seq()", "attention='luong'", lambda m: RNNSeq2Seq(VOCAB, VOCAB, attention="luong"), Raises(ValueError, r"`attention` must be one of")),
    ("RNNSeq2Seq()", "dropout=1.0", lambda m: RNNSeq2Seq(VOCAB, VOCAB, dropout=1.0), Raises(ValueError, r"`dropout` must be a float in \[0, 1\); got 1.0")),
    ("RNNSeq2Seq()", "source_vocab_size=3", lambda m: RNNSeq2Seq(3, VOCAB), Raises(ValueError, r"`source_vocab_size` must be > 4: ids 0-3 are PAD, BOS, EOS and UNK")),
    ("RNNSeq2Seq()", "target_vocab_size='30'", lambda m: RNNSeq2Seq(VOCAB, "30"), Raises(ValueError, r"`target_vocab_size` must be an integer; got '30'")),
    ("RNNLanguageModel()", "tie_weights=True, embed_dim 8 != units 16", lambda m: RNNLanguageModel(VOCAB, embed_dim=8, units=16, tie_weights=True), Raises(ValueError, r"`tie_weights=True` needs `embed_dim` == `units`.*embed_dim=8 and units=16")),
    ("SequenceClassifier()", "encoder='transformer', pooling='last'", lambda m: SequenceClassifier(VOCAB, 2, encoder="transformer", pooling="last"), Raises(ValueError, r"`pooling='last'` takes an RNN's final state")),
    ("SequenceClassifier()", "num_classes=1", lambda m: SequenceClassifier(VOCAB, 1), Raises(ValueError, r"`num_classes` must be >= 2; got 1")),
    ("TransformerSeq2Seq.from_config", "an RNNSeq2Seq's config", lambda m: TransformerSeq2Seq.from_config(m.rnn.get_config()), Raises(ValueError, r"Unrecognized keyword arguments passed to TransformerSeq2Seq: \{'embed_dim'")),
    # a .keras file from another class
    ("TransformerSeq2Seq.load_weights", "an RNNSeq2Seq's .keras file", lambda m: m.transformer.load_weights(m.files["rnn"]), Raises(ValueError, r"`filepath` '.*rnn.keras' holds a model of class RNNSeq2Seq, not TransformerSeq2Seq: load the whole model with keras.saving.load_model")),
    ("RNNSeq2Seq.load_weights", "an RNNLanguageModel's .keras file", lambda m: m.rnn.load_weights(m.files["lm"]), Raises(ValueError, r"holds a model of class RNNLanguageModel, not RNNSeq2Seq")),
    ("RNNSeq2Seq(units=16).load_weights", "the .keras file of an RNNSeq2Seq with units=8", lambda m: m.rnn16.load_weights(m.files["rnn"]), Raises(ValueError, r"holds a RNNSeq2Seq built with units=8 \(this model: 16\)")),
    ("keras.saving.load_model", "an RNNSeq2Seq's .keras file", lambda m: keras.saving.load_model(m.files["rnn"]), Gives("an RNNSeq2Seq, whatever the caller expected", model_class(RNNSeq2Seq))),
    ("keras.saving.load_model", "a .weights.h5 file", lambda m: keras.saving.load_model(m.files["weights"]), Raises(ValueError, r"No model config found in the file")),
    ("keras.saving.load_model", "a .keras file that is not a zip", lambda m: keras.saving.load_model(m.files["junk"]), Raises(ValueError, r"Please ensure the file is an accessible `.keras` zip file")),
]


class Models:
    """The models and files the API rows use, built once per module."""


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("api")
    keras.utils.set_random_seed(0)
    m = Models()
    m.rnn = RNNSeq2Seq(VOCAB, VOCAB, embed_dim=8, units=8, attention="dot")
    m.rnn16 = RNNSeq2Seq(VOCAB, VOCAB, embed_dim=8, units=16, attention="dot")
    m.transformer = TransformerSeq2Seq(VOCAB, VOCAB, num_layers=1, d_model=8, num_heads=2, ff_dim=8, max_length=10)
    m.lm = RNNLanguageModel(VOCAB, embed_dim=8, units=8)
    m.classifier = SequenceClassifier(VOCAB, 3, embed_dim=8, units=8, pooling="attention")
    for model in (m.rnn, m.rnn16, m.transformer):
        model(pair())
    m.lm(S)
    m.classifier(S)
    m.files = {"rnn": str(root / "rnn.keras"), "lm": str(root / "lm.keras"),
               "weights": str(root / "rnn.weights.h5"), "junk": str(root / "junk.keras")}
    m.rnn.save(m.files["rnn"])
    m.lm.save(m.files["lm"])
    m.rnn.save_weights(m.files["weights"])
    with open(m.files["junk"], "wb") as f:
        f.write(b"not a zip archive")
    return m


def run_row(action, expected, argument, capsys=None):
    if isinstance(expected, Raises):
        with pytest.raises(expected.type, match=expected.pattern):
            action(argument)
    elif isinstance(expected, Exits):
        with pytest.raises(SystemExit) as exit_info:
            action(argument)
        if expected.code is None:  # SystemExit("message"): printed, status 1
            assert re.search(expected.pattern, str(exit_info.value.code)), exit_info.value.code
        else:
            assert exit_info.value.code == expected.code
            stderr = capsys.readouterr().err
            assert re.search(expected.pattern, stderr), stderr
    else:
        expected.check(action(argument))


@pytest.mark.parametrize("where,given,action,expected", API_ROWS,
                         ids=[f"{r[0]}: {r[1]}" for r in API_ROWS])
def test_python_api(models, where, given, action, expected):
    run_row(action, expected, models)


# ---------------------------------------------------------------------------
# kseq.export (before anything is written)

def existing_version(paths):
    """export_dir/1 holds a file; exporting version 1 again must not touch it."""
    os.makedirs(os.path.join(paths.exports, "1"), exist_ok=True)
    with open(os.path.join(paths.exports, "1", "keep.txt"), "w") as f:
        f.write("keep")
    return paths.exports


def not_overwritten(paths):
    with open(os.path.join(paths.exports, "1", "keep.txt")) as f:
        assert f.read() == "keep"


def tiny_translator(e, **options):
    options = {"max_length": 8, **options}
    return export_translator(e.transformer, e.chars, e.chars, e.exports, **options)


EXPORT_ROWS = [
    ("export_translator", "version=1, and export_dir/1 is not empty", lambda e: tiny_translator(e, version=1) if existing_version(e) else None, Raises(ValueError, r"Export version '.*/1' already exists and is not empty; pick another `version`")),
    ("export_translator", "version='1' (digits), and export_dir/1 is not empty", lambda e: tiny_translator(e, version="1") if existing_version(e) else None, Raises(ValueError, r"already exists and is not empty")),
    ("export_translator", "version='latest'", lambda e: tiny_translator(e, version="latest"), Raises(ValueError, r"`version` must be an integer; got 'latest'")),
    ("export_translator", "version=-1", lambda e: tiny_translator(e, version=-1), Raises(ValueError, r"`version` must be >= 0; got -1")),
    ("export_translator", "export_dir is a file", lambda e: export_translator(e.transformer, e.chars, e.chars, e.blocker, max_length=8), Raises(ValueError, r"`export_dir` '.*' exists and is not a directory")),
    ("export_translator", "search max_length 40 > the Transformer's max_length 10", lambda e: tiny_translator(e, max_length=40), Raises(ValueError, r"`max_length` \(the search's, 40\) is over the model's max_length 10")),
    ("export_translator", "max_source_length=0", lambda e: tiny_translator(e, max_source_length=0), Raises(ValueError, r"`max_source_length` must be >= 1; got 0")),
    ("export_classifier", "2 labels for a 3-class model", lambda e: export_classifier(e.classifier, e.chars, ["a", "b"], e.exports), Raises(ValueError, r"`labels` must name the model's 3 classes; got 2")),
]


@pytest.fixture
def export_paths(models, tmp_path):
    e = Models()
    e.transformer, e.classifier = models.transformer, models.classifier
    e.chars = CharacterTokenizer(string.ascii_lowercase[: VOCAB - 4])
    e.exports = str(tmp_path / "exports")
    e.blocker = str(tmp_path / "a_file")
    with open(e.blocker, "w") as f:
        f.write("x")
    return e


@pytest.mark.parametrize("where,given,action,expected", EXPORT_ROWS,
                         ids=[f"{r[0]}: {r[1]}" for r in EXPORT_ROWS])
def test_export_api(export_paths, where, given, action, expected):
    run_row(action, expected, export_paths)
    if "not empty" in given:
        not_overwritten(export_paths)


# ---------------------------------------------------------------------------
# Tasks: argparse errors exit with status 2 and the message on stderr,
# before any data is read or any model is built; a task's main called from
# Python raises the UsageError of a data file without a good line, which
# kseq-train prints as one line with status 2 (tests/cli/test_task_usage_errors.py).

class Paths:
    def __init__(self, root):
        self.root = root
        self.missing = str(root / "missing.tsv")
        self.folder = str(root / "a_folder")
        os.makedirs(self.folder, exist_ok=True)
        self.file = str(root / "a_file")
        self.write(self.file, b"x")
        self.binary = self.write(str(root / "binary.tsv"), b"\xff\xfe\x00\x80\tsource\xc3\x28\n" * 3)
        self.empty = self.write(str(root / "empty.tsv"), b"")
        self.no_tabs = self.write(str(root / "no_tabs.tsv"), b"one column only\nstill one\n")
        self.locked = self.write(str(root / "locked.tsv"), b"a\tb\n")
        os.chmod(self.locked, 0)
        self.version = str(root / "export" / "1")  # a SavedModel version folder
        self.write(os.path.join(self.version, "saved_model.pb"), b"")
        self.logs = str(root / "logs")

    @staticmethod
    def write(path, data):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        return path


def translate_args(p, *argv):
    return ["--logdir", p.logs, *argv]


TASK_ROWS = [
    ("translate.py", "--train-tsv a missing file", lambda p: translate.parse_args(["--train-tsv", p.missing]), Exits(2, r"--train-tsv .*missing.tsv: no such file")),
    ("translate.py", "--valid-tsv a missing file", lambda p: translate.parse_args(["--valid-tsv", p.missing]), Exits(2, r"--valid-tsv .*missing.tsv: no such file")),
    ("translate.py", "--test-tsv a directory", lambda p: translate.parse_args(["--test-tsv", p.folder]), Exits(2, r"--test-tsv .*a_folder: is a directory, not a file")),
    ("translate.py", "--train-tsv without read permission", lambda p: translate.parse_args(["--train-tsv", p.locked]), Exits(2, r"--train-tsv .*locked.tsv: not readable \(permission denied\)")),
    ("translate.py", "--train-tsv of binary bytes (not UTF-8)", lambda p: translate.main(translate_args(p, "--train-tsv", p.binary)), Raises(UsageError, r"^--train-tsv .*binary.tsv: line 1 is not UTF-8: expected source<TAB>target; no line of the file is good$")),
    ("translate.py", "--train-tsv an empty file", lambda p: translate.main(translate_args(p, "--train-tsv", p.empty)), Raises(UsageError, r"^--train-tsv .*empty.tsv: the file is empty: expected source<TAB>target lines$")),
    ("translate.py", "--train-tsv lines without a tab", lambda p: translate.main(translate_args(p, "--train-tsv", p.no_tabs)), Raises(UsageError, r"^--train-tsv .*no_tabs.tsv: line 1 has no tab: expected source<TAB>target; no line of the file is good$")),
    ("translate.py", "--beam-patience over 1", lambda p: translate.parse_args(["--beam-patience", "1.5"]), Exits(2, r"--beam-patience 1.5: expected a number in \[0, 1\] \(0: the exact rule\)")),
    ("translate.py", "--logdir a file", lambda p: translate.parse_args(["--logdir", p.file]), Exits(2, r"--logdir .*a_file exists and is not a directory")),
    ("translate.py", "--logdir under a file", lambda p: translate.parse_args(["--logdir", os.path.join(p.file, "runs")]), Exits(2, r"--logdir .*a_file/runs: .*a_file is a file, not a directory")),
    ("translate.py", "--export-dir a file", lambda p: translate.parse_args(["--export-dir", p.file]), Exits(2, r"--export-dir .*a_file exists and is not a directory")),
    ("translate.py", "--export-dir under a file", lambda p: translate.parse_args(["--export-dir", os.path.join(p.file, "m")]), Exits(2, r"--export-dir .*a_file/m: .*a_file is a file, not a directory")),
    ("translate.py", "--xla-cache under a file", lambda p: translate.parse_args(["--xla-cache", os.path.join(p.file, "x")]), Exits(2, r"--xla-cache .*a_file/x: .*a_file is a file, not a directory")),
    ("translate.py", "--export-dir a non-empty export version (holds saved_model.pb)", lambda p: translate.parse_args(["--export-dir", p.version]), Exits(2, r"--export-dir .*export/1 is itself a SavedModel version .*pass the folder that holds the numbered versions, e.g. .*export")),
    ("translate.py", "--epochs 0", lambda p: translate.parse_args(["--epochs", "0"]), Exits(2, r"--epochs must be >= 1")),
    ("translate.py", "--epochs abc", lambda p: translate.parse_args(["--epochs", "abc"]), Exits(2, r"argument --epochs: invalid int value: 'abc'")),
    ("translate.py", "--arch cnn", lambda p: translate.parse_args(["--arch", "cnn"]), Exits(2, r"argument --arch: invalid choice: 'cnn'")),
    ("translate.py", "--token-budget 8 < --max-length 16", lambda p: translate.parse_args(["--token-budget", "8", "--max-length", "16"]), Exits(2, r"--token-budget must be >= --max-length")),
    ("classify.py", "--train-tsv a missing file", lambda p: classify.parse_args(["--train-tsv", p.missing]), Exits(2, r"--train-tsv .*missing.tsv: no such file")),
    ("classify.py", "--logdir a file", lambda p: classify.parse_args(["--logdir", p.file]), Exits(2, r"--logdir .*a_file exists and is not a directory")),
    ("classify.py", "--save-every abc", lambda p: classify.parse_args(["--save-every", "abc"]), Exits(2, r"--save-every must be 'epoch' or a positive number of steps; got 'abc'")),
    ("classify.py", "--eval-every soon", lambda p: classify.parse_args(["--eval-every", "soon"]), Exits(2, r"--eval-every: `eval_every` must be a number of steps .*'epoch' or 'auto'; got 'soon'")),
    ("classify.py", "--log-every 0", lambda p: classify.parse_args(["--log-every", "0"]), Exits(2, r"--log-every must be auto or >= 1")),
    ("classify.py", "--log-every soon", lambda p: classify.parse_args(["--log-every", "soon"]), Exits(2, r"argument --log-every: invalid auto or int value: 'soon'")),
    ("classify.py", "--train-tsv a glob that matches nothing", lambda p: classify.parse_args(["--train-tsv", p.folder + "/*.tsv.gz"]), Exits(2, r"--train-tsv .*a_folder/\*.tsv.gz: the pattern matches no file")),
    ("classify.py", "--export-dir a non-empty export version", lambda p: classify.parse_args(["--export-dir", p.version]), Exits(2, r"is itself a SavedModel version")),
    ("language_model.py", "--train-txt a directory", lambda p: language_model.parse_args(["--train-txt", p.folder]), Exits(2, r"--train-txt .*a_folder: is a directory, not a file")),
    ("language_model.py", "--logdir a file", lambda p: language_model.parse_args(["--logdir", p.file]), Exits(2, r"--logdir .*a_file exists and is not a directory")),
    ("language_model.py", "--train-txt of binary bytes", lambda p: language_model.main(["--logdir", p.logs, "--train-txt", p.binary]), Raises(UsageError, r"^--train-txt .*binary.tsv: line 1 is not UTF-8: expected UTF-8 text, one document a line; no line of the file is good$")),
]


@pytest.fixture(scope="module")
def task_paths(tmp_path_factory):
    return Paths(tmp_path_factory.mktemp("tasks"))


@pytest.mark.parametrize("where,given,action,expected", TASK_ROWS,
                         ids=[f"{r[0]}: {r[1]}" for r in TASK_ROWS])
def test_tasks(task_paths, capsys, where, given, action, expected):
    if "permission" in given and os.access(task_paths.locked, os.R_OK):
        pytest.skip("this user reads files without read permission (root)")
    run_row(action, expected, task_paths, capsys)


def test_an_export_never_overwrites_a_version_taken_meanwhile(served):
    """The race the tasks can meet (they export to the next free version):
    another export takes that version between the choice and the rename.
    The export moves to the next number; the other version is untouched."""
    assert served.raced_path.endswith(os.path.join("translator", "2"))
    with open(os.path.join(served.root, "translator", "1", "keep.txt")) as f:
        assert f.read() == "another export's version"


# ---------------------------------------------------------------------------
# The served signatures, in one TensorFlow-only process

WORDS = ["the", "cat", "sat", "on", "mat", "le", "chat", "sur", "tapis", "a", "dog", "ran"]
LONG = "the cat " * 12500  # 100,000 characters, 25,000 words
assert len(LONG) == 100_000
MAX_SOURCE = 16  # the exported Transformer's max_length: longer sources are cut to it
MAX_PROMPT = 32  # the language model export's max_prompt_length: it keeps the last 32
_rng = random.Random(0)
BATCH_512 = [" ".join(_rng.choices(WORDS, k=_rng.randint(0, 12))) for _ in range(512)]

SERVING_INPUTS = [
    ("empty string", [""]),
    ("whitespace only", ["   "]),
    ("tab and newline only", ["\t\n"]),
    ("unknown characters", ["日本語 ✓ 🙂"]),
    ("control characters", ["\x00\x01\x7f"]),
    ("invalid UTF-8 bytes", [b"\xff\xfe"]),
    ("100,000 characters", [LONG]),
    ("a batch of 0", []),
    ("a batch of 512", BATCH_512),
    ("a batch mixing all of the above", ["", "   ", "\t\n", "日本語 ✓ 🙂", "\x00\x01\x7f", b"\xff\xfe", LONG, "the cat"]),
]
# Requests whose answers the long input's must equal: text whose first (or
# last) tokens are those the export keeps of the long input, read as training
# reads text (ends stripped, so one more character than is kept).
REFERENCES = [
    ("translator", "first 16 words", [" ".join(["the", "cat"] * (MAX_SOURCE // 2))]),
    ("classifier", "first 16 characters", [LONG[: MAX_SOURCE + 1]]),
    ("language_model", "last 32 characters", [LONG.strip()[-(MAX_PROMPT + 1):]]),
]
SIGNATURES = {  # export -> (input name, {output: (dtype, rank)})
    "translator": ("source", {"translation": ("string", 1), "token_ids": ("int32", 2), "score": ("float32", 1)}),
    "classifier": ("text", {"probabilities": ("float32", 2), "label": ("string", 1), "class_id": ("int32", 1)}),
    "language_model": ("prompt", {"continuation": ("string", 1), "token_ids": ("int32", 2)}),
}
LABELS = ["negative", "neutral", "positive"]

# argv: a JSON request file, the result file. Every request is answered
# (or its error recorded) by this one process, then the first request is
# asked again to show the process still answers the same.
SERVE_ALL = r"""
import base64, glob, importlib.util, json, os, sys
for name in ("keras", "keras_hub", "kseq", "tf_keras"):
    sys.modules[name] = None
import tensorflow as tf
text_dir = importlib.util.find_spec("tensorflow_text").submodule_search_locations[0]
for library in glob.glob(os.path.join(text_dir, "python", "ops", "_*.so")):
    tf.load_op_library(library)
job = json.load(open(sys.argv[1]))
signatures = {name: tf.saved_model.load(path).signatures["serving_default"]
              for name, path in job["exports"].items()}

def encode(value):
    if value.dtype == tf.string:
        return [base64.b64encode(v).decode() for v in value.numpy().reshape(-1)]
    return value.numpy().tolist()

def serve(request):
    serve = signatures[request["export"]]
    name = list(serve.structured_input_signature[1])[0]
    texts = tf.constant([base64.b64decode(t) for t in request["texts"]], tf.string, shape=[len(request["texts"])])
    try:
        out = serve(**{name: texts})
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}"[:2000], "pid": os.getpid()}
    return {"pid": os.getpid(), "outputs": {
        key: {"dtype": value.dtype.name, "shape": value.shape.as_list(), "values": encode(value)}
        for key, value in out.items()}}

results = [serve(request) for request in job["requests"]]
again = serve(job["requests"][0])
json.dump({"results": results, "again": again}, open(sys.argv[2], "w"))
"""


class Served:
    """The served answers, keyed by (export, input label)."""

    def __init__(self, record):
        self.root, self.raced_path, self.vocab = record["root"], record["raced_path"], record["vocab"]
        self.returncode, self.stderr = record["returncode"], record["stderr"]
        self.answers = {(export, label): answer for export, label, answer in record["answers"]}
        self.first, self.again = record["first"], record["again"]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Exports and serves once per test session: pytest-xdist workers share
    one run through a lock file in the session's temporary folder (the
    pattern pytest-xdist documents for expensive fixtures)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return Served(export_and_serve(tmp_path_factory.mktemp("serving")))
    shared = tmp_path_factory.getbasetemp().parent  # this session's, for all workers
    with open(shared / "bad_input_serving.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cache = shared / "bad_input_serving.json"
        if not cache.exists():
            folder = shared / "bad_input_serving"
            folder.mkdir()
            cache.write_text(json.dumps(export_and_serve(folder)))
    return Served(json.loads(cache.read_text()))


def export_and_serve(root):
    """Exports a translator, a classifier and a language model under `root`
    and serves every request to them in one TensorFlow-only process."""
    keras.utils.set_random_seed(0)
    texts = [" ".join(random.Random(i).choices(WORDS, k=6)) for i in range(60)]
    subwords = SubwordTokenizer.train(texts, vocab_size=300)
    chars = CharacterTokenizer(string.ascii_lowercase + " ")
    translator = TransformerSeq2Seq(
        subwords.vocab_size, subwords.vocab_size, num_layers=1, d_model=16, num_heads=2,
        ff_dim=16, max_length=MAX_SOURCE, position="learned", share_embeddings=True,
    )
    classifier = SequenceClassifier(chars.vocab_size, 3, encoder="transformer", pooling="attention",
                                    embed_dim=8, num_heads=2, ff_dim=8, max_length=MAX_SOURCE)
    lm = RNNLanguageModel(chars.vocab_size, embed_dim=8, units=8)
    root = str(root)
    # Version 1 is taken by "another export" after this one chose it.
    Paths.write(os.path.join(root, "translator", "1", "keep.txt"), b"another export's version")
    stale = iter([1])
    real_next_version = kseq.export.publishing.next_version
    kseq.export.publishing.next_version = lambda d: next(stale, None) or real_next_version(d)
    try:
        # Default max_source_length (256) over the model's 16: the export cuts to 16.
        # n_best=0: only serving_default is served here, and tracing the
        # n_best signature's beam search took a quarter of this export.
        raced_path = export_translator(translator, subwords, subwords, os.path.join(root, "translator"),
                                       search=BeamSearch(8, beam_size=2), n_best=0)
    finally:
        kseq.export.publishing.next_version = real_next_version
    exports = {
        "translator": raced_path,
        "classifier": export_classifier(classifier, chars, LABELS, os.path.join(root, "classifier")),
        "language_model": export_language_model(lm, chars, os.path.join(root, "language_model"),
                                                GreedySearch(6), max_prompt_length=MAX_PROMPT),
    }
    requests = [(export, label, batch) for export in SIGNATURES for label, batch in SERVING_INPUTS]
    requests += REFERENCES
    as_bytes = lambda t: t if isinstance(t, bytes) else t.encode("utf-8")  # noqa: E731
    job = {"exports": exports, "requests": [
        {"export": export, "texts": [base64.b64encode(as_bytes(t)).decode() for t in batch]}
        for export, _, batch in requests]}
    job_path, result_path = os.path.join(root, "job.json"), os.path.join(root, "result.json")
    with open(job_path, "w") as f:
        json.dump(job, f)
    process = subprocess.run(
        [sys.executable, "-c", SERVE_ALL, job_path, result_path],
        capture_output=True, text=True, env=subprocess_env(), timeout=300,
    )
    result = {"results": [], "again": None}
    if os.path.exists(result_path):
        with open(result_path) as f:
            result = json.load(f)
    return {
        "root": root, "raced_path": raced_path,
        "vocab": {"translator": subwords.vocab_size, "language_model": chars.vocab_size},
        "returncode": process.returncode, "stderr": process.stderr[-3000:],
        "answers": [[export, label, answer]
                    for (export, label, _), answer in zip(requests, result["results"])],
        "first": (result["results"] or [None])[0], "again": result["again"],
    }


def decoded(output):
    """String outputs as Python strings; raises unless each is valid UTF-8."""
    return [base64.b64decode(v).decode("utf-8", errors="strict") for v in output["values"]]


def check_well_formed(export, answer, batch, vocab=None):
    assert "error" not in answer, answer.get("error")
    batch_size = len(batch)
    outputs = answer["outputs"]
    _, expected = SIGNATURES[export]
    assert set(outputs) == set(expected)
    for key, (dtype, rank) in expected.items():
        assert outputs[key]["dtype"] == dtype, key
        assert len(outputs[key]["shape"]) == rank and outputs[key]["shape"][0] == batch_size, (key, outputs[key]["shape"])
        if dtype == "string":
            assert len(decoded(outputs[key])) == batch_size
    if "token_ids" in outputs:
        for row in outputs["token_ids"]["values"]:
            assert all(0 <= i < vocab for i in row), row
            if EOS_ID in row:  # PAD (0) after EOS
                assert not any(row[row.index(EOS_ID) + 1:]), row
    blank = np.array([not normalize_text(text.decode("utf-8", "replace") if isinstance(text, bytes) else text)
                      for text in batch], bool)
    if export == "classifier":  # a blank text gets an empty answer
        probabilities = np.array(outputs["probabilities"]["values"], "float64").reshape(batch_size, 3)
        assert np.all(np.isfinite(probabilities))
        np.testing.assert_allclose(probabilities.sum(axis=1), np.where(blank, 0.0, 1.0), atol=1e-5)
        labels, class_ids = decoded(outputs["label"]), np.array(outputs["class_id"]["values"])
        assert all(label == "" if empty else label in LABELS for label, empty in zip(labels, blank))
        assert np.all(np.where(blank, class_ids == -1, (0 <= class_ids) & (class_ids < 3)))
    if export in ("language_model", "translator"):
        texts = decoded(outputs["continuation" if export == "language_model" else "translation"])
        assert all(text == "" for text, empty in zip(texts, blank) if empty)


BEHAVIOUR = "well-formed: batch size kept, declared dtypes, valid UTF-8 strings, nothing raised"
SERVING_ROWS = [(export, label, batch, BEHAVIOUR) for export in SIGNATURES for label, batch in SERVING_INPUTS]


@pytest.mark.parametrize("export,given,batch,expected", SERVING_ROWS,
                         ids=[f"{r[0]}: {r[1]}" for r in SERVING_ROWS])
def test_serving(served, export, given, batch, expected):
    check_well_formed(export, served.answers[(export, given)], batch, served.vocab.get(export))


def test_serving_process_stays_up(served):
    """One process answered every request (none crashed it, none raised) and
    still gives the first answer again at the end."""
    assert served.returncode == 0, served.stderr
    assert len(served.answers) == len(SERVING_ROWS) + len(REFERENCES)
    assert len({answer["pid"] for answer in served.answers.values()}) == 1
    assert served.again == served.first


def output_values(served, export, label):
    return {key: value["values"] for key, value in served.answers[(export, label)]["outputs"].items()}


def test_serving_empty_string_translates_to_empty(served):
    """An empty source (and one SentencePiece reads as no tokens) has nothing
    to translate: an empty translation, token_ids [EOS]."""
    for label in ("empty string", "whitespace only"):
        values = output_values(served, "translator", label)
        assert decoded({"values": values["translation"]}) == [""], label
        assert values["token_ids"][0][0] == EOS_ID, label


@pytest.mark.parametrize("export,reference", [(r[0], r[1]) for r in REFERENCES])
def test_serving_over_long_input_is_cut_as_documented(served, export, reference):
    """100,000 characters get the answer of the beginning the export keeps
    (translator: the first 16 tokens, its model's max_length; classifier: the
    first 16) or the end (language model: the last 32 prompt tokens)."""
    assert output_values(served, export, "100,000 characters") == output_values(served, export, reference)
