"""README's examples run as written."""

import contextlib
import io
import os
import random
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme_block(heading):
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = text.split(f"## {heading}", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.e2e
@pytest.mark.long
def test_ten_line_example_runs_and_learns(tmp_path, monkeypatch):
    code = readme_block("In ten lines")
    assert len(code.strip().splitlines()) <= 12
    monkeypatch.chdir(tmp_path)
    random.seed(0)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "README.md", "exec"), {})
    assert "sarek" in printed.getvalue() and "ecneuqes" in printed.getvalue()
    assert (tmp_path / "savedmodels" / "reverse_demo" / "1" / "saved_model.pb").exists()


def test_two_commands_match_ci():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    commands = re.findall(r"```bash\n(.*?)\n```", text.split("## In ten lines")[0], re.S)
    assert len(commands) == 2
    setup, tests = commands
    ci = open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8").read()
    install = setup.split(" && .venv/bin/kseq-train ")[0]
    assert install in ci and tests in ci


def test_readme_stays_a_manual():
    """Under 300 lines: the history of figures belongs in benchmarks/RESULTS.md."""
    lines = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read().splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines"


def test_library_code_names_a_decision_s_benchmark_not_its_day_or_issue():
    dated = re.compile(r"\b20\d\d-\d\d-\d\d\b|\bissues? \d+|\bissue figures\b", re.I)
    found = []
    for folder, _, names in os.walk(os.path.join(ROOT, "kseq")):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                for number, line in enumerate(open(path, encoding="utf-8"), 1):
                    if dated.search(line) and ">>>" not in line:
                        found.append(f"{os.path.relpath(path, ROOT)}:{number}: {line.strip()}")
    assert not found, found[:5]
