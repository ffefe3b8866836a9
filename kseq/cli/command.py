"""What every command shares: its options, its exit statuses and the loop
that turns batches of input lines into output lines."""

import argparse
import os
import sys

from kseq.cli import lines, servable
from kseq.cli.errors import Failure, UsageError

# Lines read at a time, in batches: sorted by length, a window's batches
# pad their lines to similar lengths; more batches sort better and hold
# back the first answers longer.
WINDOW_BATCHES = 64


def parser(prog, description, what, epilog=None):
    """The options every command takes; `what` names what one input line holds."""
    arguments = argparse.ArgumentParser(prog=prog, description=description, epilog=epilog,
                                        formatter_class=argparse.RawDescriptionHelpFormatter)
    arguments.add_argument("--model", required=True, metavar="DIR",
                           help="a SavedModel version folder (savedmodels/NAME/3), or the folder of numbered "
                                "versions (savedmodels/NAME), whose newest complete version is used")
    arguments.add_argument("--input", metavar="FILE", help=f"UTF-8 {what}, one a line (default, or -: stdin)")
    arguments.add_argument("--output", metavar="FILE",
                           help="the answers, one a line; written whole when the command succeeds, else "
                                "left as it was (default, or -: stdout)")
    arguments.add_argument("--batch-size", type=positive, default=32, metavar="N",
                           help="lines a call of the export (default: 32; 1 when stdin is a terminal)")
    arguments.add_argument("--no-sort", action="store_true",
                           help=f"call the export on lines in their order; by default {WINDOW_BATCHES} batches' "
                                "lines are read at a time and batched by length (less padding), the answers "
                                "written in input order")
    return arguments


def epilog(doc):
    """--help's closing text: a command module's docstring from its
    "Output formats:" on, so the formats are written once."""
    return "Output formats:" + doc.partition("Output formats:")[2].rstrip()


def positive(text):
    """An int >= 1, for argparse: its message names the option."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def run(arguments, command, argv=None):
    """Parses `argv`, checks the files, runs `command(args)`; stops with the
    tasks' exit statuses: 2 (usage, the message naming the option) or 1
    (one line on stderr), never a traceback for a user's mistake."""
    # TensorFlow's C++ logs read the level when they log: after the import, this still quiets the run.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    args = arguments.parse_args(argv)
    try:
        lines.check_input(args.input)
        lines.check_output(args.output)
        command(args)
    except UsageError as error:
        arguments.error(str(error))
    except Failure as error:
        print(f"{arguments.prog}: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    except BrokenPipeError:  # the reader left (| head): stop quietly, as Python's docs advise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None
    except OSError as error:  # a full disk, a file gone mid-run: no traceback for those either
        print(f"{arguments.prog}: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None


def load(args, inputs, command):
    """The signatures of --model, checked to be `command`'s kind (its
    serving_default takes `inputs`); says on stderr which version a base
    folder gave."""
    folder, picked = servable.version_folder(args.model)
    if picked:
        print(f"{command}: {picked}", file=sys.stderr)
    signatures = servable.load_signatures(folder)
    servable.check_kind(signatures, folder, inputs, command)
    return folder, signatures


def serve(args, answer, width=1, parse=None):
    """Streams --input to --output: the non-blank lines of each window of
    `WINDOW_BATCHES` batches, sorted by length (unless --no-sort), go to
    `answer` a batch at a time (a list of requests -> a list with, for
    each, its `width` output lines), and the window's answers are written
    in input order; a blank line (whitespace only: the exports read it as
    empty) gets `width` blank lines without a call. `parse(text)` turns a
    line into a request, raising ValueError with the reason it cannot."""
    interactive = lines.interactive(args.input)  # each line answered as it is typed
    size = 1 if interactive else args.batch_size
    window = size if interactive or args.no_sort else size * WINDOW_BATCHES
    with lines.output_stream(args.output) as stream:
        for chunk in lines.batches(lines.read_lines(args.input), window):
            requests = [(number, text, parsed(args.input, number, text, parse))
                        for number, text in chunk if text.strip()]
            if not args.no_sort:
                requests.sort(key=lambda request: len(request[1]))  # stable: equal lengths keep their order
            answers, failures = {}, []
            for start in range(0, len(requests), size):
                batch = [(number, request) for number, _, request in requests[start:start + size]]
                try:
                    answers.update(zip((number for number, _ in batch), answered(args.input, batch, answer)))
                except Failure as failure:  # sorted batches: the window's first bad line is named
                    failures.append(failure)
            if failures:
                raise min(failures, key=lambda failure: failure.line)
            lines.write_lines(stream, [out for number, text in chunk
                                       for out in (answers[number] if text.strip() else [""] * width)])


def parsed(path, number, text, parse):
    if parse is None:
        return text
    try:
        return parse(text)
    except ValueError as error:
        raise Failure(f"{lines.input_name(path)} line {number}: {error}") from None


def answered(path, requests, answer):
    """`answer`'s outputs for [(line number, request)]; a request the graph
    refuses (an unknown label) is found by asking line by line, so the
    message names its line."""
    import tensorflow as tf

    if not requests:
        return []
    try:
        return answer([request for _, request in requests])
    except tf.errors.InvalidArgumentError as error:
        if len(requests) == 1:
            raise Failure(f"{lines.input_name(path)} line {requests[0][0]}: "
                          f"{servable.graph_error(error.message)}", line=requests[0][0]) from None
        for one in sorted(requests, key=lambda request: request[0]):  # the first bad line is named
            answered(path, [one], answer)
        refused = error
    except tf.errors.OpError as error:  # out of memory, ...: the batch, not a line
        refused = error
    numbers = [number for number, _ in requests]
    raise Failure(f"{lines.input_name(path)} {named_lines(numbers)}: {servable.graph_error(refused.message)}",
                  line=min(numbers))


def named_lines(numbers):
    """"lines 3-9" for consecutive line numbers, else "lines 3, 17, 40" (at
    most 5 named): a batch of lines sorted by length is rarely consecutive."""
    numbers = sorted(numbers)
    if numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"lines {numbers[0]}-{numbers[-1]}"
    more = f" and {len(numbers) - 5} more" if len(numbers) > 5 else ""
    return "lines " + ", ".join(map(str, numbers[:5])) + more


def number(value):
    """A score or probability as the commands print it."""
    return f"{float(value):.4f}"
