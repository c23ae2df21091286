"""An import inside a function defers a heavy import, and nothing else (docs/contributing.md,
"Imports inside functions only to defer a heavy import").

Heavy is what the doc's table lists (read from the doc, so the two cannot drift apart), or a
memvault module whose module-level imports reach a listed module: follow memvault's own
module-level imports transitively (with the packages `__init__.py` files a dotted import runs),
statically with ast. One more deferral is for start-up: `memvault --help` loads every command
module to list the commands, and every command through a running owner loads the thin client, so
a module either loads defers what only some of its calls run (a memvault module neither loads);
tests/test_cli.py and tests/test_engine.py keep that set small. Every other import
inside a function of the product code (memvault/, vault/, indexer/, cli/) belongs at the top of
its module; one that cannot move is on DEFERRED_ON_PURPOSE with its reason."""

import ast
import functools
import re
import subprocess
import sys
from pathlib import Path

from tests.test_import_cycles import product_modules

REPO = Path(__file__).resolve().parent.parent
SECTION = "## Imports inside functions only to defer a heavy import"

#: (module, imported name) -> why the import stays inside its functions although it is light.
#: Keep this short: an entry is a debt, not a habit.
DEFERRED_ON_PURPOSE: dict[tuple[str, str], str] = {
    ("memvault.cli.remote_commands", "memvault.cli.mcp_remote"): "the MCP server and its tools load for "
    "`memvault --remote NAME mcp` only, never for the other remote commands (search, journal, remember "
    "load this module): tests/test_cli.py, test_a_command_imports_only_its_own_module",
}


def heavy_modules() -> set[str]:
    """The modules the contributing guide's table names (its first column, each in backticks)."""
    text = (REPO / "docs" / "contributing.md").read_text()
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    names = set()
    for line in section.splitlines():
        cells = line.split("|")
        if len(cells) > 2 and not set(cells[1].strip()) <= {"-"}:
            names.update(re.findall(r"`([\w.]+)`", cells[1]))
    return names


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(tree: ast.Module):
    """(import node, inside a function?) for every import that runs: those under
    `if TYPE_CHECKING:` never do."""

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    yield from visit_one(other, in_function)
                continue
            yield from visit_one(child, in_function)

    def visit_one(node, in_function):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, in_function
        else:
            inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            yield from visit(node, inner)

    yield from visit(tree, False)


def targets(module: str, path: Path, node: ast.Import | ast.ImportFrom, modules: dict[str, Path]) -> list[str]:
    """The dotted names an import loads: for `from a import b`, a.b where b is a module, else a."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        package = module.split(".")
        if path.name != "__init__.py":
            package.pop()
        package = package[: len(package) - (node.level - 1)]
        base = ".".join(package + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    found = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules]
    return found or [base]


def with_packages(name: str, modules: dict[str, Path]) -> list[str]:
    """A dotted import runs each enclosing package's `__init__.py` first, then the module."""
    parts = name.split(".")
    return [".".join(parts[:n]) for n in range(1, len(parts) + 1) if ".".join(parts[:n]) in modules]


#: what each start-up path runs before its work: `memvault --help` (it loads every command module
#: to list the commands), the thin client (every command through a running owner uses it) and
#: the connected store (every `memvault --remote NAME` command uses it)
STARTUPS = {
    "--help": "from click.testing import CliRunner; from memvault.cli.main import cli; "
    "assert CliRunner().invoke(cli, ['--help']).exit_code == 0",
    "the thin client": "import memvault.indexer.engine.remote",
    # `memvault --remote NAME search` (tests/test_remote_search_light.py runs it): admission, the
    # run ledger, bulk remember and the journal's cursor files load in the calls that need them
    "the remote search": "import memvault.cli.remote_store, memvault.indexer.engine.connected",
    # the same through this machine's resident connection (tests/test_remote_resident.py): a thin client
    "the resident's thin client": "import memvault.cli.remote_store, memvault.indexer.engine.resident_client",
}


@functools.cache
def startup_sets() -> tuple[frozenset[str], ...]:
    """The memvault modules each start-up path loads, each in a fresh interpreter."""
    found = []
    for code in STARTUPS.values():
        probe = f"import sys; {code}; print(' '.join(m for m in sys.modules if m.partition('.')[0] == 'memvault'))"
        out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
        found.append(frozenset(out.stdout.split()))
    return tuple(found)


class Imports:
    def __init__(self) -> None:
        self.modules = product_modules()
        self.heavy = heavy_modules()
        self.trees = {name: ast.parse(path.read_text(), filename=str(path)) for name, path in self.modules.items()}
        self._heavy_memo: dict[str, bool] = {}

    @functools.cache  # noqa: B019 (one Imports per test, kept for its life)
    def top_level(self, module: str) -> list[str]:
        path = self.modules[module]
        return [
            target
            for node, in_function in imports_of(self.trees[module])
            if not in_function
            for target in targets(module, path, node, self.modules)
        ]

    def is_third_party_heavy(self, name: str) -> bool:
        return any(name == heavy or name.startswith(heavy + ".") for heavy in self.heavy)

    def reaches_heavy(self, module: str) -> bool:
        """Whether importing `module` (a memvault module) loads a listed module, through its own
        module-level imports and those of every memvault module they load."""
        if module not in self._heavy_memo:
            self._heavy_memo[module] = False
            seen, todo = set(), with_packages(module, self.modules)
            while todo:
                current = todo.pop()
                if current in seen:
                    continue
                seen.add(current)
                for target in self.top_level(current):
                    if self.is_third_party_heavy(target):
                        self._heavy_memo[module] = True
                        return True
                    todo.extend(with_packages(target, self.modules))
        return self._heavy_memo[module]

    def is_heavy(self, name: str) -> bool:
        if self.is_third_party_heavy(name):
            return True
        loaded = with_packages(name, self.modules)
        return any(self.reaches_heavy(module) for module in loaded)

    def light_deferred(self):
        """(module, line, the import as written, its light target) for each light import inside a
        function, but for what a module of a start-up path defers beyond that path."""
        startups = startup_sets()
        for module, tree in self.trees.items():
            path = self.modules[module]
            for node, in_function in imports_of(tree):
                if not in_function:
                    continue
                for target in targets(module, path, node, self.modules):
                    loaded = set(with_packages(target, self.modules))
                    if any(module in startup and not loaded <= startup for startup in startups):
                        continue  # kept out of a start-up path
                    if not self.is_heavy(target):
                        yield module, node.lineno, ast.unparse(node), target


def test_the_heavy_list_is_the_docs_table():
    heavy = heavy_modules()
    assert {"tantivy", "hnswlib", "numpy", "mcp", "watchdog", "psycopg"} <= heavy, heavy


def test_imports_inside_functions_only_defer_heavy_modules():
    imports = Imports()
    offences = []
    for module, line, statement, target in imports.light_deferred():
        if (module, target) in DEFERRED_ON_PURPOSE:
            continue
        path = imports.modules[module].relative_to(REPO)
        offences.append(f"{path}:{line}: {statement} ({target} is not heavy: move it to the top of the module)")
    assert not offences, "\n".join(offences)


def test_every_deferred_on_purpose_entry_is_still_deferred():
    """An entry whose import moved to the top (or went away) leaves the list the same day."""
    found = {(module, target) for module, _, _, target in Imports().light_deferred()}
    assert set(DEFERRED_ON_PURPOSE) <= found, set(DEFERRED_ON_PURPOSE) - found


def test_the_check_sees_what_it_should(tmp_path):
    """A light import in a function is found; a heavy one, one of a module reaching a heavy one,
    a module-level one and one under TYPE_CHECKING are not."""
    source = (
        "import json\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    import numpy\n"
        "def f():\n"
        "    import os\n"
        "    import numpy as np\n"
        "    from mcp.server import lowlevel\n"
        "    def g():\n"
        "        from . import json as j\n"
    )
    tree = ast.parse(source)
    found = [(ast.unparse(node), inside) for node, inside in imports_of(tree)]
    assert found == [
        ("import json", False),
        ("from typing import TYPE_CHECKING", False),
        ("import os", True),
        ("import numpy as np", True),
        ("from mcp.server import lowlevel", True),
        ("from . import json as j", True),
    ]
    imports = Imports()
    assert imports.is_heavy("numpy.linalg") and imports.is_heavy("mcp.server.lowlevel")
    assert not imports.is_heavy("os") and not imports.is_heavy("memvault.vault.errors")
    assert imports.is_heavy("memvault.indexer.search.vectors")  # imports hnswlib at its top
