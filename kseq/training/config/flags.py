"""How an option's name is spelled on the command line."""


def flag(name):
    """The command-line spelling of option `name`."""
    return "--" + name.replace("_", "-")
