"""Shared fixtures: every test runs in its own temp folder with no MEMVAULT_* environment."""

import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.postgres_helpers import on_the_tests_backend

# Bytecode is written as Python does by default, also where the environment says not to
# (PYTHONDONTWRITEBYTECODE, set on this machine): otherwise every xdist worker and every process a
# test starts compiles memvault from source (measured: tests/test_engine.py
# with test_operator_findings.py from a clean checkout, 131 s of CPU without, 99 s with: a quarter)
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

REPO = Path(__file__).resolve().parent.parent
FIXTURE_VAULT = REPO / "fixtures" / "vault"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    for name in list(os.environ):
        if name.startswith("MEMVAULT_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def fixture_vault(tmp_path, request) -> Path:
    """A private copy of fixtures/vault (tests may edit it freely)."""
    target = tmp_path / "vault"
    shutil.copytree(FIXTURE_VAULT, target)
    return on_the_tests_backend(request, target)


@pytest.fixture
def new_vault(tmp_path, request) -> Path:
    """An empty lite vault in Europe/Amsterdam, made the way `memvault init` makes one."""
    from memvault.vault.config import default_config_data, render_config
    from memvault.vault.init import init_vault

    root = tmp_path / "fresh"
    init_vault(root, render_config(default_config_data(mode="lite", time_zone="Europe/Amsterdam")))
    return on_the_tests_backend(request, root)


def pytest_generate_tests(metafunc):
    # a test marked both_backends runs once per index backend (the seam's engines): its vaults
    # (new_vault, fixture_vault, or made with tests.postgres_helpers.on_test_backend) follow
    if metafunc.definition.get_closest_marker("both_backends"):
        metafunc.fixturenames.append("index_backend")
        metafunc.parametrize("index_backend", ["local", "postgres"], indirect=True)


@pytest.fixture(autouse=True)
def _engine_of_a_both_backends_test(request):
    """A both_backends test's engine is set up even when no fixture of its vault asks for it:
    `pytest_generate_tests` adds the parameter, which alone does not run the fixture (its postgres
    run would run locally again, and count as both)."""
    if "index_backend" in getattr(getattr(request.node, "callspec", None), "params", {}):
        request.getfixturevalue("index_backend")


@pytest.fixture
def index_backend(request, monkeypatch):
    """ "local", or "postgres" with a fresh database that libpq reaches through PG* variables."""
    from tests import postgres_helpers

    backend = getattr(request, "param", "local")
    if backend == "postgres":
        dsn = request.getfixturevalue("postgres_server").new_database()
        from tests import engine_helpers

        for name, value in postgres_helpers.libpq_environment(dsn).items():
            monkeypatch.setenv(name, value)
            # subprocesses started with engine_helpers.ENV (a copy taken at import) reach it too
            monkeypatch.setitem(engine_helpers.ENV, name, value)
    monkeypatch.setattr(postgres_helpers, "TEST_BACKEND", backend)
    yield backend
    if backend == "postgres":  # a test's postgres run that never reached the server tested nothing new
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            reached = conn.execute("SELECT to_regclass('memvault_vaults') IS NOT NULL").fetchone()[0]
        assert reached, "marked both_backends, but no vault of this test reached the server"


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL + pgvector on a Unix socket under /tmp, one per test worker
    (tests/postgres_helpers.py). It fails loudly when it cannot start: these tests run in CI."""
    from tests.postgres_helpers import PostgresServer

    server = PostgresServer.start_new()
    yield server
    server.destroy()


@pytest.fixture
def postgres_dsn(postgres_server) -> str:
    """A fresh database on the session's server, with pgvector installed."""
    return postgres_server.new_database()


def pytest_xdist_auto_num_workers(config):
    # `-n auto`: two workers per core. A worker spends about half its time waiting on the processes
    # it starts (owners, CLI runs, MCP servers, a browser); measured on 2 cores, tests/test_engine.py
    # with test_operator_findings.py took 94 s on 2 workers and 70 s on 4
    return 2 * len(os.sched_getaffinity(0))


def pytest_configure(config):
    # xdist hands each worker a first chunk of a quarter of its share, in collection order: all
    # the long tests (sorted first, below) landed on one worker, which ran 10 minutes while the
    # others idled after 6. Small chunks let whichever worker is free take the next test.
    if getattr(config.option, "maxschedchunk", 0) is None:
        config.option.maxschedchunk = 2


def pytest_collection_modifyitems(config, items):
    # the long multi-process tests start first, so none of them is left running alone at the end
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


_engine_runs: dict[str, set[str]] = {}
#: tests marked one_engine("why"): they open an index on one engine only, and say why
_one_engine: set[str] = set()
#: tests (engine parameter left out) that opened an index: a vault of theirs reached the server,
#: or got an index generation on this machine (`.index/CURRENT`; `.index/` alone may hold only
#: a host's activity or the journal's cursor key)
_index_tests: set[str] = set()


@pytest.fixture(autouse=True)
def _notes_an_opened_index(request, tmp_path):
    """After the test: did it open an index (in its own process or any it started)? The summary
    counts what share of such tests ran on both engines."""
    yield
    if any(any(tmp_path.glob(f"{depth}.index/CURRENT")) for depth in ("", "*/", "*/*/")):  # a generation served
        request.node.user_properties.append(("opened_index", True))
    elif getattr(getattr(request.node, "callspec", None), "params", {}).get("index_backend") == "postgres":
        request.node.user_properties.append(("opened_index", True))  # its fixture checked the server


def _test_and_engine(nodeid: str) -> tuple[str, str | None]:
    """("tests/x.py::test_y[other-params]", "local" | "postgres" | None) of a test's node id."""
    test, _, params = nodeid.partition("[")
    ids = params.rstrip("]").split("-") if params else []
    engine = next((p for p in ids if p in ("local", "postgres")), None)
    others = [p for p in ids if p not in ("local", "postgres")]
    return (f"{test}[{'-'.join(others)}]" if others else test), engine


def pytest_runtest_logreport(report):
    # runs in the controller under xdist too: count what ran on each engine for the summary below
    test, engine = _test_and_engine(report.nodeid)
    if report.when == "call" and (engine is not None or "both_backends" in report.keywords):
        _engine_runs.setdefault(test, set()).add(engine or "local")
    if "one_engine" in report.keywords:
        _one_engine.add(test)
    if report.when == "teardown" and (("opened_index", True) in report.user_properties or engine == "postgres"):
        _index_tests.add(test)  # a postgres run opened the server's index, whatever fixture made its vault


def _unexplained() -> list[str]:
    """Index tests that ran on one engine without a one_engine("why") marker."""
    both = {"local", "postgres"}
    return sorted(t for t in _index_tests if _engine_runs.get(t) != both and t not in _one_engine)


def pytest_terminal_summary(terminalreporter):
    both = sum(1 for test in _index_tests if _engine_runs.get(test) == {"local", "postgres"})
    if _engine_runs or _index_tests:
        share = f" ({100 * both / len(_index_tests):.0f}%)" if _index_tests else ""
        terminalreporter.write_line(
            f"index engines: {both} of {len(_index_tests)} tests that open an index ran on both engines{share} "
            "(local Tantivy + hnswlib, and PostgreSQL + pgvector)"
        )
    unexplained = _unexplained()
    if unexplained:
        terminalreporter.write_line(
            f"index engines: FAILED: {len(unexplained)} tests opened an index on one engine without saying why: "
            'mark each both_backends, or one_engine("why") when it is about one engine\'s own internals:'
        )
        for test in unexplained[:50]:
            terminalreporter.write_line(f"  {test}")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    # an index test on one engine without a reason fails the run (issue 41: "and the file says why")
    if not hasattr(session.config, "workerinput") and exitstatus == 0 and _unexplained():
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
