"""What the task tests share: task runs made once a session, and the
worker's TensorFlow-only serving process (tests/conftest.py's `tf_only`).

A task run (training, decoding, export) costs a minute or more of CPU, and
its tests only read its folder and its returned metrics. Each test worker
used to make its own copy of a module's run whenever work stealing split
the module between the two workers (each module-scoped fixture is made once
a worker); `made_once` has the first worker to ask make it, while the other
waits, and both read the same folder (`support.made_once`).
"""

import functools

import pytest

import support


@pytest.fixture(scope="session")
def made_once(tmp_path_factory):
    """made_once(name, make) -> (folder, result): `support.made_once`, once a session."""
    return functools.partial(support.made_once, tmp_path_factory)
