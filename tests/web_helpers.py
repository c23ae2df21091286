"""What the web tests share: a demo vault, a real `memvault web` process, an in-process server,
and a headless Chromium (Debian's, driven by Playwright; never a downloaded browser).

    root = demo_vault(tmp_path)                       # fixtures/vault + graph, documents, runtime
    with WebProcess(root) as web:                      # `python -m memvault --vault root web --port 0`
        page.goto(web.url)                             # the printed URL, token included
    with InProcessServer(build_app(...), port) as s:   # uvicorn in a thread, for logic tests
        status, headers, body = s.get("/status.json", token=...)
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURE_VAULT = REPO / "fixtures" / "vault"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip
WAIT_SECONDS = 60.0

PEOPLE = ("Morgan", "Priya", "Sam", "Lena", "Tomas")
RELATIONS = [
    ("Morgan", "works_on", "Heron"), ("Priya", "works_on", "Heron"), ("Tomas", "works_on", "Heron"),
    ("Priya", "reports_to", "Morgan"), ("Morgan", "lives_in", "Rotterdam"), ("Sam", "lives_in", "Rotterdam"),
    ("Lena", "lives_in", "Rotterdam"), ("Heron", "deployed_in", "eu-west-1"), ("Morgan", "member_of", "Northwind"),
    ("Priya", "member_of", "Northwind"), ("Priya", "booked", "Haarlem"), ("Lena", "prefers", "async code reviews"),
]  # fmt: skip
TYPES = {"Heron": "project", "HERON": "project", "Rotterdam": "place", "Haarlem": "place", "eu-west-1": "place",
         "Northwind": "organization", "async code reviews": "concept"}  # fmt: skip


def entity_id(name: str) -> str:
    import hashlib

    return "e-" + hashlib.sha256(name.encode()).hexdigest()[:10]


def write_demo_graph(root: Path) -> None:
    """graph.jsonl over the fixture's real bullets: people, a project (with a second spelling), places."""
    from memvault.vault.graph import Entity, FactLink, Graph, render_graph
    from memvault.vault.note import parse

    graph = Graph()
    names = sorted(set(PEOPLE) | set(TYPES))
    for name in names:
        graph.add_entity(Entity(entity_id(name), name, TYPES.get(name, "person")))
    for a, relation, b in RELATIONS:
        graph.add_relation(entity_id(a), relation, entity_id(b))
    for path in sorted((root / "daily").glob("*.md")):
        for bullet in parse(path.read_text(encoding="utf-8", errors="replace")).bullets:
            mentioned = [n for n in names if n.casefold() in bullet.text.casefold()]
            if "heron" in bullet.text.casefold():
                mentioned.append("HERON")
            if bullet.has_explicit_id and mentioned:
                ids = tuple(dict.fromkeys(entity_id(n) for n in mentioned))
                graph.add_fact(FactLink(bullet.id, ids, 0.7, f"daily/{path.name}"))
    (root / "graph.jsonl").write_bytes(render_graph(graph))


def demo_vault(
    tmp_path: Path,
    *,
    mode: str = "journal",
    llm_endpoint: str | None = None,
    name: str = "demo",
    index_dsn: str | None = None,
) -> Path:
    """A copy of fixtures/vault in `mode`, with a graph, two documents, runtime memory and a space;
    with `index_dsn`, its index on that PostgreSQL database (vault name `name`)."""
    from memvault.indexer.engine.store import MemoryStore
    from memvault.vault.config import default_config_data, render_config
    from memvault.vault.documents import DocumentStore
    from memvault.vault.runtime.memory import RuntimeMemory
    from memvault.vault.spaces import SpaceCatalog

    root = tmp_path / name
    shutil.copytree(FIXTURE_VAULT, root)
    data = default_config_data(mode=mode, time_zone="Europe/Amsterdam")
    if llm_endpoint is not None:
        data["memory"]["llm"] = {
            "provider": "openai",
            "model": "loopback-chat",
            "endpoint": llm_endpoint,
            "timeoutMs": 20000,
        }
    (root / "memvault.json").write_bytes(render_config(data))
    if index_dsn is not None:
        from tests.postgres_helpers import on_server_database

        on_server_database(root, index_dsn, name)
    write_demo_graph(root)
    with MemoryStore.open(root) as store:
        store.rebuild()
        config = store.config
    documents = DocumentStore(root)
    documents.create("Deploy runbook", RUNBOOK, summary="How Heron ships to staging and production")
    documents.create(
        "Team directory",
        "- **Morgan**: engineering lead\n- **Priya**: data migration\n- **Sam**: on leave until March\n",
    )
    runtime = RuntimeMemory.for_vault(root, config)
    runtime.add("USER", "Prefers metric units and 24-hour times.", 4)
    runtime.add("USER", "Works Amsterdam hours; standup is at 10:00.", 3)
    runtime.add("MEMORY", "Heron launches in Q1; the deployment color is blue.", 5)
    SpaceCatalog(root / "spaces", time_zone="Europe/Amsterdam").create("Work", "Projects and people at Northwind")
    return root


RUNBOOK = """## Before you ship

1. Check the [status board](https://status.example.com) and the `staging` cluster in eu-west-1.
2. Announce the window in the team channel.

## Ship

```sh
make deploy ENV=staging
```

> Roll back with `make rollback` if the smoke tests fail.
"""


class WebProcess:
    """`memvault web` as a real subprocess on a free loopback port; stopped with SIGTERM."""

    def __init__(self, root: Path, *, env: dict | None = None):
        self.root = root
        self.env = {**os.environ, **(env or {})}
        self.token_file = root.parent / f".{root.name}-web-url"
        self.process: subprocess.Popen | None = None
        self.url = self.base = self.token = ""

    def __enter__(self) -> WebProcess:
        self.token_file.unlink(missing_ok=True)
        self.log = open(self.root.parent / f"{self.root.name}-web.log", "wb")
        command = [sys.executable, "-m", "memvault", "--vault", str(self.root), "web", "--port", "0",
                   "--token-file", str(self.token_file)]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, env=self.env, cwd=REPO)
        deadline = time.monotonic() + WAIT_SECONDS
        while not self.token_file.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise AssertionError(f"memvault web did not start: {self.output()}")
            time.sleep(0.05)
        self.url = self.token_file.read_text().strip()
        self.base, _, self.token = self.url.partition("/?token=")
        return self

    @property
    def port(self) -> int:
        return int(self.base.rsplit(":", 1)[1])

    def request(self, method: str, path: str, **kwargs):
        return InProcessServer.request(self, method, path, **kwargs)

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return (self.root.parent / f"{self.root.name}-web.log").read_text(errors="replace")

    def __exit__(self, *exc) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=WAIT_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


class InProcessServer:
    """uvicorn serving `app` on 127.0.0.1:`port` in a thread (real HTTP, for logic tests)."""

    def __init__(self, app, bound):
        import uvicorn

        self.bound = bound
        self.port = bound.port
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="error", access_log=False, lifespan="off"))
        self.server.install_signal_handlers = lambda: None  # not the main thread
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": list(bound.sockets)}, daemon=True)

    def __enter__(self) -> InProcessServer:
        self.thread.start()
        deadline = time.monotonic() + WAIT_SECONDS
        while not self.server.started:
            if time.monotonic() > deadline:
                raise AssertionError("the in-process web server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=WAIT_SECONDS)
        self.bound.close()

    def request(self, method: str, path: str, *, token: str | None = None, host: str | None = None,
                headers: dict | None = None, body: bytes | None = None, family=socket.AF_INET):  # fmt: skip
        address = "127.0.0.1" if family == socket.AF_INET else "::1"
        connection = http.client.HTTPConnection(address, self.port, timeout=WAIT_SECONDS)
        sent = {"Host": host or f"127.0.0.1:{self.port}", **(headers or {})}
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        try:
            connection.request(method, path, body=body, headers=sent)
            response = connection.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            connection.close()

    def get(self, path: str, **kwargs):
        return self.request("GET", path, **kwargs)

    def get_json(self, path: str, token: str):
        status, _headers, body = self.get(path, token=token)
        return status, json.loads(body)


def launch_chromium(playwright):
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def poll(condition, *, timeout: float = WAIT_SECONDS, interval: float = 0.25, what: str = "condition"):
    """Wait for `condition()` to return something truthy (generous timeout; never sleep-then-assert)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
