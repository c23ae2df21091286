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


#: the engines' own names, as the config's index block spells them
ENGINE_NAMES = {"local", "postgres"}
#: classes of one engine (or of one engine's generations) that no caller may test for or build
ENGINE_CLASSES = {"DerivedIndex", "LocalBackend", "PostgresBackend", "LocalGenerations", "ServerGenerations"}
#: the local engine, in indexer/maintenance/: its generations, its vectors, its health
LOCAL_ENGINE = {"derived", "local_generations", "semantic_service", "semantic_catch_up",
                "health", "health_checks", "replay_adopt"}  # fmt: skip


def _engine_checks(path: Path, tree: ast.AST):
    """(line, what) for each place the module checks or names an engine (docstrings are not code)."""
    stem = path.stem
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            operands += [elt for op in operands if isinstance(op, ast.Tuple | ast.List | ast.Set) for elt in op.elts]
            strings = {op.value for op in operands if isinstance(op, ast.Constant) and isinstance(op.value, str)}
            by_attribute = any(isinstance(op, ast.Attribute) and op.attr in ("backend", "engine") for op in operands)
            if "postgres" in strings or (by_attribute and strings):
                yield node.lineno, f"compares with {sorted(strings)}"
        elif isinstance(node, ast.Call):
            callee = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            arguments = [*node.args, *(keyword.value for keyword in node.keywords)]
            if callee == "IndexConfig" and any(
                isinstance(a, ast.Constant) and a.value in ENGINE_NAMES for a in arguments
            ):
                yield node.lineno, "builds an IndexConfig naming an engine"
        names = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.ImportFrom):
            names = [alias.name for alias in node.names]
        for name in set(names) & ENGINE_CLASSES:
            chooser = name.endswith("Generations") and stem == "index_engines"
            if not (chooser or name == "DerivedIndex" and stem in LOCAL_ENGINE and "maintenance" in path.parts):
                yield node.lineno, f"names {name}"
        modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        modules += [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
        for module in modules:
            if module.startswith("memvault.indexer.backend.postgres"):
                yield node.lineno, f"imports {module}"


def test_nothing_outside_the_backends_and_the_config_loader_names_an_engine():
    """Where the engines differ, the seam says so (`IndexConfig.on_server`, the capabilities of
    `backend.base.IndexGenerations`); no caller asks which engine it is talking to."""
    offences = []
    for top in ("memvault", "vault", "indexer", "cli"):
        for path in sorted((REPO / top).rglob("*.py")):
            relative = path.relative_to(REPO)
            if relative.parts[:2] == ("indexer", "backend") or (top == "vault" and path.stem.startswith("config")):
                continue
            for line, what in _engine_checks(path, ast.parse(path.read_text())):
                offences.append(f"{relative}:{line} {what}")
    assert offences == []


def test_the_engine_name_check_sees_code_not_prose():
    flagged = list(_engine_checks(Path("cli/x.py"), ast.parse('"""if backend == "postgres", DerivedIndex"""\n')))
    assert flagged == []
    code = (
        'if config.index.backend != "local": pass\nIndexConfig("postgres", n, d)\nisinstance(i, DerivedIndex)\n'
        "from memvault.indexer.backend.postgres.engine import PostgresBackend\n"
    )
    assert sorted({line for line, _ in _engine_checks(Path("cli/x.py"), ast.parse(code))}) == [1, 2, 3, 4]
