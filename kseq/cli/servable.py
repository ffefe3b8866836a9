"""The export a command serves: its version folder, its signatures (checked
to be the command's kind) and calls on lists of strings.

Only `tensorflow` and tensorflow_text's ops are used, as TF Serving has
them: the commands answer what a server would, and need no model code.
"""

import importlib
import os
import re

from kseq.cli.errors import Failure, UsageError

# What each kind of export's `serving_default` takes, and the command that serves it.
KINDS = {
    "source": ("a translator", "kseq-translate"),
    "prompt": ("a language model", "kseq-generate"),
    "text": ("a classifier", "kseq-classify"),
    "label": ("a label-conditioned generator", "kseq-generate-from-label"),
    "condition": ("a vector-conditioned generator", None),
}


def version_folder(path):
    """(the SavedModel folder `path` names, the message saying which version
    was picked or None): `path` itself if it holds saved_model.pb, else its
    highest numbered complete version, as TF Serving picks one (numbers,
    not names, compared: 10 is newer than 9; a folder without
    saved_model.pb, such as a half-copied one, is passed over)."""
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
    """{name: concrete function} of the SavedModel in `folder`; Failure if
    it cannot be read (damaged, half-written, ops this TensorFlow lacks)."""
    import tensorflow as tf

    importlib.import_module("tensorflow_text")  # registers the text ops the exports' graphs hold

    try:
        return dict(tf.saved_model.load(folder).signatures)
    except (OSError, RuntimeError, ValueError, tf.errors.OpError) as error:
        raise Failure(f"--model {folder}: cannot be loaded ({first_line(str(error))})") from None


def check_kind(signatures, folder, inputs, command):
    """Raises UsageError unless `serving_default` takes exactly `inputs`,
    naming what it takes, what that is and which command serves it."""
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
    return list(signature.structured_input_signature[1])


def output_shape(signature, name):
    """The static shape (a list, None where unknown) of output `name`, or
    None if the signature has no such output."""
    spec = signature.structured_outputs.get(name)
    return None if spec is None else spec.shape.as_list()


def call(signature, **inputs):
    """{output name: numpy array} of one call on lists of strings."""
    import tensorflow as tf

    outputs = signature(**{name: tf.constant(values, tf.string) for name, values in inputs.items()})
    return {name: value.numpy() for name, value in outputs.items()}


def text(value):
    """A string output (bytes) as text; the exports' outputs are UTF-8."""
    return value.decode("utf-8")


def first_line(message):
    return next((line.strip() for line in message.splitlines() if line.strip()), message)


def graph_error(message):
    """The words of a TensorFlow error raised inside a served graph: an
    Assert's text and values ("assertion failed: [text] [values]"), else
    the first line that is not TensorFlow's framing."""
    for line in message.splitlines():
        if line.startswith("assertion failed:"):
            return " ".join(re.findall(r"\[([^\]]*)\]", line)) or line
    framing = ("Graph execution error:", "Detected at node", "<stack traces", "[[")
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    found = next((line for line in lines if not line.startswith(framing)), first_line(message))
    return re.sub(r"\s*\[Op:[^\]]*\]$", "", found)
