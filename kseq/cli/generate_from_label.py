"""kseq-generate-from-label: a label a line in, a text written for it out.

Named for what the user gives, a label, rather than the model class
(ConditionedGenerator): "conditioned" says nothing to someone holding a
file of labels, and a generator of feature vectors, which this command
does not serve, is conditioned too.

Output formats:

- the text the export writes for the label (`serving_default`'s `text`);
  labels are matched as the export was made with them (after the
  whitespace and Unicode normalization every export applies);
- a blank line gets a blank line; an unknown label stops the command
  with its line number and the labels the export knows.
"""

from kseq.cli import command, servable

NAME = "kseq-generate-from-label"


def main(argv=None):
    """Runs kseq-generate-from-label, the installed command's entry point.

    Args:
        argv: the command-line arguments; None (default) reads `sys.argv`.
    """
    command.run(parser(), generate_from_label, argv)


def parser():
    return command.parser(NAME, "Write texts for labels with a kseq conditioned generator export.", "labels",
                          epilog=command.epilog(__doc__))


def generate_from_label(args):
    """Writes a text for each of --input's labels, one a line.

    Args:
        args: the parsed arguments.
    """
    _, signatures = command.load(args, ["label"], NAME)
    signature = signatures["serving_default"]

    def answer(labels):
        return [[servable.text(text)] for text in servable.call(signature, label=labels)["text"]]

    command.serve(args, answer)


if __name__ == "__main__":
    main()
