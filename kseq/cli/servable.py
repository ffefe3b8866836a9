"""The export a command serves: its version folder, its signatures (checked
to be the command's kind) and calls on lists of strings.

Only `tensorflow` and tensorflow_text's ops are used, as TF Serving has
them: the commands answer what a server would, and need no model code.
"""

import contextlib
import importlib
import os
import re

from kseq.cli.errors import Failure, UsageError
from kseq.cli.quiet_start import held_to_log_level

# What each kind of export's `serving_default` takes, and the command that serves it.
KINDS = {
    "source": ("a translator", "kseq-translate"),
    "prompt": ("a language model", "kseq-generate"),
    "text": ("a classifier", "kseq-classify"),
    "label": ("a label-conditioned generator", "kseq-generate-from-label"),
    "condition": ("a vector-conditioned generator", None),
}


def version_folder(path):
    """Finds the SavedModel folder that --model names.

    That is `path` itself if it holds saved_model.pb, else its highest
    numbered complete version, as TF Serving picks one (numbers, not names,
    compared: 10 is newer than 9; a folder without saved_model.pb, such as
    a half-copied one, is passed over).

    Args:
        path: the --model value: a version folder or a folder of versions.

    Returns:
        (the SavedModel folder, the message saying which version was picked,
        or None where `path` is the version folder).

    Raises:
        UsageError: `path` is missing, a file, or holds no complete version.
    """
    if os.path.isfile(os.path.join(path, "saved_model.pb")):
        return path, None
    if not os.path.exists(path):
        raise UsageError(f"--model {path}: no such folder")
    if not os.path.isdir(path):
        hint = f"; pass its folder, {os.path.dirname(path) or '.'}" if path.endswith(".pb") else ""
        raise UsageError(f"--model {path}: is a file, not a SavedModel folder{hint}")
    numbered = [name for name in os.listdir(path) if name.isascii() and name.isdigit()]
    complete = [name for name in numbered if os.path.isfile(os.path.join(path, name, "saved_model.pb"))]
    if not complete:
        found = f" (numbered folders without one: {', '.join(sorted(numbered, key=int))})" if numbered else ""
        raise UsageError(f"--model {path}: no SavedModel there: no saved_model.pb, and no numbered "
                         f"version folder holding one{found}")
    newest = max(complete, key=int)
    return os.path.join(path, newest), f"using {os.path.join(path, newest)}, the newest of {len(complete)} " \
                                       f"version{'s' if len(complete) > 1 else ''}"


def load_signatures(folder):
    """Loads the signatures of the SavedModel in `folder`.

    Args:
        folder: a SavedModel version folder.

    Returns:
        {signature name: concrete function}.

    Raises:
        Failure: it cannot be read (damaged, half-written, ops this
            TensorFlow lacks).
    """
    import tensorflow as tf

    from kseq._saved_model import load_saved_model

    importlib.import_module("tensorflow_text")  # registers the text ops the exports' graphs hold

    try:
        return dict(load_saved_model(folder).signatures)
    except (OSError, RuntimeError, ValueError, tf.errors.OpError) as error:
        raise Failure(f"--model {folder}: cannot be loaded ({first_line(str(error))})") from None


def check_kind(signatures, folder, inputs, command):
    """Checks that the export's `serving_default` takes exactly `inputs`.

    Args:
        signatures: {signature name: concrete function}, from `load_signatures`.
        folder: the SavedModel folder, for the message.
        inputs: the input names the command needs, such as ["source"].
        command: the command's name, for the message.

    Raises:
        UsageError: there is no serving_default, or it takes other inputs;
            the message names what it takes, what that is and which command
            serves it.
    """
    if "serving_default" not in signatures:
        raise UsageError(f"--model {folder}: no serving_default signature (it has: "
                         f"{', '.join(sorted(signatures)) or 'none'}); {command} needs one taking "
                         f"{', '.join(inputs)}")
    found = sorted(input_names(signatures["serving_default"]))
    if found == sorted(inputs):
        return
    kind, other = KINDS.get(found[0], (None, None)) if len(found) == 1 else (None, None)
    wanted = KINDS[inputs[0]][0]
    what = f"{kind} export" if kind else "not an export kseq's commands serve"
    use = f": use {other}" if other else ""
    raise UsageError(f"--model {folder}: {what} (its serving_default takes {', '.join(found) or 'nothing'}), "
                     f"not {wanted} (whose serving_default takes {', '.join(inputs)}){use}")


def input_names(signature):
    """Lists a signature's input names.

    Args:
        signature: a concrete function of the export.

    Returns:
        The names of its keyword inputs.
    """
    return list(signature.structured_input_signature[1])


def output_shape(signature, name):
    """Gives the static shape of one of a signature's outputs.

    Args:
        signature: a concrete function of the export.
        name: the output's name.

    Returns:
        The shape as a list (None where a size is unknown), or None if the
        signature has no such output.
    """
    spec = signature.structured_outputs.get(name)
    return None if spec is None else spec.shape.as_list()


def call(signature, **inputs):
    """Calls a signature once on lists of strings.

    Args:
        signature: a concrete function of the export.
        **inputs: each input's name and its list of strings.

    Returns:
        {output name: numpy array}.
    """
    import tensorflow as tf

    first = id(signature) not in _CALLED
    with held_to_log_level() if first else contextlib.nullcontext():
        outputs = signature(**{name: tf.constant(values, tf.string) for name, values in inputs.items()})
    _CALLED.add(id(signature))
    return {name: value.numpy() for name, value in outputs.items()}


# The signatures called once: a first call builds the kernels, and with them their log lines.
_CALLED = set()


def text(value):
    """Decodes a string output (bytes) as text; the exports' outputs are UTF-8.

    Args:
        value: bytes from an output.

    Returns:
        The text, a str.
    """
    return value.decode("utf-8")


def first_line(message):
    """Gives a message's first non-blank line, stripped.

    Args:
        message: a possibly multi-line message.

    Returns:
        The first non-blank line, or `message` itself when all are blank.
    """
    return next((line.strip() for line in message.splitlines() if line.strip()), message)


def graph_error(message):
    """Extracts the words that matter from a TensorFlow error raised inside a served graph.

    Args:
        message: the error's message.

    Returns:
        An Assert's text and values ("assertion failed: [text] [values]"
        gives "text values"), else the first line that is not TensorFlow's
        framing, without a trailing "[Op:...]".
    """
    for line in message.splitlines():
        if line.startswith("assertion failed:"):
            return " ".join(re.findall(r"\[([^\]]*)\]", line)) or line
    framing = ("Graph execution error:", "Detected at node", "<stack traces", "[[")
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    found = next((line for line in lines if not line.startswith(framing)), first_line(message))
    return re.sub(r"\s*\[Op:[^\]]*\]$", "", found)
