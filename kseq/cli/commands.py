"""The commands: each turns a batch of input lines into output lines."""

from kseq.cli import serving


def translate(argv=None):
    """kseq-translate: a line of source text in, its translation out.
    `--n-best K`: K lines an input, best first; `--scores`: each line
    starts with the hypothesis score (length-normalized log-probability)
    and a tab."""
    arguments = serving.parser("Translate lines with a kseq translator export.", "source sentences")
    arguments.add_argument("--n-best", type=serving.positive, default=1, help="hypotheses an input, best first")
    arguments.add_argument("--scores", action="store_true", help="prefix each output with its score and a tab")
    args = arguments.parse_args(argv)
    signatures = serving.load_signatures(args.model, "translator", ["source"])
    width = n_best_width(signatures, args.n_best, args.model)
    answers = []
    for batch in serving.batches(serving.read_lines(args.input), args.batch_size):
        if args.n_best > 1:
            out = serving.call(signatures["n_best"], source=batch)
            for texts, scores in zip(out["translations"][:, : min(args.n_best, width)], out["scores"]):
                answers += [shown(serving.text(t), s, args.scores) for t, s in zip(texts, scores)]
        else:
            out = serving.call(signatures["serving_default"], source=batch)
            answers += [shown(serving.text(t), s, args.scores) for t, s in zip(out["translation"], out["score"])]
    serving.write_lines(args.output, answers)


def n_best_width(signatures, wanted, model):
    """The export's n-best width; exits if it cannot give `wanted`."""
    if wanted == 1:
        return 1
    if "n_best" not in signatures:
        raise SystemExit(f"--model {model}: this export has no n_best signature (export it with n_best=K)")
    width = signatures["n_best"].structured_outputs["translations"].shape[-1]
    if width is not None and wanted > width:
        raise SystemExit(f"--n-best {wanted}: the export gives at most {width} hypotheses")
    return width or wanted


def shown(text, score, with_score):
    return f"{float(score):.4f}\t{text}" if with_score else text


def generate(argv=None):
    """kseq-generate: a prompt in, the language model's continuation out."""
    args = serving.parser("Continue prompts with a kseq language model export.", "prompts").parse_args(argv)
    signature = serving.load_signatures(args.model, "language model", ["prompt"])["serving_default"]
    answers = [serving.text(t) for batch in serving.batches(serving.read_lines(args.input), args.batch_size)
               for t in serving.call(signature, prompt=batch)["continuation"]]
    serving.write_lines(args.output, answers)


def classify(argv=None):
    """kseq-classify: a text in, its label out; `--scores`: the label's
    probability first, and a tab."""
    arguments = serving.parser("Label texts with a kseq classifier export.", "texts")
    arguments.add_argument("--scores", action="store_true", help="prefix each label with its probability and a tab")
    args = arguments.parse_args(argv)
    signature = serving.load_signatures(args.model, "classifier", ["text"])["serving_default"]
    answers = []
    for batch in serving.batches(serving.read_lines(args.input), args.batch_size):
        out = serving.call(signature, text=batch)
        for label, probabilities in zip(out["label"], out["probabilities"]):
            answers.append(shown(serving.text(label), probabilities.max(), args.scores))
    serving.write_lines(args.output, answers)


def generate_from_label(argv=None):
    """kseq-generate-from-label: a label in, a text the conditioned generator writes for it out."""
    import tensorflow as tf

    args = serving.parser("Write texts for labels with a kseq conditioned generator export.",
                          "labels").parse_args(argv)
    signature = serving.load_signatures(args.model, "conditioned generator (of labels)", ["label"])["serving_default"]
    lines = serving.read_lines(args.input)
    answers = []
    for batch in serving.batches(lines, args.batch_size):
        try:
            answers += [serving.text(t) for t in serving.call(signature, label=batch)["text"]]
        except tf.errors.InvalidArgumentError as error:  # an unknown label fails in the graph, naming the known
            found = [line for line in error.message.splitlines() if line.startswith("assertion failed:")]
            # TensorFlow prints an Assert's data as "[text] [values]".
            message = found[0].removeprefix("assertion failed: ").replace("] [", " ").strip("[]") if found \
                else error.message.splitlines()[0]
            raise SystemExit(f"{args.input or 'stdin'}: {message}") from None
    serving.write_lines(args.output, answers)
