"""kseq-translate: a source sentence a line in, its translation out.

Named for the task, as `kseq-train translate` and the export
folder (savedmodels/translate) are.

Output formats:

- default: the translation (`serving_default`);
- `--scores`: `score<TAB>translation`, the search's score (a beam
  search's length-penalised log-probability, else the summed token
  log-probabilities), 4 decimals;
- `--n-best K`: K lines an input (the `n_best` signature), as OpenNMT-py's
  `-n_best` writes them: input i's hypotheses are output lines i*K+1 ..
  i*K+K, the first the translation the default prints (the same search,
  the same score), then the export's other hypotheses, best first; with
  `--scores`, `score<TAB>hypothesis`, every score on one scale;
- `--score-pairs`: input lines are `source<TAB>target`, each answered with
  the target's log-probability given the source (the `score` signature),
  to rank or filter given translations.

A blank input line gets a blank line (K with `--n-best K`), in every format.
"""

from kseq.cli import command, servable
from kseq.cli.errors import UsageError

NAME = "kseq-translate"


def main(argv=None):
    """Runs kseq-translate, the installed command's entry point.

    Args:
        argv: the command-line arguments; None (default) reads `sys.argv`.
    """
    command.run(parser(), translate, argv)


def parser():
    arguments = command.parser(NAME, "Translate lines with a kseq translator export.", "source sentences",
                               epilog=command.epilog(__doc__))
    arguments.add_argument("--n-best", type=command.positive, default=1, metavar="K",
                           help="K hypotheses an input, K lines: the translation, then the best others (default: 1)")
    arguments.add_argument("--scores", action="store_true", help="prefix each line with its score and a tab")
    arguments.add_argument("--score-pairs", action="store_true",
                           help="read source<TAB>target lines; print each target's log-probability")
    return arguments


def translate(args):
    """Translates --input's lines in the format the options ask for.

    Args:
        args: the parsed arguments.

    Raises:
        UsageError: the options conflict or the export lacks what they need.
    """
    if args.score_pairs and (args.n_best > 1 or args.scores):
        raise UsageError("--score-pairs prints one log-probability a pair: it takes neither --n-best nor --scores")
    folder, signatures = command.load(args, ["source"], NAME)
    if args.score_pairs:
        command.serve(args, pair_scores(needed(signatures, "score", folder, "--score-pairs", "log_probability")),
                      parse=pair)
    elif args.n_best > 1:
        signature = needed(signatures, "n_best", folder, f"--n-best {args.n_best}", "translations")
        check_width(signature, args.n_best)
        command.serve(args, n_best(signature, args.n_best, args.scores), width=args.n_best)
    else:
        outputs = ("translation", "score") if args.scores else ("translation",)
        command.serve(args, best(needed(signatures, "serving_default", folder, "--scores", *outputs), args.scores))


def needed(signatures, name, folder, option, *outputs):
    """Gives signature `name`, which `option` needs, checked to have `outputs`.

    Args:
        signatures: {signature name: concrete function}.
        name: the signature's name, such as "n_best".
        folder: the SavedModel folder, for the message.
        option: the option that needs it, for the message.
        *outputs: the output names it must have.

    Returns:
        The signature's concrete function.

    Raises:
        UsageError: the signature or an output is missing (an export made
            before it was served, or with n_best=0).
    """
    if name not in signatures:
        raise UsageError(f"{option}: --model {folder} has no {name} signature (re-export it with "
                         f"kseq.export.export_translator{', n_best>=2' if name == 'n_best' else ''})")
    missing = [out for out in outputs if servable.output_shape(signatures[name], out) is None]
    if missing:
        raise UsageError(f"{option}: --model {folder}'s {name} signature has no {', '.join(missing)} output "
                         "(re-export it with kseq.export.export_translator)")
    return signatures[name]


def check_width(signature, wanted):
    """Checks that the n_best signature gives at least `wanted` hypotheses.

    Args:
        signature: the n_best signature.
        wanted: the --n-best value.

    Raises:
        UsageError: the export was made with a smaller n_best.
    """
    width = servable.output_shape(signature, "translations")[-1]
    if width is not None and wanted > width:
        raise UsageError(f"--n-best {wanted}: this export gives at most {width} hypotheses an input "
                         f"(exported with n_best={width}; re-export with n_best={wanted})")


def shown(text, score=None):
    """Formats one output line: `score<TAB>text`, or the text alone.

    Args:
        text: the translation, bytes.
        score: its score; None (default) for the text alone.

    Returns:
        The line, a str.
    """
    text = servable.text(text)
    return text if score is None else f"{command.number(score)}\t{text}"


def best(signature, with_scores):
    """Makes the `answer` function for the best translation of each source.

    Args:
        signature: serving_default.
        with_scores: prefix each translation with its score.

    Returns:
        A function of a list of sources giving, for each, a one-line list.
    """
    def answer(sources):
        out = servable.call(signature, source=sources)
        scores = out["score"] if with_scores else [None] * len(sources)
        return [[shown(text, score)] for text, score in zip(out["translation"], scores)]

    return answer


def n_best(signature, k, with_scores):
    """Makes the `answer` function for the `k` best translations of each source.

    Args:
        signature: the n_best signature.
        k: hypotheses an input.
        with_scores: prefix each hypothesis with its score.

    Returns:
        A function of a list of sources giving, for each, its `k` lines: the
        translation `serving_default` gives, then the best others.
    """
    def answer(sources):
        out = servable.call(signature, source=sources)
        return [[shown(text, score if with_scores else None) for text, score in zip(texts[:k], scores[:k])]
                for texts, scores in zip(out["translations"], out["scores"])]

    return answer


def pair(text):
    """Splits a `source<TAB>target` line.

    Args:
        text: the line.

    Returns:
        (source, target).

    Raises:
        ValueError: the line does not hold exactly one tab.
    """
    fields = text.split("\t")
    if len(fields) != 2:
        raise ValueError(f"--score-pairs takes source<TAB>target lines; this one has "
                         f"{'no tab' if len(fields) == 1 else f'{len(fields) - 1} tabs'}")
    return tuple(fields)


def pair_scores(signature):
    """Makes the `answer` function scoring (source, target) pairs.

    Args:
        signature: the score signature.

    Returns:
        A function of a list of (source, target) giving, for each, a one-line
        list: the target's log-probability given the source.
    """
    def answer(pairs):
        sources, targets = zip(*pairs)
        out = servable.call(signature, source=list(sources), target=list(targets))
        return [[command.number(value)] for value in out["log_probability"]]

    return answer


if __name__ == "__main__":
    main()
