"""kseq-generate: a prompt a line in, the language model's continuation out.

"generate" as in `model.generate` and the language model task: the
export continues text; the conditioned generator, which writes from a
label, is kseq-generate-from-label.

Output formats:

- the continuation only, without the prompt (`serving_default`'s
  `continuation`); a blank prompt gets a blank line.

A greedy or beam export answers a prompt the same in any batch. A
sampling export draws by (seed, step) over the whole batch, so a prompt's
continuation depends on its row: the same --batch-size gives the same
output again, another size other samples.
"""

from kseq.cli import command, servable

NAME = "kseq-generate"


def main(argv=None):
    """Runs kseq-generate, the installed command's entry point.

    Args:
        argv: the command-line arguments; None (default) reads `sys.argv`.
    """
    command.run(parser(), generate, argv)


def parser():
    return command.parser(NAME, "Continue prompts with a kseq language model export.", "prompts",
                          epilog=command.epilog(__doc__))


def generate(args):
    """Continues --input's prompts, one continuation a line.

    Args:
        args: the parsed arguments.
    """
    _, signatures = command.load(args, ["prompt"], NAME)
    signature = signatures["serving_default"]

    def answer(prompts):
        return [[servable.text(text)] for text in servable.call(signature, prompt=prompts)["continuation"]]

    command.serve(args, answer)


if __name__ == "__main__":
    main()
