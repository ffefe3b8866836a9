"""Optional dependencies (pyproject's extras): whether one is installed, and
one warning a process naming what is left out without it and how to add it."""

import importlib.util
import warnings

MODULES = {"plots": "matplotlib", "serving": "tensorflow_serving"}
_warned = set()


def missing(extra, left_out):
    """Tells whether an optional dependency is missing, warning once per extra.

    Args:
        extra: the extra's name in pyproject: "plots" or "serving".
        left_out: what is left out without it, the warning's opening words.

    Returns:
        True where `extra`'s module cannot be imported. The first time for
        each extra it also warns "`left_out`: ... (pip install 'kseq[extra]')".
    """
    if importlib.util.find_spec(MODULES[extra]) is not None:
        return False
    if extra not in _warned:
        _warned.add(extra)
        warnings.warn(f"{left_out}: {MODULES[extra]} is not installed (pip install 'kseq[{extra}]')", stacklevel=3)
    return True
