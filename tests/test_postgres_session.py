"""The PostgreSQL backend's connections (`ServerSession`) against a real server: a thread keeps
its connection through nested calls (so a transaction spans them), other threads run statements
at the same time on connections of their own, at most `size` of them, and a broken or closed
connection is never handed out again (one that died while idle is replaced without a failed call)."""

import threading

import psycopg
import pytest

from memvault.indexer.backend.base import IndexServerUnavailable
from memvault.indexer.backend.postgres.connection import ServerBounds, ServerSession


def backend_pid(conn) -> int:
    return conn.execute("SELECT pg_backend_pid()").fetchone()[0]


def test_a_call_nested_in_a_thread_uses_its_connection_and_transaction(postgres_dsn):
    session = ServerSession(postgres_dsn, size=2)
    with session() as outer, outer.transaction():
        outer.execute("CREATE TEMP TABLE seen (n int) ON COMMIT DROP")
        with session() as inner:
            assert inner is outer
            inner.execute("INSERT INTO seen VALUES (1)")  # inside the outer transaction: the table exists
        assert outer.execute("SELECT count(*) FROM seen").fetchone()[0] == 1
    session.close()


def test_threads_run_statements_at_once_on_their_own_connections(postgres_dsn):
    session = ServerSession(postgres_dsn, size=2)
    both_in = threading.Barrier(2, timeout=30)
    pids = []

    def hold_and_meet():
        with session() as conn:
            pids.append(backend_pid(conn))
            both_in.wait()  # only passes if the other thread holds a connection at the same time

    threads = [threading.Thread(target=hold_and_meet) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(pids)) == 2 and not both_in.broken
    with session() as conn:  # kept for the next call, not opened again
        assert backend_pid(conn) in pids
    session.close()


def test_a_third_thread_waits_for_a_connection_when_two_are_in_use(postgres_dsn):
    session = ServerSession(postgres_dsn, size=2)
    holding, release = threading.Barrier(3, timeout=30), threading.Event()
    got_third = threading.Event()
    pids = []

    def hold():
        with session() as conn:
            pids.append(backend_pid(conn))
            holding.wait()
            release.wait(30)

    def third():
        with session() as conn:
            pids.append(backend_pid(conn))
            got_third.set()

    holders = [threading.Thread(target=hold) for _ in range(2)]
    for thread in holders:
        thread.start()
    holding.wait()
    waiter = threading.Thread(target=third)
    waiter.start()
    assert not got_third.wait(0.5)  # both connections are held: the third call waits
    release.set()
    waiter.join(30)
    for thread in holders:
        thread.join()
    assert got_third.is_set() and len(set(pids)) == 2  # it was given one of the two, not a third
    session.close()


def terminate(dsn: str, pid: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,)).fetchone()[0]  # gone when it returns


def test_a_connection_the_server_killed_while_idle_is_replaced_before_it_is_handed_out(postgres_dsn):
    session = ServerSession(postgres_dsn, size=2)
    with session() as conn:
        first = backend_pid(conn)
    terminate(postgres_dsn, first)
    with session() as conn:  # no failed call: the dead one is dropped, a new one opened
        assert backend_pid(conn) != first
    session.close()


def test_a_connection_killed_during_a_call_fails_that_call_and_is_not_handed_out_again(postgres_dsn):
    session = ServerSession(postgres_dsn, size=2)
    with pytest.raises(IndexServerUnavailable):
        with session() as conn:
            first = backend_pid(conn)
            terminate(postgres_dsn, first)
            conn.execute("SELECT 1")
    with session() as conn:  # the next call reconnects
        assert backend_pid(conn) != first
    session.close()


def test_close_closes_idle_connections_and_the_session_reconnects(postgres_dsn):
    session = ServerSession(postgres_dsn, size=2)
    with session() as conn:
        kept = conn
    session.close()
    assert kept.closed
    with session() as conn:
        assert conn is not kept and conn.execute("SELECT 1").fetchone() == (1,)
    session.close()


def test_a_connection_in_use_at_close_is_closed_when_given_back(postgres_dsn):
    session = ServerSession(postgres_dsn, size=2)
    with session() as conn:
        session.close()
        assert conn.execute("SELECT 1").fetchone() == (1,)  # still usable by the thread that holds it
    assert conn.closed
    session.close()


def test_sessions_of_one_dsn_share_one_bounded_pool(postgres_dsn):
    first = ServerSession(postgres_dsn, bounds=ServerBounds(pool_size=1, timeout_seconds=2))
    second = ServerSession(postgres_dsn)
    assert second.pool is first.pool
    with first() as conn:
        pid = backend_pid(conn)
    with second() as conn:  # the pool's one connection, not a second session's own
        assert backend_pid(conn) == pid
    holding = threading.Event()
    release = threading.Event()

    def hold():
        with first():
            holding.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    holding.wait(30)
    with pytest.raises(IndexServerUnavailable, match=r"all 1 connections .*index.poolSize.* stayed in use for 2 s"):
        with second():  # another thread: it waits for the bound, then names it
            pass
    release.set()
    holder.join(30)
    first.close(), second.close()


def test_a_call_of_another_session_nested_in_a_thread_does_not_wait_on_that_thread(postgres_dsn):
    first = ServerSession(postgres_dsn, bounds=ServerBounds(pool_size=1, timeout_seconds=30))
    second = ServerSession(postgres_dsn)
    with first() as outer, outer.transaction():  # the pool's one connection, in a transaction
        with second() as inner:  # one more at once, beyond the bound: no wait on its own thread
            assert inner is not outer and backend_pid(inner) != backend_pid(outer)
            inner.execute("SELECT 1")
    assert len(first.pool.idle) == 1  # the one beyond the bound was closed when given back
    first.close(), second.close()
