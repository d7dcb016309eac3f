"""The cache stores: the CacheStore protocol, bounds, persistence, several processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import warnings

import pytest

import greenhttp
from greenhttp.cache_stores import CacheStore, MemoryCacheStore, SqliteCacheStore
from greenhttp.errors import InvalidArgumentError


def key(path="/", method="GET", headers=None, origin="http://h:1"):
    return {"origin": origin, "method": method, "path": path, "headers": headers or {}}


def value(life=60.0, **extra):
    now = time.time()
    v = {"status_code": 200, "status_message": "OK", "headers": {"a": "1", "b": ["x", "y"]},
         "cached_at": now, "stale_at": now + life, "delete_at": now + 2 * life}
    v.update(extra)
    return v


def put(store, k, v, body=b"hello", chunks=1):
    writer = store.create_write_stream(k, v)
    assert writer is not None
    step = max(1, len(body) // chunks)
    for i in range(0, len(body), step):
        assert writer.write(body[i : i + step])
    writer.end()


@pytest.fixture(params=["memory", "sqlite-memory", "sqlite-file"])
def store(request, tmp_path):
    if request.param == "memory":
        s = MemoryCacheStore()
    elif request.param == "sqlite-memory":
        s = SqliteCacheStore()
    else:
        s = SqliteCacheStore(tmp_path / "cache.sqlite")
    yield s
    if isinstance(s, SqliteCacheStore):
        s.close()


def test_exported_and_follow_the_protocol(store):
    assert greenhttp.MemoryCacheStore is MemoryCacheStore and greenhttp.SqliteCacheStore is SqliteCacheStore
    assert greenhttp.cache_stores.CacheStore is CacheStore
    assert isinstance(store, CacheStore)


def test_round_trip(store):
    put(store, key(), value(etag='"e"', cache_control_directives={"max-age": 60}), b"hello world", chunks=3)
    got = store.get(key())
    assert got["body"] == b"hello world"
    assert got["status_code"] == 200 and got["status_message"] == "OK"
    assert got["headers"] == {"a": "1", "b": ["x", "y"]}
    assert got["etag"] == '"e"' and got["cache_control_directives"] == {"max-age": 60}
    assert store.get(key(method="HEAD")) is None
    assert store.get(key("/other")) is None


def test_vary_selects_the_variant(store):
    put(store, key(headers={"accept": "a"}), value(vary={"accept": "a"}), b"A")
    put(store, key(headers={"accept": "b"}), value(vary={"accept": "b"}), b"B")
    put(store, key(headers={"accept": "b"}), value(vary={"accept": "b"}), b"B2")  # replaces its variant
    assert store.get(key(headers={"accept": "a"}))["body"] == b"A"
    assert store.get(key(headers={"accept": "b"}))["body"] == b"B2"
    assert store.get(key(headers={"accept": "c"})) is None
    assert store.get(key()) is None


def test_expired_entries_are_never_returned(store):
    now = time.time()
    put(store, key(), value(cached_at=now - 10, stale_at=now - 5, delete_at=now - 1))
    assert store.get(key()) is None


def test_delete_removes_every_method_and_variant(store):
    put(store, key(), value())
    put(store, key(method="HEAD"), value(), b"")
    put(store, key(headers={"x": "1"}), value(vary={"x": "1"}))
    put(store, key("/keep"), value())
    store.delete(key(method="POST"))
    assert store.get(key()) is None and store.get(key(method="HEAD")) is None
    assert store.get(key(headers={"x": "1"})) is None
    assert store.get(key("/keep")) is not None


def test_destroyed_writer_stores_nothing(store):
    writer = store.create_write_stream(key(), value())
    writer.write(b"partial")
    writer.destroy()
    assert store.get(key()) is None


def test_bad_keys_and_values_are_type_errors(store):
    with pytest.raises(TypeError):
        store.get({"origin": "http://h", "path": "/"})
    with pytest.raises(TypeError):
        store.create_write_stream(key(), {"status_code": "200"})
    with pytest.raises(TypeError):
        store.create_write_stream(key(), value(etag=1))


@pytest.mark.parametrize("bad", [{"origin": None}, {"method": 1}, {"path": b"/"}, {"headers": 5}])
def test_a_key_of_the_wrong_type_is_a_type_error_not_a_miss(store, bad):
    put(store, key(), value(vary={"accept": None}))
    with pytest.raises(TypeError):
        store.get({**key(), **bad})
    store.delete(key())
    with pytest.raises(TypeError):
        store.get({**key(), **bad})


def test_max_entry_size_declines_large_bodies():
    for s in (MemoryCacheStore(max_entry_size=4), SqliteCacheStore(max_entry_size=4)):
        writer = s.create_write_stream(key(), value())
        assert writer.write(b"1234")
        assert writer.write(b"5") is False
        writer.end()
        assert s.get(key()) is None


def test_memory_store_is_bounded_by_count_in_lru_order():
    s = MemoryCacheStore(max_count=3)
    for i in range(3):
        put(s, key(f"/{i}"), value())
    assert s.get(key("/0")) is not None  # now the most recently used
    for i in range(3, 6):
        put(s, key(f"/{i}"), value())
        assert s.count == 3
    assert [s.get(key(f"/{i}")) is not None for i in range(6)] == [False, False, False, True, True, True]
    put(s, key("/6"), value())
    assert s.count == 3 and s.is_full()


def test_memory_store_is_bounded_by_size():
    s = MemoryCacheStore(max_size=10)
    put(s, key("/a"), value(), b"123456")
    put(s, key("/b"), value(), b"1234")
    assert s.size == 10 and s.is_full()
    put(s, key("/c"), value(), b"12")
    assert s.size == 6 and s.get(key("/a")) is None
    put(s, key("/d"), value(), b"x" * 11)  # larger than the whole store
    assert s.get(key("/d")) is None and s.size <= 10
    s.clear()
    assert s.size == 0 and s.count == 0


@pytest.mark.parametrize("option", ["max_count", "max_size", "max_entry_size"])
@pytest.mark.parametrize("bad", [-1, 1.5, "10", True])
def test_memory_store_options_are_validated(option, bad):
    with pytest.raises(InvalidArgumentError, match=option) as info:
        MemoryCacheStore(**{option: bad})
    assert isinstance(info.value, TypeError)


def test_sqlite_options_are_validated():
    with pytest.raises(InvalidArgumentError, match="max_count"):
        SqliteCacheStore(max_count=-1)
    with pytest.raises(TypeError, match="location"):
        SqliteCacheStore(location=5)
    with pytest.raises(InvalidArgumentError, match="busy_timeout"):
        SqliteCacheStore(busy_timeout=-1)
    with pytest.raises(InvalidArgumentError, match="busy_timeout"):
        SqliteCacheStore(busy_timeout=float("nan"))


_LOCK_HOLDER = """
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("BEGIN IMMEDIATE")
print("held", flush=True)
time.sleep(0.3)
c.execute("COMMIT")
"""


@pytest.mark.parametrize("busy_timeout", [5, 3_000_000, float("inf")])
def test_sqlite_a_long_busy_timeout_waits_for_another_process(tmp_path, busy_timeout):
    # sqlite3 takes the timeout in milliseconds in a C int: past ~24.8 days (and for inf)
    # it overflowed into "never wait", so a write under contention was dropped at once.
    path = str(tmp_path / "busy.sqlite")
    with SqliteCacheStore(path, busy_timeout=busy_timeout) as s:
        holder = subprocess.Popen([sys.executable, "-c", _LOCK_HOLDER, path], stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "held"
            s.set(key(), {**value(), "body": b"stored"})  # waits for the holder's COMMIT
            assert holder.wait(timeout=5) == 0
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.wait()
            holder.stdout.close()
        assert s.get(key())["body"] == b"stored"


def test_sqlite_store_prunes_past_max_count():
    s = SqliteCacheStore(max_count=10)
    for i in range(25):
        put(s, key(f"/{i}"), value())
        assert s.size <= 10
    assert s.get(key("/24")) is not None and s.get(key("/0")) is None
    s.close()
    with pytest.raises(Exception, match="closed"):
        s.get(key())


def test_every_call_on_a_closed_sqlite_store_raises_but_a_write_in_flight_is_dropped_quietly(tmp_path):
    import sqlite3

    s = SqliteCacheStore(tmp_path / "closed.sqlite")
    in_flight = s.create_write_stream(key("/in-flight"), value())
    assert in_flight.write(b"body")
    s.close()
    in_flight.end()  # a response that was streaming when the store closed: nothing to store it in
    for call in (
        lambda: s.get(key()),
        lambda: s.create_write_stream(key(), value()),
        lambda: s.set(key(), {**value(), "body": b"x"}),
        lambda: s.delete(key()),
        lambda: s.size,
    ):
        with pytest.raises(sqlite3.ProgrammingError, match="closed"):
            call()
    with SqliteCacheStore(tmp_path / "closed.sqlite") as again:
        assert again.size == 0


def test_a_sqlite_store_that_cannot_open_its_file_leaves_it_closed(tmp_path):
    import sqlite3

    path = tmp_path / "not-a-database"
    path.write_bytes(b"plain text, not SQLite" * 100)
    with pytest.raises(sqlite3.DatabaseError) as info:
        SqliteCacheStore(path)
    # While the error (and its traceback) lives, the connection it made must not keep the file open.
    assert info.value is not None
    opened = {os.path.realpath(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")}
    assert str(path.resolve()) not in opened


def test_sqlite_store_survives_a_restart(tmp_path):
    path = tmp_path / "c.sqlite"
    with SqliteCacheStore(path) as s:
        put(s, key(), value(), b"persisted")
    with SqliteCacheStore(str(path)) as s:
        assert s.get(key())["body"] == b"persisted"


_WRITER = textwrap.dedent("""
    import sys, time
    from greenhttp.cache_stores import SqliteCacheStore
    path, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    s = SqliteCacheStore(path)
    now = time.time()
    for i in range(n):
        k = {"origin": "http://h", "method": "GET", "path": f"/{tag}/{i}", "headers": {}}
        w = s.create_write_stream(k, {"status_code": 200, "status_message": "OK", "headers": {},
                                      "cached_at": now, "stale_at": now + 60, "delete_at": now + 120})
        w.write(tag.encode() * 100)
        w.end()
    got = sum(s.get({"origin": "http://h", "method": "GET", "path": f"/{tag}/{i}"}) is not None for i in range(n))
    print(got)
""")


def test_sqlite_store_is_shared_by_several_processes(tmp_path):
    path = str(tmp_path / "shared.sqlite")
    SqliteCacheStore(path).close()  # create the schema once
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, path, tag, "150"], stdout=subprocess.PIPE, text=True)
        for tag in ("a", "b", "c")
    ]
    try:
        outs = [proc.communicate(timeout=30)[0] for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [proc.returncode for proc in procs] == [0, 0, 0]
    assert [o.strip() for o in outs] == ["150", "150", "150"]
    with SqliteCacheStore(path) as s:
        assert s.size == 450
        assert s.get(key("/b/149", origin="http://h"))["body"] == b"b" * 100


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_sqlite_store_reconnects_in_a_forked_child(tmp_path):
    s = SqliteCacheStore(tmp_path / "fork.sqlite")
    put(s, key("/parent"), value())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork() with threads around
        pid = os.fork()
    if pid == 0:  # the child: must not reuse the parent's connection
        try:
            put(s, key("/child"), value(), b"from the child")
            code = 0 if s.get(key("/parent")) is not None else 1
        except BaseException:
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert s.get(key("/child"))["body"] == b"from the child"
    s.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_childs_writes_survive_the_parent_closing_its_store(tmp_path):
    # The child's new connection must hold its own file locks: with the parent's connection
    # still open in the child, SQLite took the parent's locks as the child's, so the parent's
    # close() found no other user, checkpointed and deleted the WAL the child then wrote to.
    path = tmp_path / "fork.sqlite"
    s = SqliteCacheStore(path)
    put(s, key("/parent"), value())
    reconnected_r, reconnected_w = os.pipe()
    closed_r, closed_w = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork() with threads around
        pid = os.fork()
    if pid == 0:
        code = 2
        try:
            code = 0 if s.get(key("/parent")) is not None else 1  # reconnects in the child
            os.write(reconnected_w, b"1")
            os.read(closed_r, 1)
            put(s, key("/child"), value(), b"from the child")
        finally:
            os._exit(code)
    os.close(reconnected_w)  # so a read sees the end, should the child die
    os.close(closed_r)
    try:
        assert os.read(reconnected_r, 1) == b"1"
        s.close()
        os.write(closed_w, b"1")
    finally:
        os.close(reconnected_r)
        os.close(closed_w)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    with SqliteCacheStore(path) as again:
        assert again.get(key("/child"))["body"] == b"from the child"
