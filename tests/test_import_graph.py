"""No import circles inside `tinker_opt`.

The graph is built with `ast` from the source files, without importing anything. Every import
counts, including those inside functions: a function-level import that closes a circle is the
usual way a circle is hidden (it "works" only because of the order modules happen to load in),
so it is a design circle all the same. Imports under `if TYPE_CHECKING:` count too: they never
run, but a module that names another's types for its annotations depends on it as much as one that
calls it, and a circle of such names is a design circle that a shared type module removes.
`from tinker_opt.pkg import name` counts as an import of `tinker_opt.pkg.name` when that is a
module, else of the package `tinker_opt.pkg` (its `__init__`, a node like any module). The
parent packages an import runs on the way are not edges: a package that imports its own
submodules in `__init__` is the ordinary layout, not a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "tinker_opt"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE


def module_name(path: Path, root: Path = ROOT) -> str:
    """`root/profile/store.py` -> `tinker_opt.profile.store` (a package is its `__init__`)."""
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _targets(node: ast.AST, current: str, is_package: bool, modules: set[str]) -> list[str]:
    """The tinker_opt modules one import statement loads."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:  # relative: resolve against the current package
            base = current.split(".") if is_package else current.split(".")[:-1]
            base = base[: len(base) - node.level + 1]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        names = [
            f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
            for alias in node.names
        ]
    found = []
    for name in names:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name.startswith(PACKAGE) and name != current:
            found.append(name)
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the tinker_opt modules it imports (module level, inside functions and under
    `if TYPE_CHECKING:`)."""
    files = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    modules = set(files)
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges.update(_targets(node, name, path.name == "__init__.py", modules))
        graph[name] = edges
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan), as a path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_cycle_path(graph, set(c), c[0]) for c in components]


def _cycle_path(graph: dict[str, set[str]], members: set[str], start: str) -> list[str]:
    """A shortest path start -> ... -> start inside one component (breadth first)."""
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        next_frontier = []
        for node in frontier:
            for nxt in sorted(graph[node] & members):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return path[::-1] + [start]
                if nxt not in parents:
                    parents[nxt] = node
                    next_frontier.append(nxt)
        frontier = next_frontier
    raise AssertionError(f"{start} is in a component but on no cycle")


def _describe(cycle: list[str]) -> str:
    return " -> ".join(cycle)


def test_finder_reports_a_cycle_with_its_path():
    """The finder sees a circle closed by a function-level import and names every module on it."""
    graph = {
        "tinker_opt.a": {"tinker_opt.b"},
        "tinker_opt.b": {"tinker_opt.c"},
        "tinker_opt.c": {"tinker_opt.a"},
        "tinker_opt.d": {"tinker_opt.a"},
    }
    assert find_cycles(graph) == [["tinker_opt.a", "tinker_opt.b", "tinker_opt.c", "tinker_opt.a"]]
    assert find_cycles({"tinker_opt.a": {"tinker_opt.b"}, "tinker_opt.b": set()}) == []


def test_graph_counts_function_level_and_relative_imports(tmp_path):
    """Imports inside functions, relative imports and TYPE_CHECKING imports are all edges."""
    pkg = tmp_path / "tinker_opt"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "x.py").write_text("def f():\n    from tinker_opt.sub import y\n")
    (pkg / "sub" / "y.py").write_text(
        "from . import x\nfrom typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from tinker_opt import z\n"
    )
    (pkg / "z.py").write_text("import tinker_opt.sub.x\n")
    graph = import_graph(pkg)
    assert graph["tinker_opt.sub.x"] == {"tinker_opt.sub.y"}
    assert graph["tinker_opt.sub.y"] == {"tinker_opt.sub.x", "tinker_opt.z"}
    assert graph["tinker_opt.z"] == {"tinker_opt.sub.x"}
    assert find_cycles(graph) == [["tinker_opt.sub.x", "tinker_opt.sub.y", "tinker_opt.sub.x"]]


def test_no_import_cycles():
    """No module of tinker_opt reaches itself through imports."""
    cycles = find_cycles(import_graph())
    assert not cycles, "import circles: " + "; ".join(_describe(c) for c in cycles)
