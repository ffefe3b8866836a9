"""Command-line tools over kseq's exports: one line in, one line out.

Installed by pip (`[project.scripts]`), one command a kind of export, each
named after what it does for the user rather than after the model class:

- `kseq-translate` (kseq.cli.translate): source sentence -> translation;
  `--n-best K`, `--scores`, `--score-pairs`;
- `kseq-generate` (kseq.cli.generate): prompt -> the language model's
  continuation;
- `kseq-classify` (kseq.cli.classify): text -> label; `--scores`,
  `--probabilities`;
- `kseq-generate-from-label` (kseq.cli.generate_from_label): label -> a
  text the conditioned generator writes for it.

Each reads UTF-8 lines from stdin or `--input`, calls the export's
signature on `--batch-size` lines at a time and writes one answer a line
(K with `--n-best K`), in order, to stdout or `--output` (renamed into
place when complete). A blank line gets a blank line. Numbers come before
the text, tab-separated: `score<TAB>text`. `--model` is a SavedModel
version folder or the folder of numbered versions (the newest complete
one). Exit status, as the tasks': 2 for a command line the export or
the files cannot serve (argparse's usage error, naming the option), 1 for
input or a run that fails (one line naming the file and line), 0 otherwise.

Only TensorFlow and tensorflow_text's ops serve the requests: the graph is
the one TF Serving runs, so the commands answer what a server would.
TensorFlow loads once the command line is parsed (`--help` and a usage
error need none of it), with the commands' quiet start
(kseq.cli.quiet_start): its start-up lines held to TF_CPP_MIN_LOG_LEVEL,
2 unless the user set one.

Training is `kseq-train TASK` (kseq.cli.train). `kseq.cli.recipes.start` is
what every recipe script (recipes/*.py) does first: its three flags, checked
before anything is written, and TensorFlow set up as kseq-train sets it.
"""
