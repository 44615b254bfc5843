"""The modules of `jaxblend.cli` import each other without a cycle, and only at module level (an
import of a cli module inside a function is how a cycle hides)."""

from __future__ import annotations

import ast
from pathlib import Path

import jaxblend.cli

CLI = Path(jaxblend.cli.__file__).parent


def _cli_imports(path: Path) -> list[tuple[str, bool]]:
    """(imported cli module, at module level?) for every import of a `jaxblend.cli` module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "jaxblend.cli":
                names = [alias.name for alias in node.names]
            elif node.module.startswith("jaxblend.cli."):
                names = [node.module.split(".")[2]]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".")[2] for a in node.names if a.name.startswith("jaxblend.cli.")]
        found += [(name, id(node) in top) for name in names if (CLI / f"{name}.py").exists()]
    return found


def _graph() -> dict[str, set[str]]:
    return {
        path.stem: {name for name, _ in _cli_imports(path)}
        for path in CLI.glob("*.py") if path.stem != "__init__"
    }


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt] if nxt in path else [node, nxt]
            if nxt not in state:
                found = visit(nxt, [*path, nxt])
                if found:
                    return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start, [start])
            if found:
                return found
    return None


def test_no_import_cycle_among_cli_modules():
    assert _cycle(_graph()) is None, " -> ".join(_cycle(_graph()))


def test_cli_modules_import_each_other_at_module_level_only():
    inside = sorted(
        f"{path.stem} imports {name} inside a function"
        for path in CLI.glob("*.py") for name, top in _cli_imports(path) if not top
    )
    assert inside == []


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
