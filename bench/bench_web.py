"""Web page load times: Recall and Status over a large vault, served by a real `memvault web`.

    python -m bench.bench_web --memories 100000 --tier journal --loads 40

Each page is fetched over HTTP on loopback by a client holding one keep-alive connection, and
timed from request to the last byte of the HTML. The Status page serves health from a snapshot
at most a few seconds old (refreshed in the background); `?fresh=1` waits for a new one and is
timed too. Printed beside them, measured in the same run:
the library calls the pages are made of (recall, health), timed in this process against the same
vault, and the server's own floor (the stylesheet). Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

from bench.generate import make_vault

REPO = Path(__file__).resolve().parent.parent
QUERIES = ["which color did we pick for deployment", "standup time", "billing service timeout", "Priya export command",
           "latency budget", "staging cluster migration", "on-call rota", "SSO rollout after the retro"]  # fmt: skip


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def line(label: str, samples: list[float]) -> str:
    return (
        f"  {label:<38} median {statistics.median(samples):7.1f} ms"
        f"   p95 {percentile(samples, 0.95):7.1f} ms   (n={len(samples)})"
    )


def start_server(root: Path) -> tuple[subprocess.Popen, str, int, str]:
    url_file = root.parent / ".bench-web-url"
    url_file.unlink(missing_ok=True)
    process = subprocess.Popen([sys.executable, "-m", "memvault", "--vault", str(root), "web", "--port", "0",
                                "--token-file", str(url_file)], cwd=REPO, stdout=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 300
    while not url_file.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("memvault web did not start")
        time.sleep(0.1)
    url = url_file.read_text().strip()
    base, _, token = url.partition("/?token=")
    return process, base, int(base.rsplit(":", 1)[1]), token


def fetch(connection: http.client.HTTPConnection, port: int, token: str, path: str) -> float:
    started = time.perf_counter()
    connection.request("GET", path, headers={"Host": f"127.0.0.1:{port}", "Authorization": f"Bearer {token}"})
    response = connection.getresponse()
    body = response.read()
    elapsed = (time.perf_counter() - started) * 1000
    if response.status != 200 or not body:
        raise SystemExit(f"{path} answered {response.status}: {body[:200]!r}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--tier", choices=["lite", "journal"], default="journal")
    parser.add_argument("--loads", type=int, default=40, help="timed loads of each page")
    parser.add_argument("--vault", type=Path, default=None, help="reuse (or create) this vault folder")
    args = parser.parse_args()
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from memvault.indexer.engine.store import MemoryStore
    from memvault.indexer.maintenance.health import check_health

    root = args.vault or Path(tempfile.mkdtemp(prefix="bench-web-")) / "vault"
    if not (root / "memvault.json").exists():
        started = time.monotonic()
        make_vault(root, args.memories, mode=args.tier)
        with MemoryStore.open(root, sync=False) as store:
            report = store.rebuild()
        print(f"built a {args.tier} vault of {report.memories} memories in {time.monotonic() - started:.0f} s: {root}")
    process, _base, port, token = start_server(root)
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        first = {path: fetch(connection, port, token, path) for path in ("/recall?q=warm+up", "/status")}
        recall = [
            fetch(connection, port, token, f"/recall?q={quote(QUERIES[i % len(QUERIES)])}") for i in range(args.loads)
        ]
        empty = [fetch(connection, port, token, "/recall") for _ in range(args.loads)]
        status = [fetch(connection, port, token, "/status") for _ in range(args.loads)]
        fresh = [fetch(connection, port, token, "/status?fresh=1") for _ in range(max(5, args.loads // 4))]
        css = [fetch(connection, port, token, "/static/style.css") for _ in range(args.loads)]
        connection.close()
        with MemoryStore.open(root, sync=False) as store:
            store.recall("warm up")
            library_recall = []
            for i in range(args.loads):
                started = time.perf_counter()
                store.recall(QUERIES[i % len(QUERIES)], limit=10)
                library_recall.append((time.perf_counter() - started) * 1000)
            library_health = []
            for _ in range(max(5, args.loads // 4)):
                started = time.perf_counter()
                check_health(store.layout, store.config)
                library_health.append((time.perf_counter() - started) * 1000)
    finally:
        process.terminate()
        process.wait(timeout=60)
    print(f"web page loads, {args.memories:,} memories ({args.tier}), {os.cpu_count()} cores; first loads "
          f"(cold): Recall {first['/recall?q=warm+up']:.0f} ms, Status {first['/status']:.0f} ms")  # fmt: skip
    print(line("Recall page with a search (HTML)", recall))
    print(line("Recall page, empty", empty))
    print(line("Status page (HTML)", status))
    print(line("Status page, check now (?fresh=1)", fresh))
    print(line("baseline: stylesheet (server floor)", css))
    print(line("baseline: store.recall in-process", library_recall))
    print(line("baseline: check_health in-process", library_health))


if __name__ == "__main__":
    main()
