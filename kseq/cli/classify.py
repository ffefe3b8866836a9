"""kseq-classify: a text a line in, its label out.

Named for the task, as `kseq-train classify` is.

Output formats:

- default: the most probable label;
- `--scores`: `probability<TAB>label`, the label's probability;
- `--probabilities`: every class's probability, in class id order (the
  order of the labels the export was made with), then the label, all
  tab-separated: `p0<TAB>p1<TAB>...<TAB>label`.

A blank text gets a blank line in every format.
"""

from kseq.cli import command, servable

NAME = "kseq-classify"


def main(argv=None):
    """Runs kseq-classify, the installed command's entry point.

    Args:
        argv: the command-line arguments; None (default) reads `sys.argv`.
    """
    command.run(parser(), classify, argv)


def parser():
    arguments = command.parser(NAME, "Label texts with a kseq classifier export.", "texts",
                               epilog=command.epilog(__doc__))
    shown = arguments.add_mutually_exclusive_group()
    shown.add_argument("--scores", action="store_true", help="prefix each label with its probability and a tab")
    shown.add_argument("--probabilities", action="store_true",
                       help="prefix each label with every class's probability, tab-separated")
    return arguments


def classify(args):
    """Labels --input's lines in the format the options ask for.

    Args:
        args: the parsed arguments.
    """
    _, signatures = command.load(args, ["text"], NAME)
    signature = signatures["serving_default"]

    def answer(texts):
        out = servable.call(signature, text=texts)
        return [[shown(label, probabilities, class_id, args)]
                for label, probabilities, class_id in zip(out["label"], out["probabilities"], out["class_id"])]

    command.serve(args, answer)


def shown(label, probabilities, class_id, args):
    """Formats one output line: the label, after the probabilities the options ask for.

    Args:
        label: the label, bytes.
        probabilities: (V,) every class's probability, V the classes.
        class_id: the label's class id.
        args: the parsed arguments (--scores, --probabilities).

    Returns:
        The tab-separated line, a str.
    """
    numbers = list(probabilities) if args.probabilities else [probabilities[class_id]] if args.scores else []
    return "\t".join([command.number(p) for p in numbers] + [servable.text(label)])


if __name__ == "__main__":
    main()
