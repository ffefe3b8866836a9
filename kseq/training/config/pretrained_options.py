"""`kseq-train translate --pretrained FOLDER`'s checks beside the other options:
the folder's files (`kseq.pretrained.check_marian_folder`, no TensorFlow)
and the options that would change the pretrained model's architecture."""

from kseq.errors import UsageError

# Options that shape a translator's weights or vocabulary, which a pretrained
# checkpoint's config.json and vocabularies set: given with --pretrained, a
# usage error. (--arch transformer is what a checkpoint is; --dropout, the
# learning rate and the data options stay the user's.)
ARCHITECTURE_OPTIONS = ("attention", "cell", "input_feeding", "num_layers", "d_model", "num_heads", "ff_dim",
                        "embed_dim", "units", "bidirectional", "peeky", "reverse_source", "embedding_stddev",
                        "vocab_size", "max_vocab_size", "tokenizer")


def pretrained_problems(options):
    """The problems of `--pretrained` with the other options (empty without it).

    Args:
        options: the translate task's options.

    Returns:
        A list of one-line messages.
    """
    if not getattr(options, "pretrained", None):
        return []
    flag = f"--pretrained {options.pretrained}"
    if options.arch != "transformer":
        return [f"{flag}: a Marian checkpoint is a Transformer; --arch {options.arch} cannot take its weights"]
    if options.init_from:
        return [f"{flag}: --init-from gives the starting weights too; give one of them"]
    given = [name for name in ARCHITECTURE_OPTIONS if name in options.options_given]
    if given:
        option = "--" + given[0].replace("_", "-")
        return [f"{option} would change the pretrained model's architecture, which the checkpoint's config.json "
                f"and vocabularies set: drop {option}, or {flag}"]
    return []


def checkpoint_problem(name):
    """The message when `--pretrained NAME` is no Marian checkpoint kseq reads
    (`kseq.pretrained.check_marian_folder`: its files, not its weights), else None.

    Args:
        name: a folder, or a Hub name.

    Returns:
        A one-line message, or None.
    """
    from kseq.pretrained.checks import check_marian_folder

    try:
        check_marian_folder(name)
    except UsageError as error:
        return f"--pretrained {name}: {error}"
    return None
