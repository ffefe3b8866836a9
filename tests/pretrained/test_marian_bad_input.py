"""A bad Marian checkpoint folder gets one clear error naming the file, the
field or the tensor (docs/errors.md), before a model is built where it can."""

import importlib.util
import json
import os
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from kseq.errors import UsageError
from kseq.pretrained import load_marian, marian_tokenizers
from kseq.pretrained import folder as folder_module
from kseq.pretrained import weights as weights_module

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "marian")


def copied(tmp_path, name="joint_swish"):
    folder = tmp_path / name
    shutil.copytree(os.path.join(FIXTURES, name), folder)
    return folder


def edit_json(path, change):
    value = json.loads(path.read_text(encoding="utf-8"))
    change(value)
    path.write_text(json.dumps(value, ensure_ascii=False), encoding="utf-8")


def without(name):
    return lambda folder: os.remove(folder / name)


def truncated(folder):
    content = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(content[:len(content) // 2])


def config_set(field, value):
    return lambda folder: edit_json(folder / "config.json", lambda config: config.__setitem__(field, value))


def vocabulary_without_a_piece(folder):
    def drop(vocabulary):
        last = max(vocabulary, key=vocabulary.get)
        pad = vocabulary.pop(last)
        dropped = max(vocabulary, key=vocabulary.get)
        del vocabulary[dropped]
        vocabulary[last] = pad - 1

    edit_json(folder / "vocab.json", drop)


def with_extra_tensor(folder):
    tensors = load_file(str(folder / "model.safetensors"))
    tensors["model.encoder.layernorm_embedding.weight"] = np.ones(16, np.float32)
    save_file(tensors, str(folder / "model.safetensors"))


CASES = [
    ("no config.json", without("config.json"), "config.json: No such file"),
    ("no weights", without("model.safetensors"), "holds no weights: expected model.safetensors"),
    ("truncated weights", truncated, "model.safetensors cannot be read: truncated"),
    ("no source.spm", without("source.spm"), "source.spm: No such file"),
    ("no target.spm", without("target.spm"), "target.spm: No such file"),
    ("no vocab.json", without("vocab.json"), "vocab.json: No such file"),
    ("vocabulary against embeddings", vocabulary_without_a_piece,
     "the source vocabulary has 132 pieces; config.json's vocab_size (its embedding's rows) is 133"),
    ("config against weights", config_set("d_model", 32),
     "model.shared.weight has shape (133, 16); config.json and the vocabulary give (133, 32)"),
    ("pre-norm", config_set("normalize_before", True), "config.json: normalize_before is True: that is pre-norm"),
    ("layernorm_embedding", config_set("layernorm_embedding", True), "layernorm_embedding is True"),
    ("learned positions", config_set("static_position_embeddings", False), "learned position embeddings"),
    ("an activation kseq lacks", config_set("activation_function", "tanh"), "activation_function is 'tanh'"),
    ("another model type", config_set("model_type", "bart"), "model_type is 'bart': not a Marian checkpoint"),
    ("a tensor of another architecture", with_extra_tensor,
     "model.encoder.layernorm_embedding.weight (and 0 more) has no place"),
]


@pytest.mark.parametrize("case,break_it,expected", CASES, ids=[case[0] for case in CASES])
def test_a_bad_checkpoint_gets_one_line_naming_what_is_wrong(case, break_it, expected, tmp_path):
    folder = copied(tmp_path)
    break_it(folder)
    with pytest.raises(UsageError) as caught:
        load_marian(str(folder))
    message = str(caught.value)
    assert expected in message, message
    assert "\n" not in message


def test_a_vocabulary_without_the_unknown_token_is_named(tmp_path):
    folder = copied(tmp_path, "separate_gelu")
    edit_json(folder / "target_vocab.json",
              lambda vocabulary: vocabulary.__setitem__("<unk2>", vocabulary.pop("<unk>")))
    with pytest.raises(UsageError, match=r"target_vocab.json: the vocabulary has no '<unk>' token"):
        marian_tokenizers(str(folder))


def test_only_pytorch_weights_without_pytorch_say_how_to_convert(tmp_path, monkeypatch):
    folder = copied(tmp_path)
    os.replace(folder / "model.safetensors", folder / "pytorch_model.bin")
    real = importlib.util.find_spec
    monkeypatch.setattr(weights_module.importlib.util, "find_spec",
                        lambda name, *args: None if name == "torch" else real(name, *args))
    with pytest.raises(UsageError) as caught:
        load_marian(str(folder))
    message = str(caught.value)
    assert "pytorch_model.bin needs PyTorch to read" in message and "safetensors.torch" in message
    assert "model.safetensors" in message and "\n" not in message


def test_a_hub_name_without_a_network_says_how_to_give_a_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(UsageError) as caught:
        load_marian("Helsinki-NLP/opus-mt-en-de")
    assert "could not be downloaded" in str(caught.value) and "give a local folder instead" in str(caught.value)


def test_a_hub_name_without_huggingface_hub_names_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(folder_module.importlib.util, "find_spec",
                        lambda name, *args: None if name == "huggingface_hub" else real(name, *args))
    with pytest.raises(UsageError, match=r"needs huggingface_hub \(pip install 'kseq\[hub\]'\); or give a local"):
        load_marian("Helsinki-NLP/opus-mt-en-de")


def test_a_path_that_is_neither_folder_nor_hub_name(tmp_path):
    with pytest.raises(UsageError, match="no such folder"):
        load_marian(str(tmp_path / "missing" / "deeper"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="is a file; expected a checkpoint folder"):
        load_marian(str(tmp_path / "file"))
