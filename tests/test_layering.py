"""Dependencies point one way: cli → indexer → vault. Checked by parsing every import."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FORBIDDEN = {
    "vault": {"indexer", "cli", "click", "urllib.request", "http.client", "requests", "httpx"},
    "indexer": {"cli", "click"},
}


def imported_modules(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def test_packages_only_import_downward():
    offences = []
    for package, banned in FORBIDDEN.items():
        for path in sorted((REPO / package).rglob("*.py")):
            for module in imported_modules(path):
                if any(module == b or module.startswith(b + ".") for b in banned):
                    offences.append(f"{path.relative_to(REPO)} imports {module}")
    assert offences == []


def test_indexer_never_prints():
    offences = []
    for path in sorted((REPO / "indexer").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("print", "exit", "quit"):
                offences.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offences == []
