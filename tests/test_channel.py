"""The owner's channel keeps a connection for a client's next call (issue 26): one connection, one
owner thread, many requests; and whatever closes a kept connection (the owner's idle timeout, a
stopped or restarted owner, an older owner that answers one request per connection, a fork) costs
the client nothing but a new connection."""

from __future__ import annotations

import itertools
import json
import os
import socket
import threading

import pytest

from memvault.indexer.engine import channel, protocol
from memvault.indexer.engine.channel import ChannelServer
from memvault.indexer.engine.client import EngineClient
from tests.engine_helpers import wait_for


class Recorder:
    """A handler answering `echo` with its args, noting which connection thread served each call."""

    def __init__(self):
        self.threads: list[int] = []  # per call, the number of the connection thread that served it
        self._local = threading.local()
        self._count = itertools.count()

    def __call__(self, message: dict) -> dict:
        if not hasattr(self._local, "number"):  # a thread's first call (thread idents are reused)
            self._local.number = next(self._count)
        self.threads.append(self._local.number)
        return protocol.success({"echo": message.get("args"), "op": message.get("op")})


@pytest.fixture
def socket_file(tmp_path):
    # a short folder of its own: a Unix socket's path must stay under 108 bytes
    folder = tmp_path / "s"
    folder.mkdir()
    return folder / "o.sock"


@pytest.fixture
def server(socket_file):
    recorder = Recorder()
    served = ChannelServer(socket_file, recorder)
    served.start()
    served.recorder = recorder
    yield served
    served.close()


def test_one_connection_carries_every_call(server, socket_file):
    client = EngineClient(socket_file, {"pid": 1})
    for n in range(5):
        assert client.call("echo", {"n": n}) == {"echo": {"n": n}, "op": "echo"}
    assert len(server.recorder.threads) == 5
    assert len(set(server.recorder.threads)) == 1  # one connection thread served them all
    client.close()


def test_calls_from_threads_at_once_each_get_an_answer_of_their_own(server, socket_file):
    client = EngineClient(socket_file, {"pid": 1})
    answers: dict[int, list] = {}

    def caller(k: int) -> None:
        answers[k] = [client.call("echo", {"k": k, "n": n})["echo"] for n in range(20)]

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert answers == {k: [{"k": k, "n": n} for n in range(20)] for k in range(6)}


def test_an_idle_connection_the_owner_closed_is_replaced(monkeypatch, server, socket_file):
    monkeypatch.setattr(channel, "IDLE_SECONDS", 0.2)
    client = EngineClient(socket_file, {"pid": 1})
    assert client.call("echo", {"n": 1})["echo"] == {"n": 1}
    wait_for(lambda: not server._open, what="the owner to close the idle connection")
    assert client.call("echo", {"n": 2})["echo"] == {"n": 2}
    assert len(set(server.recorder.threads)) == 2  # a new connection for the second call


def test_a_restarted_owner_answers_a_client_holding_the_old_ones_connection(socket_file):
    first, second = Recorder(), Recorder()
    old = ChannelServer(socket_file, first)
    old.start()
    client = EngineClient(socket_file, {"pid": 1})
    assert client.call("echo", {"n": 1})["echo"] == {"n": 1}
    old.close()
    new = ChannelServer(socket_file, second)
    new.start()
    try:
        assert client.call("echo", {"n": 2})["echo"] == {"n": 2}
        assert (len(first.threads), len(second.threads)) == (1, 1)
    finally:
        new.close()


def test_an_owner_that_answers_one_request_per_connection_is_still_served(socket_file):
    """An owner of an earlier memvault closes each connection after its answer."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(os.fspath(socket_file))
    listener.listen(8)
    seen = []

    def serve_one_per_connection():
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            with connection:
                line = connection.makefile("rb").readline()
                seen.append(json.loads(line)["args"]["n"])
                connection.sendall(protocol.encode(protocol.success({"n": seen[-1]})))

    threading.Thread(target=serve_one_per_connection, daemon=True).start()
    client = EngineClient(socket_file, {"pid": 1})
    try:
        assert [client.call("echo", {"n": n})["n"] for n in range(10)] == list(range(10))
        assert seen == list(range(10))  # each request carried out once
    finally:
        listener.close()


def test_a_forked_child_never_uses_its_parents_connection(server, socket_file):
    client = EngineClient(socket_file, {"pid": 1})
    assert client.call("echo", {"who": "parent"})["echo"] == {"who": "parent"}
    pid = os.fork()
    if pid == 0:  # the child: its answers must be its own
        try:
            ok = all(
                client.call("echo", {"who": "child", "n": n})["echo"] == {"who": "child", "n": n} for n in range(20)
            )
        except BaseException:
            ok = False
        os._exit(0 if ok else 1)
    for n in range(20):
        assert client.call("echo", {"who": "parent", "n": n})["echo"] == {"who": "parent", "n": n}
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def _raw(socket_file, data: bytes) -> list[dict]:
    """Send raw bytes on one connection, then read every answer line until the owner closes it."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(60)
        sock.connect(os.fspath(socket_file))
        try:
            sock.sendall(data)
        except OSError:
            pass
        sock.shutdown(socket.SHUT_WR)
        return [json.loads(line) for line in sock.makefile("rb")]


def test_requests_sent_together_are_answered_in_order(server, socket_file):
    lines = b"".join(protocol.encode(protocol.request("echo", {"n": n})) for n in range(3))
    assert [answer["result"]["echo"] for answer in _raw(socket_file, lines)] == [{"n": 0}, {"n": 1}, {"n": 2}]


@pytest.mark.parametrize("bad", [b"not json\n", b"[1, 2]\n", b'{"v": 99, "op": "echo"}\n', b"x" * 600 + b"\xff\n"])
def test_a_line_that_is_not_a_request_is_answered_and_ends_the_connection(server, socket_file, bad):
    after = protocol.encode(protocol.request("echo", {"n": 1}))
    answers = _raw(socket_file, bad + after)
    assert len(answers) == 1 and answers[0]["ok"] is False and answers[0]["error"]["message"]
    assert server.recorder.threads == []  # the request after it was never carried out


def test_an_oversized_line_is_refused_and_ends_the_connection(server, socket_file):
    after = protocol.encode(protocol.request("echo", {"n": 1}))
    answers = _raw(socket_file, b"x" * (protocol.MAX_MESSAGE_BYTES + 10) + b"\n" + after)
    assert len(answers) <= 1 and all(answer["ok"] is False for answer in answers)
    assert server.recorder.threads == []


def test_a_stopped_owner_carries_out_no_request_on_a_kept_connection(server, socket_file):
    client = EngineClient(socket_file, {"pid": 1})
    assert client.call("echo", {"n": 1})["echo"] == {"n": 1}
    server.close()
    with pytest.raises(protocol.EngineStuck, match="went away"):
        client.call("echo", {"n": 2})
    assert len(server.recorder.threads) == 1


def test_news_travels_on_the_kept_connection_and_is_never_answered(server, socket_file):
    """A client's `admitted` after each admission used to cost the owner a connection, an accept
    and a thread (5-8% of a busy owner's time); an owner that says `unanswered` takes it on a kept
    connection, carries it out, and answers the next call with that call's own answer."""
    client = EngineClient(socket_file, {"pid": 1, "unanswered": True})
    for n in range(5):
        client.tell("news", {"n": n})
        assert client.call("echo", {"n": n}) == {"echo": {"n": n}, "op": "echo"}
    assert len(server.recorder.threads) == 10 and len(set(server.recorder.threads)) == 1


def test_news_to_an_owner_that_answers_every_request_goes_on_a_connection_of_its_own(server, socket_file):
    client = EngineClient(socket_file, {"pid": 1})  # no `unanswered` in its hello: an earlier owner
    for n in range(3):
        client.tell("news", {"n": n})
        assert client.call("echo", {"n": n}) == {"echo": {"n": n}, "op": "echo"}
    wait_for(lambda: len(server.recorder.threads) == 6, what="the news to be carried out")
    assert len(set(server.recorder.threads)) == 4  # one kept connection for the calls, one per news


def test_news_is_refused_by_name_when_nothing_listens(socket_file):
    client = EngineClient(socket_file, {"pid": 1, "unanswered": True})
    with pytest.raises(protocol.EngineStuck, match="did not take 'admitted'"):
        client.tell("admitted", {"id": "x"})
