"""kseq.training's layout: sub-packages by concept, no import cycle among
kseq's modules, the tasks on public names only, and one import path for
each module."""

import ast
import importlib
import os
import sys
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, "kseq")


def module_imports():
    """{module: the kseq modules its top level imports} (imports inside functions are lazy, and left out)."""
    files = {}
    for folder, _, names in os.walk(PACKAGE):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".").removesuffix(".__init__")
                files[dotted] = path
    edges = {}
    for module, path in files.items():
        targets = set()
        for node in ast.parse(open(path, encoding="utf-8").read()).body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kseq"):
                targets |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files else node.module
                            for a in node.names}
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name.startswith("kseq")}
        # A package importing its own modules is how it names them, not a dependency.
        edges[module] = {t for t in targets if t in files and t != module and not t.startswith(module + ".")}
    return edges


def test_no_module_of_kseq_imports_itself_back():
    edges, cycles = module_imports(), []

    def visit(module, path):
        for target in edges[module]:
            if target in path:
                cycles.append(path[path.index(target):] + [target])
            elif target not in done:
                visit(target, path + [target])
        done.add(module)

    done = set()
    for module in edges:
        if module not in done:
            visit(module, [module])
    assert not cycles, cycles[:3]


def test_the_sub_packages_depend_one_way():
    order = ["progress", "reporting", "objectives", "devices", "checkpoints", "config", "scoring", "loop",
             "pipelines", "vocabulary", "task"]
    for module, targets in module_imports().items():
        if not module.startswith("kseq.training."):
            continue
        mine = module.split(".")[2]
        for target in targets:
            if target.startswith("kseq.training."):
                theirs = target.split(".")[2]
                assert mine == theirs or order.index(theirs) < order.index(mine), f"{module} imports {target}"


def test_tasks_import_the_training_sub_packages_public_names_only():
    tasks = os.path.join(PACKAGE, "tasks")
    for name in os.listdir(tasks):
        if name.endswith(".py"):
            tree = ast.parse(open(os.path.join(tasks, name), encoding="utf-8").read())
            deep = [node.module for node in tree.body if isinstance(node, ast.ImportFrom)
                    and (node.module or "").startswith("kseq.training.") and node.module.count(".") > 2]
            assert not deep, f"kseq/tasks/{name} imports from {deep}"


def test_each_module_has_one_import_path():
    """Every module of kseq is known by its own name only (no alias in
    sys.modules, as the modules' paths before the sub-packages were), and
    kseq.training offers its sub-packages, not their names again."""
    import kseq  # noqa: F401 (imports every sub-package)

    aliases = [name for name, module in sys.modules.items()
               if name.startswith("kseq.") and getattr(module, "__name__", name) != name]
    assert not aliases
    assert all(isinstance(getattr(kseq.training, name), types.ModuleType) for name in kseq.training.__all__)
    for old in ("losses", "options", "evaluation", "warm_start", "cadenced_fit", "xla", "recipe", "epoch_fit"):
        with pytest.raises(ImportError):
            importlib.import_module(f"kseq.training.{old}")
