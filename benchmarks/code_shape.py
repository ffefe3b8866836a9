"""The shape of kseq's code, as a newcomer meets it: per task module its lines
and kseq imports; where options are declared and how; how many import paths
lead to each public name; files in benchmarks/ and tests/ by folder; the
import graph between kseq's folders (imports that run back up the layers,
cycles); functions over 60 lines. Reads the files as text (ast) and imports
kseq once to find the modules and aliases a user can import.

    .venv/bin/python benchmarks/code_shape.py                 # this checkout
    .venv/bin/python benchmarks/code_shape.py --root /tmp/old --json /tmp/old.json
"""

import argparse
import ast
import collections
import importlib
import json
import os
import pkgutil
import subprocess
import sys

# The layers from the bottom, as docs/DESIGN.md draws them: a folder may
# import its own and those before it. data sits beside layers (the models
# never need it; the export puts tokenizers in the graph).
# kseq/__init__.py, the public facade, sits on top; the other modules at the
# package's root (special ids, validation, compat) at the bottom.
# kseq.training's sub-packages are layers of their own, in the order
# tests/training/test_layout.py holds.
TRAINING = ["progress", "reporting", "objectives", "devices", "checkpoints", "config", "scoring", "loop", "recipe"]
LAYERS = (["_private", "layers", "decoding", "data", "models", "export"] + [f"training.{name}" for name in TRAINING]
          + ["training", "tasks", "cli", "kseq"])


def python_files(root, folder):
    for path, _, names in os.walk(os.path.join(root, folder)):
        for name in sorted(names):
            if name.endswith(".py"):
                yield os.path.join(path, name)


def module_name(root, path):
    return os.path.relpath(path, root)[:-3].replace(os.sep, ".").removesuffix(".__init__")


def kseq_imports(tree, module_path, top_level_only=False):
    """The kseq modules (or module.name) a file imports."""
    nodes = tree.body if top_level_only else ast.walk(tree)
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kseq"):
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("kseq")}
    return found


def folder_of(module):
    parts = module.split(".")
    if len(parts) < 2:
        return "kseq"
    name = parts[1]
    if name == "training" and len(parts) > 2 and parts[2] in TRAINING:
        return f"training.{parts[2]}"
    return name if name in LAYERS else "_private"


def tasks_report(root):
    rows = {}
    for path in python_files(root, "kseq/tasks"):
        if path.endswith("__init__.py"):
            continue
        text = open(path, encoding="utf-8").read()
        tree = ast.parse(text)
        imports = kseq_imports(tree, path)
        modules = {name for name in imports}
        rows[os.path.basename(path)[:-3]] = dict(lines=len(text.splitlines()), kseq_imports=len(modules))
    return rows


def options_report(root):
    """Files that declare option fields, with the count, and the declaration styles used."""
    places, styles = collections.Counter(), collections.Counter()
    for path in python_files(root, "kseq"):
        tree = ast.parse(open(path, encoding="utf-8").read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                fields = sum(1 for item in node.body if isinstance(item, ast.AnnAssign) and isinstance(
                    item.value, ast.Call) and getattr(item.value.func, "id", getattr(item.value.func, "attr", None)) == "option")
                if not fields:
                    continue
                places[os.path.relpath(path, root)] += fields
                for decorator in node.decorator_list:
                    target = decorator.func if isinstance(decorator, ast.Call) else decorator
                    styles[ast.unparse(target)] += 1
    return dict(files=dict(places), declaration_styles=dict(styles))


def import_paths_report():
    """{public name: its import paths} for kseq's names reachable under more
    than one module path beyond the defining module and its packages."""
    import kseq

    modules = {}
    for info in pkgutil.walk_packages(kseq.__path__, "kseq."):
        try:
            modules[info.name] = importlib.import_module(info.name)
        except Exception:  # noqa: BLE001 (an optional dependency's module)
            continue
    modules["kseq"] = kseq
    aliases = sorted(name for name, module in sys.modules.items()
                     if name.startswith("kseq.") and getattr(module, "__name__", name) != name)
    paths = collections.defaultdict(set)
    for name, module in list(modules.items()):
        package = hasattr(module, "__path__")
        exported = getattr(module, "__all__", None)
        for attribute, value in vars(module).items():
            home = getattr(value, "__module__", None)
            if attribute.startswith("_") or not (isinstance(value, type) or callable(value)):
                continue
            if not (home or "").startswith("kseq") or getattr(value, "__name__", None) != attribute:
                continue
            # A module's own imports are not paths users are offered: a name
            # counts where it is defined, in a package, or in an `__all__`.
            offered = home == name or (exported is not None and attribute in exported) or (
                package and exported is None)
            if offered:
                paths[f"{home}.{attribute}"].add(f"{name}.{attribute}")
    for alias in aliases:
        module = sys.modules[alias]
        for attribute, value in vars(module).items():
            if getattr(value, "__module__", None) == module.__name__ and not attribute.startswith("_"):
                paths[f"{module.__name__}.{attribute}"].add(f"{alias}.{attribute}")
    extra = {}
    for qualified, where in paths.items():
        home = qualified.rsplit(".", 1)[0]
        expected = {f"{package}.{qualified.rsplit('.', 1)[1]}" for package in
                    (".".join(home.split(".")[:i]) for i in range(1, home.count(".") + 2))}
        beyond = sorted(where - expected)
        if beyond:
            extra[qualified] = beyond
    most = max((len(v) + 1 for v in paths.values()), default=0)
    return dict(module_aliases=aliases, names_with_extra_paths=len(extra), most_paths_for_one_name=most,
                extra_paths=extra)


def files_report(root):
    counts = {}
    for top in ("benchmarks", "tests"):
        folders = collections.Counter()
        for path, _, names in os.walk(os.path.join(root, top)):
            if "__pycache__" in path:
                continue
            folders[os.path.relpath(path, root)] += sum(1 for name in names if not name.endswith(".pyc"))
        counts[top] = dict(sorted(folders.items()))
    return counts


def graph_report(root):
    edges = collections.Counter()
    upward = []
    for path in python_files(root, "kseq"):
        module = module_name(root, path)
        tree = ast.parse(open(path, encoding="utf-8").read())
        mine = folder_of(module)
        for target in kseq_imports(tree, path, top_level_only=False):
            theirs = folder_of(target)
            if theirs == mine or theirs == "kseq":
                continue
            edges[(mine, theirs)] += 1
            if LAYERS.index(theirs) > LAYERS.index(mine) and theirs != "_private":
                upward.append(f"{module} -> {target}")
    folders = {a for a, _ in edges} | {b for _, b in edges}
    graph = {a: {b for (x, b) in edges if x == a} for a in folders}
    cycles = []

    def visit(node, path):
        for target in graph.get(node, ()):
            if target == path[0] and len(path) > 1:
                cycles.append(" -> ".join(path + [target]))
            elif target not in path and target > path[0]:
                visit(target, path + [target])

    for node in sorted(folders):
        visit(node, [node])
    return dict(edges={f"{a} -> {b}": n for (a, b), n in sorted(edges.items())}, upward_imports=sorted(upward),
                folder_cycles=cycles)


def long_functions(root, limit=60):
    found = []
    for path in python_files(root, "kseq"):
        tree = ast.parse(open(path, encoding="utf-8").read())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > limit:
                    found.append(f"{os.path.relpath(path, root)}:{node.lineno} {node.name} ({length} lines)")
    return found


# Methods whose arguments keras, TensorFlow or Python document: a layer's
# `call` documents its arguments in the class's "Call arguments".
OVERRIDES = {"call", "build", "get_config", "from_config", "compute_output_shape", "compute_mask", "update_state",
             "result", "reset_state", "reset_states", "update_step", "get_build_config", "build_from_config",
             "save_own_variables", "load_own_variables", "__call__", "__init__", "__repr__", "__str__", "__eq__"}


def public_definitions(tree):
    """(node, qualified name) of a module's public functions, classes and
    their public methods; nested functions and private names left out."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            yield node, node.name
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and not item.name.startswith("_") \
                            and item.name not in OVERRIDES and not item.name.startswith("on_"):
                        yield item, f"{node.name}.{item.name}"


def docstrings_report(root):
    """Public functions, classes and methods of kseq: how many have a
    docstring, how many of those that take arguments document them
    (`Args:`, or "Arguments"/"Call arguments" for layers), and those whose
    docstring opens with a value's shape or type, not a sentence."""
    counts = collections.Counter()
    undocumented, terse = [], []
    for path in python_files(root, "kseq"):
        tree = ast.parse(open(path, encoding="utf-8").read())
        for node, name in public_definitions(tree):
            where = f"{os.path.relpath(path, root)}:{node.lineno} {name}"
            doc = ast.get_docstring(node) or ""
            counts["public"] += 1
            counts["with docstring"] += bool(doc)
            function = node if isinstance(node, ast.FunctionDef) else next(
                (item for item in node.body if isinstance(item, ast.FunctionDef) and item.name == "__init__"), None)
            arguments = [a.arg for a in function.args.args + function.args.kwonlyargs] if function else []
            if isinstance(node, ast.FunctionDef) and any(
                    isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list):
                arguments = []
            if [a for a in arguments if a not in ("self", "cls")]:
                counts["taking arguments"] += 1
                documented = "Args:" in doc
                counts["taking arguments, with Args:"] += documented
                if not documented:
                    undocumented.append(where)
            if doc and doc.lstrip()[:1] in "({[`":
                terse.append(where)
    return dict(counts=dict(counts), without_args=undocumented, opening_with_a_value=terse)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--json", help="write the whole report here")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    if args.root and "kseq" not in sys.modules:
        sys.path.insert(0, root)
    report = dict(commit=subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True,
                                        text=True).stdout.strip(),
                  tasks=tasks_report(root), options=options_report(root), files=files_report(root),
                  graph=graph_report(root), long_functions=long_functions(root), docstrings=docstrings_report(root))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    report["import_paths"] = import_paths_report()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    print(f"commit {report['commit']}")
    print("tasks (lines, kseq imports): " + ", ".join(
        f"{name} {row['lines']}/{row['kseq_imports']}" for name, row in report["tasks"].items()))
    print(f"option fields by file: {report['options']['files']}")
    print(f"declaration styles: {report['options']['declaration_styles']}")
    paths = report["import_paths"]
    print(f"module aliases: {len(paths['module_aliases'])}; names with extra import paths: "
          f"{paths['names_with_extra_paths']}; most paths to one name: {paths['most_paths_for_one_name']}")
    for top, folders in report["files"].items():
        print(f"{top}: " + ", ".join(f"{folder} {count}" for folder, count in folders.items()))
    graph = report["graph"]
    print(f"imports up the layers: {len(graph['upward_imports'])}; folder cycles: {len(graph['folder_cycles'])}")
    for line in graph["upward_imports"][:40]:
        print(f"    {line}")
    for cycle in graph["folder_cycles"][:20]:
        print(f"    cycle {cycle}")
    docs = report["docstrings"]
    print(f"docstrings: {docs['counts']}; opening with a value, not a sentence: {len(docs['opening_with_a_value'])}")
    print(f"functions over 60 lines: {len(report['long_functions'])}")
    for line in report["long_functions"]:
        print(f"    {line}")


if __name__ == "__main__":
    main()
