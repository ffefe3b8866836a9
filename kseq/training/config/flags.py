"""How an option's name is spelled on the command line."""


def flag(name):
    """Spells option `name` as the command line does.

    Args:
        name: the option's name, with "_".

    Returns:
        "--" and the name with "-", e.g. "--max-length".
    """
    return "--" + name.replace("_", "-")
