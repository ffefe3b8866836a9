"""Command-line tools over kseq's exports: lines in, lines out.

`kseq-translate`, `kseq-generate`, `kseq-classify` and
`kseq-generate-from-label` (installed by pip, `[project.scripts]`) read one
request a line from stdin or `--input`, call the export's signatures in
batches of `--batch-size`, and write one answer a line to stdout or
`--output` (written whole or not at all). `--model` is a SavedModel version
folder or the folder of numbered versions (the newest is used). Errors are
one line on stderr: 2 for a bad command line, 1 for anything else, as the
recipes exit.
"""
