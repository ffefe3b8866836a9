"""What every command shares: its options, its exit statuses and the loop
that turns batches of input lines into output lines."""

import argparse
import os
import sys

from kseq.cli import lines, servable
from kseq.cli.errors import Failure, UsageError
from kseq.cli.quiet_start import probe_gpus_quietly, quiet_tensorflow_start
from kseq.errors import CommandParser

# Lines read at a time, in batches: sorted by length, a window's batches
# pad their lines to similar lengths; more batches sort better and hold
# back the first answers longer.
WINDOW_BATCHES = 64


def parser(prog, description, what, epilog=None):
    """Builds the parser of the options every command takes.

    Args:
        prog: the command's name, as usage and messages show it.
        description: --help's opening text.
        what: what one input line holds, for --input's help.
        epilog: --help's closing text; None (default) for none.

    Returns:
        An `argparse.ArgumentParser` with --model, --input, --output,
        --batch-size and --no-sort; a command adds its own options.
    """
    arguments = CommandParser(prog=prog, description=description, epilog=epilog,
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
    """Gives --help's closing text: a command module's docstring from its "Output formats:" on.

    The formats are so written once.

    Args:
        doc: the command module's docstring.

    Returns:
        The text from "Output formats:" to the end, trailing space removed.
    """
    return "Output formats:" + doc.partition("Output formats:")[2].rstrip()


def positive(text):
    """Parses an int >= 1, as an argparse `type` (argparse's message names the option).

    Args:
        text: the option's value as typed.

    Returns:
        The value as an int.

    Raises:
        argparse.ArgumentTypeError: `text` is not an integer, or is below 1.
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def run(arguments, command, argv=None):
    """Parses `argv`, checks the files and runs `command(args)`.

    Stops with the tasks' exit statuses: 2 (usage, the message naming the
    option) or 1 (one line on stderr), never a traceback for a user's
    mistake; 130 on Ctrl-C.

    Args:
        arguments: the command's `argparse.ArgumentParser` (see `parser`).
        command: a function of the parsed arguments that does the work.
        argv: the arguments; None (default) reads `sys.argv`.

    Raises:
        SystemExit: with status 2, 1 or 130 when the command stops early.
    """
    args = arguments.parse_args(argv)
    try:
        lines.check_input(args.input)
        lines.check_output(args.output)
        with quiet_tensorflow_start():
            import tensorflow  # noqa: F401  (the first import, quietly; --help and usage errors need none)
        probe_gpus_quietly()
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
    """Loads the signatures of --model, checked to be `command`'s kind.

    Says on stderr which version a base folder gave.

    Args:
        args: the parsed arguments; `args.model` is the export's folder.
        inputs: the input names `command`'s exports take in serving_default.
        command: the command's name, for the messages.

    Returns:
        (version folder, {signature name: concrete function}).

    Raises:
        Failure: the model cannot be loaded.
        UsageError: the export is of another kind.
    """
    folder, picked = servable.version_folder(args.model)
    if picked:
        print(f"{command}: {picked}", file=sys.stderr)
    signatures = servable.load_signatures(folder)
    servable.check_kind(signatures, folder, inputs, command)
    return folder, signatures


def serve(args, answer, width=1, parse=None):
    """Streams --input to --output, answering a batch of lines at a time.

    The non-blank lines of each window of `WINDOW_BATCHES` batches, sorted
    by length (unless --no-sort), go to `answer` a batch at a time, and the
    window's answers are written in input order; a blank line (whitespace
    only: the exports read it as empty) gets `width` blank lines without a
    call.

    Args:
        args: the parsed arguments (--input, --output, --batch-size, --no-sort).
        answer: a function of a list of requests giving, for each, a list of
            its `width` output lines.
        width: output lines per input line. Default 1.
        parse: a function turning a line's text into a request, raising
            ValueError with the reason it cannot; None (default) passes the
            text itself.

    Raises:
        Failure: a line cannot be read, parsed or answered; the first such
            line of the window is named.
    """
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
    """Turns one input line into a request with `parse`.

    Args:
        path: the --input path, for the message.
        number: the line's number, from 1.
        text: the line's text.
        parse: a function of the text raising ValueError, or None.

    Returns:
        `parse(text)`, or `text` when `parse` is None.

    Raises:
        Failure: `parse` raised ValueError; the message names the line.
    """
    if parse is None:
        return text
    try:
        return parse(text)
    except ValueError as error:
        raise Failure(f"{lines.input_name(path)} line {number}: {error}") from None


def answered(path, requests, answer):
    """Calls `answer` on a batch of requests, naming the line of any the graph refuses.

    A request the graph refuses (an unknown label) is found by asking line
    by line, so the message names its line.

    Args:
        path: the --input path, for the message.
        requests: a list of (line number, request).
        answer: a function of a list of requests giving a list of answers.

    Returns:
        `answer`'s outputs, one for each request ([] for no requests).

    Raises:
        Failure: the graph refused a request (naming its line) or the batch
            (naming its lines).
    """
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
    """Names a batch's line numbers for a message.

    A batch of lines sorted by length is rarely consecutive, so at most 5
    are named.

    Args:
        numbers: the line numbers, not empty.

    Returns:
        "lines 3-9" for consecutive numbers, else "lines 3, 17, 40" (with
        "and N more" past 5).
    """
    numbers = sorted(numbers)
    if numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"lines {numbers[0]}-{numbers[-1]}"
    more = f" and {len(numbers) - 5} more" if len(numbers) > 5 else ""
    return "lines " + ", ".join(map(str, numbers[:5])) + more


def number(value):
    """Formats a score or probability as the commands print it.

    Args:
        value: a number.

    Returns:
        The value with 4 decimals, as a string.
    """
    return f"{float(value):.4f}"
