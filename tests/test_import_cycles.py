"""No import circles between product files. Every import counts, the lazy ones inside functions
included: a circle hidden in a function still ties two modules into one, and the house rule
(docs/contributing.md) keeps imports inside functions for deferring a heavy import only.

The graph has one node per file of memvault, memvault.vault, memvault.indexer and memvault.cli;
`import a.b`, `from a import b` (b a module or a name) and relative imports all make an edge to
the file they name. A package's `__init__.py` is a node only where an import names it."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: the folders and the package each installs as (pyproject's package-dir)
ROOTS = {"memvault": "memvault", "vault": "memvault.vault", "indexer": "memvault.indexer", "cli": "memvault.cli"}

#: Circles still being broken by other work, each a set of modules. Remove an entry the day its
#: circle is gone (test_allowed_circles_still_exist says when).
ALLOWED_CIRCLES: list[set[str]] = []


def product_modules() -> dict[str, Path]:
    modules = {}
    for folder, package in ROOTS.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = list(path.relative_to(REPO / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([package, *parts])] = path
    return modules


def imported_names(name: str, path: Path):
    """Every dotted name an import in the file may resolve to, a module-or-name pair for `from`."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = name.split(".")
                if not is_package:
                    package.pop()
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([node.module] if node.module else []))
            else:
                base = node.module
            for alias in node.names:
                yield base, alias.name


def import_graph() -> dict[str, set[str]]:
    modules = product_modules()
    graph = {name: set() for name in modules}
    for name, path in modules.items():
        for base, member in imported_names(name, path):
            if member is not None and f"{base}.{member}" in modules:
                target = f"{base}.{member}"  # `from a import b`, b a module
            elif base in modules:
                target = base
            else:
                continue
            if target != name:
                graph[name].add(target)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's components, iteratively (the graph is a few hundred files deep at most)."""
    index, low, on_stack, stack, components = {}, {}, set(), [], []
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
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                components.append(component)
    return [c for c in components if len(c) > 1]


def cycle_through(graph: dict[str, set[str]], component: set[str], start: str) -> list[str]:
    """The shortest path start → … → start inside one component (breadth first)."""
    previous, frontier = {}, [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & component):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"{start} is on no cycle")


def describe(graph: dict[str, set[str]], component: set[str]) -> str:
    """The component as cycles, until every member sits on one printed path."""
    lines, covered = [], set()
    for member in sorted(component):
        if member not in covered:
            path = cycle_through(graph, component, member)
            covered.update(path)
            lines.append("  " + " -> ".join(p.removeprefix("memvault.") for p in path))
    return "\n".join(lines)


def is_allowed(component: set[str]) -> bool:
    return any(component <= allowed for allowed in ALLOWED_CIRCLES)


def test_no_import_circles():
    graph = import_graph()
    circles = [c for c in strongly_connected(graph) if not is_allowed(c)]
    report = "\n".join(describe(graph, c) for c in sorted(circles, key=sorted))
    assert not circles, f"{len(circles)} import circle(s); give the shared piece its own module:\n{report}"


def test_allowed_circles_still_exist():
    components = strongly_connected(import_graph())
    stale = [sorted(a) for a in ALLOWED_CIRCLES if not any(c & a for c in components)]
    assert not stale, f"these circles are gone: remove them from ALLOWED_CIRCLES: {stale}"


def test_the_graph_sees_lazy_relative_and_module_imports(tmp_path):
    # The checker itself: a circle made of a lazy, a relative and a `from package import module`
    # import is found.
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert strongly_connected(graph) == [{"a", "b", "c"}]
    assert cycle_through(graph, {"a", "b", "c"}, "a") == ["a", "b", "c", "a"]
    modules = product_modules()
    assert "memvault.indexer.engine.store" in modules and "memvault" in modules
    source = "def f():\n    from . import store\n    from ..search import recall\n    import memvault.vault.paths\n"
    fake = tmp_path / "owner.py"
    fake.write_text(source)
    names = list(imported_names("memvault.indexer.engine.owner", fake))
    assert names == [
        ("memvault.indexer.engine", "store"),
        ("memvault.indexer.search", "recall"),
        ("memvault.vault.paths", None),
    ]
