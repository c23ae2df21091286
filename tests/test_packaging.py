"""memvault installs as one top-level package and never collides with a user's own modules."""

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LAYERS = {"vault": "memvault.vault", "indexer": "memvault.indexer", "cli": "memvault.cli"}


def source_packages() -> set[str]:
    found = {"memvault"}
    for folder, package in LAYERS.items():
        for init in (REPO / folder).rglob("__init__.py"):
            found.add(".".join([package, *init.parent.relative_to(REPO / folder).parts]))
    return found


def test_pyproject_lists_every_package_folder():
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    assert listed == source_packages()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a copy of the sources (the build leaves nothing in the checkout)."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for folder in ("memvault", *LAYERS):
        shutil.copytree(REPO / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "-w", str(out), str(source)], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    (built,) = out.glob("memvault-*.whl")
    return built


def test_the_wheel_holds_exactly_one_top_level_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    version = wheel.name.split("-")[1]
    assert top == {"memvault", f"memvault-{version}.dist-info"}


def test_the_wheel_ships_every_module_under_memvault(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {"memvault/__init__.py", "memvault/__main__.py"}
    for folder in LAYERS:
        for path in (REPO / folder).rglob("*.py"):
            expected.add(f"memvault/{folder}/{path.relative_to(REPO / folder).as_posix()}")
    assert expected <= names
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "memvault = memvault.cli.main:cli" in entry_points


USERS_OWN = {
    "indexer.py": "raise ImportError('this is the user\\'s own indexer.py')\n",
    "vault.py": "raise ImportError('this is the user\\'s own vault.py')\n",
    "cli.py": "raise ImportError('this is the user\\'s own cli.py')\n",
}


@pytest.fixture
def users_project(tmp_path) -> Path:
    project = tmp_path / "my-agent"
    project.mkdir()
    for name, text in USERS_OWN.items():
        (project / name).write_text(text)
    return project


def test_the_api_imports_beside_a_users_own_indexer_vault_and_cli_modules(users_project):
    code = "from memvault import MemoryStore, RuntimeService, VaultError; print(MemoryStore.__module__)"
    done = subprocess.run([sys.executable, "-c", code], cwd=users_project, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(users_project)}, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "memvault.indexer.engine.store"


@pytest.mark.both_backends
@pytest.mark.parametrize(
    "command", [[sys.executable, "-m", "memvault"], [str(Path(sys.executable).parent / "memvault")]]
)
def test_the_command_runs_beside_a_users_own_modules(users_project, command):
    from tests import postgres_helpers

    (users_project / "v").mkdir()
    env = {**os.environ, "PYTHONPATH": str(users_project)}  # on the postgres run, the fixture's PG* variables
    flags = postgres_helpers.init_flags()
    done = subprocess.run([*command, "init", "v", "--time-zone", "Europe/Amsterdam", *flags], cwd=users_project,
                          capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = subprocess.run([*command, "--vault", "v", "remember", "Pelicans nest by the lake."], cwd=users_project,
                          capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert done.returncode == 0 and done.stdout.startswith("added: daily/"), done.stderr


def test_python_dash_m_memvault_is_the_command():
    done = subprocess.run([sys.executable, "-m", "memvault", "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("memvault, version ")
