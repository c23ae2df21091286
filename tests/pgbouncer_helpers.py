"""A real PgBouncer (Debian's `pgbouncer`) in transaction mode in front of a test server.

It listens on loopback TCP (a port of its own) and reaches the server over its Unix socket; its
files sit in a folder under /tmp. As root it runs as the `pgserver` user that pgserver adds
(PgBouncer refuses to run as root). `PgBouncer.start` raises `PgBouncerMissing` when the binary
is not installed: the tests skip naming it, and the bench says so.
"""

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


class PgBouncerMissing(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PgBouncer:
    """`pool_size` server connections per database and user at most (`default_pool_size`), shared
    by up to `max_clients` client connections, in transaction mode."""

    def __init__(self, socket_dir: str, port: int, *, pool_size: int = 4, max_clients: int = 400):
        self.upstream = (socket_dir, port)
        self.pool_size, self.max_clients = pool_size, max_clients
        self.folder = Path(tempfile.mkdtemp(prefix="memvault-pgbouncer-", dir="/tmp"))
        self.port = free_port()
        self.process = None

    def dsn(self, database: str, user: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} dbname={database} user={user}"

    def start(self) -> "PgBouncer":
        binary = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None)
        if binary is None:
            raise PgBouncerMissing("Debian's pgbouncer is not installed (apt-get install -y pgbouncer)")
        host, port = self.upstream
        (self.folder / "users.txt").write_text('"postgres" ""\n"alice" ""\n')
        (self.folder / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={host} port={port}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.folder / 'users.txt'}\n"
            f"pool_mode = transaction\ndefault_pool_size = {self.pool_size}\nmin_pool_size = 0\n"
            f"admin_users = postgres\nmax_client_conn = {self.max_clients}\nmax_db_connections = {self.pool_size}\n"
            "server_reset_query =\nserver_check_delay = 0\nignore_startup_parameters = extra_float_digits\n"
            f"logfile = {self.folder / 'pgbouncer.log'}\npidfile = {self.folder / 'pgbouncer.pid'}\n"
        )
        user = None
        if os.geteuid() == 0:
            user = "pgserver"
            shutil.chown(self.folder, user)
            for path in self.folder.iterdir():
                shutil.chown(path, user)
        self.process = subprocess.Popen([binary, str(self.folder / "pgbouncer.ini")], user=user,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited at its start: {self.process.stderr.read().decode()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"pgbouncer did not listen on port {self.port} within 20 s")

    def reconnect(self) -> None:
        """PgBouncer's RECONNECT: every server connection is closed once its client releases it, so
        the next transaction runs on a new one (an idle one is closed at once)."""
        import psycopg

        with psycopg.connect(self.dsn("pgbouncer"), autocommit=True) as admin:
            admin.pgconn.exec_(b"RECONNECT")

    def log(self) -> str:
        path = self.folder / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        shutil.rmtree(self.folder, ignore_errors=True)
