"""The import rules of the tree, read from the source with `ast` (nothing is imported):

- backend/ never imports workers/ or frontend/; workers/ never imports backend/ or frontend/;
- frontend/ imports only normlab/ of ours (it talks to the API over HTTP) and never torch;
- backend/ and normlab/ never import torch; normlab/ imports none of the other packages; both rules
  except for its CLI (normlab/cli: the edge that starts the API, the workers, the pages and the engine);
- kernels/ imports nothing of ours;
- normlab_client (client/, a distribution of its own) imports nothing of ours, and torch only in its watch
  modules (the user's own torch, imported when watch() is called): the server imports it, never the reverse;
- no product package imports benchmarks/ (the harnesses `normlab bench` runs, by module name);
- no import cycles between our modules;
- settings are read at the edge only: `Settings()` (which reads NORMLAB_*) is built in the edge modules
  listed in SETTINGS_EDGES or under a module's `if __name__ == "__main__":`, and passed down from there.

Every import counts, also one inside a function: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("normlab", "backend", "workers", "frontend", "kernels", "benchmarks")
CLIENT = ROOT / "client"  # normlab_client lives one folder down, in its own distribution


def _module_name(path: Path) -> str:
    base = CLIENT if path.is_relative_to(CLIENT) else ROOT
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    roots = [ROOT / pkg for pkg in PACKAGES] + [CLIENT / "normlab_client"]
    return {_module_name(p): p for root in roots for p in sorted(root.rglob("*.py"))}


SOURCES = _sources()


def _imports(name: str, path: Path) -> set[str]:
    """Every module `name` imports (absolute names; for `from a import b`, a.b when that is a module)."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                out.add(sub if sub in SOURCES else module)
    return out


GRAPH = {name: _imports(name, path) for name, path in SOURCES.items()}


def _top(module: str) -> str:
    return module.split(".")[0]


def _violations(where: str, forbidden: set[str], skip: str | None = None) -> list[str]:
    return sorted(
        f"{src} imports {dst}"
        for src, dsts in GRAPH.items()
        for dst in dsts
        if _top(src) == where
        and not (skip and (src == skip or src.startswith(skip + ".")))
        and _top(dst) in forbidden
    )


@pytest.mark.parametrize(
    ("package", "forbidden", "skip"),
    [
        ("backend", {"workers", "frontend", "torch", "benchmarks"}, None),
        ("workers", {"backend", "frontend", "benchmarks"}, None),
        ("frontend", {"backend", "workers", "kernels", "torch", "benchmarks"}, None),
        ("normlab", {"torch", "backend", "workers", "frontend", "kernels", "benchmarks"}, "normlab.cli"),
        ("kernels", {"normlab", "backend", "workers", "frontend", "benchmarks"}, None),
        (
            "normlab_client",
            {"normlab", "torch", "backend", "workers", "frontend", "kernels", "benchmarks"},
            "normlab_client.watch",
        ),
    ],
)
def test_imports_point_down(package, forbidden, skip):
    assert _violations(package, forbidden, skip) == []


def test_the_rules_see_imports_inside_functions():
    # normlab/cli/serve.py starts the API and the workers: lazily, inside its handlers
    assert {"backend.app", "workers.celery_app"} <= GRAPH["normlab.cli.serve"]


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    ours = {n: {d for d in deps if d in GRAPH and d != n} for n, deps in GRAPH.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in ours[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(ours):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles_between_our_modules():
    assert _cycles() == []


# The modules that may build `Settings(...)` (read NORMLAB_* from the environment), and why.
SETTINGS_EDGES = {
    "normlab.cli": "every command's settings (settings_from), handed to the API, workers and engine",
    "workers.celery_app": "`celery -A workers.celery_app` gets its app, hence its settings, here",
    "benchmarks.service": "the benchmarks' service harness: the settings of the service it starts",
    "benchmarks.devapi": "the stand-in API answers /api/catalog with a default server's limits",
    "benchmarks.gpu_check": "a command of its own (the GPU check): the settings of its engine step",
}


def _is_main_guard(node: ast.AST) -> bool:
    """`if __name__ == "__main__":`"""
    test = getattr(node, "test", None)
    return (
        isinstance(node, ast.If)
        and isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    )


def _settings_reads(path: Path) -> list[int]:
    """Lines where a module builds `Settings(...)` or names `get_settings`, outside its __main__ block."""
    tree = ast.parse(path.read_text(), filename=str(path))
    guarded = {id(n) for block in ast.walk(tree) if _is_main_guard(block) for n in ast.walk(block)}
    lines = []
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name == "Settings":
                lines.append(node.lineno)
        elif (isinstance(node, ast.Name) and node.id == "get_settings") or (
            isinstance(node, ast.alias) and node.name == "get_settings"
        ):
            lines.append(node.lineno)
    return sorted(lines)


def _settings_readers() -> list[str]:
    return sorted(
        f"{name}:{line}"
        for name, path in SOURCES.items()
        if not any(name == e or name.startswith(e + ".") for e in SETTINGS_EDGES)
        for line in _settings_reads(path)
    )


def test_settings_are_read_at_the_edge_and_passed_down():
    assert _settings_readers() == []


def test_the_settings_rule_sees_calls_and_spares_main_blocks(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(
        "from normlab.settings import Settings, get_settings\n"
        "def f():\n    return Settings(data_dir='x')\n"
        "g = get_settings\n"
        "s = Settings.model_construct()  # the defaults, no environment: allowed\n"
        "if __name__ == '__main__':\n    main(Settings())\n"
    )
    assert _settings_reads(src) == [1, 3, 4]
    # the engine takes its settings as a parameter: the worker's bench edge builds them under __main__
    assert _settings_reads(ROOT / "benchmarks" / "lstm_vs_torch.py") == []
    assert "Settings()" in (ROOT / "benchmarks" / "lstm_vs_torch.py").read_text()
