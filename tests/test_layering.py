"""Dependencies point one way: cli → indexer → vault, and inside indexer/ its groups top to
bottom (runtime → engine → team → services → journal → maintenance → search → backend: the index
backend seam and its engines sit under everything that reads an index). Checked by parsing
every import, the lazy ones inside functions included: a lazy import may save start-up time,
it may not hide an upward dependency."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FORBIDDEN = {
    "vault": {"memvault.indexer", "memvault.cli", "click", "urllib.request", "http.client", "requests", "httpx"},
    "indexer": {"memvault.cli", "click"},
}
#: indexer's groups, top first; each may import only the groups after it (and `results`)
INDEXER_GROUPS = ["runtime", "engine", "team", "services", "journal", "maintenance", "search", "backend"]
SHARED = {"results"}


def imported_modules(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def project_sources():
    for top in ("memvault", "vault", "indexer", "cli", "tests", "bench"):
        yield from sorted((REPO / top).rglob("*.py"))


def test_packages_only_import_downward():
    offences = []
    for package, banned in FORBIDDEN.items():
        for path in sorted((REPO / package).rglob("*.py")):
            for module in imported_modules(path):
                if any(module == b or module.startswith(b + ".") for b in banned):
                    offences.append(f"{path.relative_to(REPO)} imports {module}")
    assert offences == []


def test_indexer_groups_only_import_downward():
    offences = []
    for group_index, group in enumerate(INDEXER_GROUPS):
        allowed = set(INDEXER_GROUPS[group_index:]) | SHARED
        for path in sorted((REPO / "indexer" / group).rglob("*.py")):
            for module in imported_modules(path):
                parts = module.split(".")
                if parts[:2] == ["memvault", "indexer"] and len(parts) > 2 and parts[2] not in allowed:
                    offences.append(f"{path.relative_to(REPO)} ({group}) imports {module}")
    assert offences == []


def test_every_indexer_module_sits_in_a_group():
    loose = sorted(p.stem for p in (REPO / "indexer").glob("*.py") if p.stem not in SHARED | {"__init__"})
    assert loose == []
    assert sorted(p.name for p in (REPO / "indexer").iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(
        INDEXER_GROUPS
    )


def test_nothing_imports_the_folders_by_their_bare_names():
    # The folders install as memvault.vault / memvault.indexer / memvault.cli; a bare `import vault`
    # would pick up a user's own vault.py instead.
    offences = []
    for path in project_sources():
        for module in imported_modules(path):
            if module.split(".")[0] in ("vault", "indexer", "cli"):
                offences.append(f"{path.relative_to(REPO)} imports {module}")
    assert offences == []


SEAM_MODULES = ("memvault.indexer.backend.base", "memvault.indexer.backend.analysis")


def test_nothing_above_the_seam_imports_an_engine():
    """Callers speak to `backend.base` (and `backend.analysis`, the text analysis both engines
    share); only the factory that opens a backend names an engine."""
    offences = []
    for path in sorted((REPO / "indexer").rglob("*.py")):
        if "backend" in path.relative_to(REPO / "indexer").parts[:1]:
            continue
        for module in imported_modules(path):
            if module.startswith("memvault.indexer.backend.") and module not in SEAM_MODULES:
                offences.append(f"{path.relative_to(REPO)} imports {module}")
    assert offences == []


def test_indexer_never_prints():
    offences = []
    for path in sorted((REPO / "indexer").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("print", "exit", "quit"):
                offences.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offences == []
