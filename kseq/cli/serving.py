"""What every command shares: the export, the lines, the batches."""

import argparse
import os
import sys

from kseq._atomic import write_bytes_atomic


def parser(description, what):
    """The options every command takes; `what` names one input line."""
    arguments = argparse.ArgumentParser(description=description)
    arguments.add_argument("--model", required=True,
                           help="a SavedModel version folder, or the folder of numbered versions (the newest)")
    arguments.add_argument("--input", help=f"a UTF-8 file of {what}, one a line (default: stdin)")
    arguments.add_argument("--output", help="where the answers go, one a line (default: stdout)")
    arguments.add_argument("--batch-size", type=positive, default=32, help="lines a call (default: 32)")
    return arguments


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def version_folder(path):
    """`path` if it holds a SavedModel, else its newest numbered version."""
    if os.path.isfile(os.path.join(path, "saved_model.pb")):
        return path
    if not os.path.isdir(path):
        raise SystemExit(f"--model {path}: no such folder")
    versions = [name for name in os.listdir(path)
                if name.isdigit() and os.path.isfile(os.path.join(path, name, "saved_model.pb"))]
    if not versions:
        raise SystemExit(f"--model {path}: no SavedModel there (no saved_model.pb, no numbered version folder)")
    newest = os.path.join(path, max(versions, key=int))
    print(f"using {newest}", file=sys.stderr)
    return newest


def load_signatures(path, kind, inputs):
    """The export's signatures; exits unless `serving_default` takes `inputs` (a `kind` export's)."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (registers the graph's text ops)

    folder = version_folder(path)
    try:
        signatures = tf.saved_model.load(folder).signatures
    except (OSError, ValueError, tf.errors.OpError) as error:
        raise SystemExit(f"--model {folder}: cannot be loaded ({str(error).splitlines()[0]})") from None
    found = sorted(signatures["serving_default"].structured_input_signature[1]) if "serving_default" in signatures else []
    if found != sorted(inputs):
        raise SystemExit(f"--model {folder}: not a {kind} export (its serving_default takes "
                         f"{', '.join(found) or 'nothing'}; a {kind} takes {', '.join(inputs)})")
    return signatures


def read_lines(path):
    """The input's lines, without their line ends; invalid UTF-8 names its line."""
    try:
        data = open(path, "rb").read() if path else sys.stdin.buffer.read()
    except OSError as error:
        raise SystemExit(f"--input {path}: {error.strerror}") from None
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    texts = []
    for number, line in enumerate(lines, 1):
        try:
            texts.append(line.removesuffix(b"\r").decode("utf-8"))
        except UnicodeDecodeError as error:
            raise SystemExit(f"{path or 'stdin'}: line {number} is not UTF-8 ({error.reason})") from None
    return texts


def batches(lines, size):
    for start in range(0, len(lines), size):
        yield lines[start: start + size]


def call(signature, **inputs):
    """{output name: numpy array} of one signature call on lists of strings."""
    import tensorflow as tf

    return {name: value.numpy() for name, value in signature(
        **{name: tf.constant(values, tf.string) for name, values in inputs.items()}).items()}


def text(value):
    return value.decode("utf-8")


def write_lines(path, lines):
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    if path:
        write_bytes_atomic(path, data)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
