"""A Hugging Face checkpoint's weights as numpy arrays: model.safetensors
(with the `safetensors` package, no PyTorch), or pytorch_model.bin where
PyTorch is installed."""

import importlib.util
import json
import os

import numpy as np

from kseq.errors import UsageError

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PYTORCH = "pytorch_model.bin"


def weight_files(folder):
    """Which weight files `folder` holds, checked before anything is read.

    Args:
        folder: a checkpoint folder.

    Returns:
        ("safetensors", [files]) or ("pytorch", [file]).

    Raises:
        UsageError: no weights, or only pytorch_model.bin without PyTorch (with how to convert it).
    """
    single, index = os.path.join(folder, SAFETENSORS), os.path.join(folder, SAFETENSORS_INDEX)
    if os.path.isfile(single):
        return "safetensors", [single]
    if os.path.isfile(index):
        return "safetensors", _shards(folder, index)
    pytorch = os.path.join(folder, PYTORCH)
    if not os.path.isfile(pytorch):
        raise UsageError(f"{folder} holds no weights: expected {SAFETENSORS} (or {PYTORCH})")
    if importlib.util.find_spec("torch") is None:
        raise UsageError(
            f"{pytorch} needs PyTorch to read; install torch, or convert it once where PyTorch is installed: "
            f"python -c \"import torch, safetensors.torch as s; s.save_file({{k: v.contiguous().clone() for k, v in "
            f"torch.load('{pytorch}', map_location='cpu', weights_only=True).items()}}, "
            f"'{os.path.join(folder, SAFETENSORS)}')\"")
    return "pytorch", [pytorch]


def _shards(folder, index):
    try:
        with open(index, encoding="utf-8") as f:
            names = sorted(set(json.load(f)["weight_map"].values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise UsageError(f"{index} is no safetensors index ({error})") from None
    paths = [os.path.join(folder, name) for name in names]
    missing = [path for path in paths if not os.path.isfile(path)]
    if missing:
        raise UsageError(f"{index} names {missing[0]}, which is missing")
    return paths


def read_weights(folder):
    """Reads every tensor of a checkpoint as float32 numpy arrays.

    Args:
        folder: a checkpoint folder.

    Returns:
        {name: np.ndarray}.

    Raises:
        UsageError: no weights, or a file that is truncated or of another format (named).
    """
    kind, paths = weight_files(folder)
    tensors = {}
    for path in paths:
        tensors.update(_read_safetensors(path) if kind == "safetensors" else _read_pytorch(path))
    return {name: np.asarray(value, np.float32) for name, value in tensors.items()}


def _read_safetensors(path):
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        return load_file(path)
    except (SafetensorError, OSError, ValueError) as error:
        raise UsageError(f"{path} cannot be read: truncated, or not a safetensors file ({error})") from None


def _read_pytorch(path):
    import pickle
    import zipfile

    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, OSError, EOFError, ValueError, pickle.UnpicklingError, zipfile.BadZipFile) as error:
        raise UsageError(f"{path} cannot be read: truncated, or not a PyTorch checkpoint ({error})") from None
    return {name: value.float().numpy() for name, value in state.items() if hasattr(value, "numpy")}
