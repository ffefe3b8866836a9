"""kseq-translate: a source sentence a line in, its translation out.

Named for the task, as `kseq-train translate` and the export
folder (savedmodels/translate) are.

Output formats:

- default: the translation (`serving_default`);
- `--scores`: `score<TAB>translation`, the search's score (a beam
  search's length-penalised log-probability, else the summed token
  log-probabilities), 4 decimals;
- `--n-best K`: K lines an input, best first (the `n_best` signature), as
  OpenNMT-py's `-n_best` writes them: input i's hypotheses are output
  lines i*K+1 .. i*K+K; with `--scores`, `score<TAB>hypothesis`;
- `--score-pairs`: input lines are `source<TAB>target`, each answered with
  the target's log-probability given the source (the `score` signature),
  to rank or filter given translations.

A blank input line gets a blank line (K with `--n-best K`), in every format.
"""

from kseq.cli import command, servable
from kseq.cli.errors import UsageError

NAME = "kseq-translate"


def main(argv=None):
    """The installed command's entry point."""
    command.run(parser(), translate, argv)


def parser():
    arguments = command.parser(NAME, "Translate lines with a kseq translator export.", "source sentences",
                               epilog=command.epilog(__doc__))
    arguments.add_argument("--n-best", type=command.positive, default=1, metavar="K",
                           help="K hypotheses an input, best first, K lines (default: 1)")
    arguments.add_argument("--scores", action="store_true", help="prefix each line with its score and a tab")
    arguments.add_argument("--score-pairs", action="store_true",
                           help="read source<TAB>target lines; print each target's log-probability")
    return arguments


def translate(args):
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
    """Signature `name`, which `option` needs, with `outputs`; else a usage
    error (an export made before it was served, or with n_best=0)."""
    if name not in signatures:
        raise UsageError(f"{option}: --model {folder} has no {name} signature (re-export it with "
                         f"kseq.export.export_translator{', n_best>=2' if name == 'n_best' else ''})")
    missing = [out for out in outputs if servable.output_shape(signatures[name], out) is None]
    if missing:
        raise UsageError(f"{option}: --model {folder}'s {name} signature has no {', '.join(missing)} output "
                         "(re-export it with kseq.export.export_translator)")
    return signatures[name]


def check_width(signature, wanted):
    width = servable.output_shape(signature, "translations")[-1]
    if width is not None and wanted > width:
        raise UsageError(f"--n-best {wanted}: this export gives at most {width} hypotheses an input "
                         f"(exported with n_best={width}; re-export with n_best={wanted})")


def shown(text, score=None):
    """`score<TAB>text`, or the text alone when there is no score."""
    text = servable.text(text)
    return text if score is None else f"{command.number(score)}\t{text}"


def best(signature, with_scores):
    def answer(sources):
        out = servable.call(signature, source=sources)
        scores = out["score"] if with_scores else [None] * len(sources)
        return [[shown(text, score)] for text, score in zip(out["translation"], scores)]

    return answer


def n_best(signature, k, with_scores):
    def answer(sources):
        out = servable.call(signature, source=sources)
        return [[shown(text, score if with_scores else None) for text, score in zip(texts[:k], scores[:k])]
                for texts, scores in zip(out["translations"], out["scores"])]

    return answer


def pair(text):
    """A `source<TAB>target` line -> (source, target)."""
    fields = text.split("\t")
    if len(fields) != 2:
        raise ValueError(f"--score-pairs takes source<TAB>target lines; this one has "
                         f"{'no tab' if len(fields) == 1 else f'{len(fields) - 1} tabs'}")
    return tuple(fields)


def pair_scores(signature):
    def answer(pairs):
        sources, targets = zip(*pairs)
        out = servable.call(signature, source=list(sources), target=list(targets))
        return [[command.number(value)] for value in out["log_probability"]]

    return answer


if __name__ == "__main__":
    main()
