"""A Marian checkpoint folder checked without TensorFlow: what `kseq-train
translate --pretrained` checks with its other options, before a run writes
anything."""

import json
import os

from kseq.errors import UsageError
from kseq.pretrained.folder import HUB_NAME
from kseq.pretrained.marian_config import read_marian_config
from kseq.pretrained.weights import weight_files


def check_marian_folder(name_or_folder):
    """Checks a local checkpoint folder's files (a Hub name is checked when it is downloaded).

    config.json (read and checked as the loader reads it), the weights
    present, source.spm and target.spm present, the vocabularies readable
    and as large as config.json's embeddings.

    Args:
        name_or_folder: `--pretrained`'s value.

    Raises:
        UsageError: the first problem found, naming the file.
    """
    folder = os.path.expanduser(str(name_or_folder))
    if not os.path.isdir(folder):
        if os.path.exists(folder) or not HUB_NAME.match(folder):
            raise UsageError(f"{folder}: no such folder; expected a checkpoint folder (config.json, weights, "
                             "source.spm, target.spm, vocab.json) or a Hub name (ORG/NAME)")
        return
    config = read_marian_config(_json(os.path.join(folder, "config.json")), os.path.join(folder, "config.json"))
    weight_files(folder)
    for name in ("source.spm", "target.spm"):
        if not os.path.isfile(os.path.join(folder, name)):
            raise UsageError(f"{os.path.join(folder, name)}: No such file; a Marian checkpoint holds source.spm "
                             "and target.spm")
    settings_path = os.path.join(folder, "tokenizer_config.json")
    settings = _json(settings_path) if os.path.isfile(settings_path) else {}
    separate = bool(settings.get("separate_vocabs", False))
    target_name = os.path.basename(settings.get("target_vocab_file") or "target_vocab.json")
    sides = (("source", "vocab.json", config.source_size, "vocab_size"),
             ("target", target_name if separate else "vocab.json", config.target_size, "decoder_vocab_size"))
    for side, name, size, field in sides:
        vocabulary = _json(os.path.join(folder, name))
        if not isinstance(vocabulary, dict) or len(vocabulary) != size:
            count = len(vocabulary) if isinstance(vocabulary, dict) else "no"
            raise UsageError(f"{folder}: the {side} vocabulary has {count} pieces; config.json's {field} (its "
                             f"embedding's rows) is {size}")


def _json(path):
    try:
        with open(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except OSError as error:
        raise UsageError(f"{path}: {error.strerror or error}; a Marian checkpoint folder holds "
                         f"{os.path.basename(path)}") from None
    except (UnicodeDecodeError, ValueError) as error:
        raise UsageError(f"{path} is not UTF-8 JSON ({error})") from None
