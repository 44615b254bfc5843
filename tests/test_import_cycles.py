"""The package has no import cycles.

Every `import` of a jaxblend module counts, wherever it is written: at module level, inside a
function (an import deferred to dodge a cycle is still one) and under `if TYPE_CHECKING:`. Importing
`a.b.c` also imports the packages `a.b` and `a`, so those count too, except a module's own parent
packages (which are always being imported when it is).
"""

from __future__ import annotations

import ast
import pathlib

import jaxblend

PACKAGE = pathlib.Path(jaxblend.__file__).parent


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _parents(name: str) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def _imported_names(module: str, path: pathlib.Path) -> set[str]:
    """Dotted names (`jaxblend...`) the module imports, attributes of `from` imports included."""
    names = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return {n for n in names if n == "jaxblend" or n.startswith("jaxblend.")}


def import_graph() -> dict[str, set[str]]:
    """module -> the jaxblend modules importing it executes (its own parents excluded)."""
    modules = _modules()
    graph = {}
    for module, path in modules.items():
        targets = set()
        for name in _imported_names(module, path):
            while name not in modules:  # `from pkg import attribute`: the module is pkg
                name = name.rpartition(".")[0]
            targets.add(name)
            targets.update(p for p in _parents(name) if p in modules)
        graph[module] = targets - _parents(module) - {module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_the_check_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_graph_names_only_package_modules():
    graph = import_graph()
    # jaxblend.index is pure: it imports nothing from storage, sources or the CLI.
    assert not {m for m in graph["jaxblend.index"] if m.startswith(("jaxblend.storage",
                                                                    "jaxblend.cli"))}
    # Every module is a node, and the edges name only modules of the package.
    assert set().union(*graph.values()) <= set(graph)
