"""The sync API against a real redis-server."""
from __future__ import annotations

import os
import pydoc
import threading

import pytest

import dlock

WAIT = 10.0  # bound of every wait for something that must happen


_workers = []


def in_thread(fn):
    """Run fn() in another thread (another owner); its result or
    exception. The thread stays alive until the test session ends: the
    library knows a thread by pthread_self(), which a later thread may
    reuse once one has exited, and a thread that exits holding a lock
    would make that later thread look like its holder."""
    box = {}
    done = threading.Event()

    def run():
        try:
            box["v"] = fn()
        except BaseException as e:  # noqa: B902 - handed back
            box["e"] = e
        done.set()
        stay.wait()
    stay = threading.Event()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    _workers.append(stay)
    assert done.wait(WAIT * 2)
    return box


@pytest.fixture(autouse=True)
def _end_workers():
    yield
    while _workers:
        _workers.pop().set()


def test_lock_context_token_and_inspect(client):
    with client.lock("job", lease=10) as held:
        assert held.name == "job"
        assert held.kind == "lock"
        assert held.held and not held.lost
        assert 0 < held.validity <= 10
        assert held.owner.startswith(client.id)
        info = client.inspect("job")
        assert info.held and info.owner == held.owner
        assert info.last_token == held.token
        first = held.token
    assert not client.inspect("job").held
    with client.lock("job") as again:
        assert again.token > first


def test_busy_from_another_thread_keeps_message(client):
    with client.lock("job"):
        box = in_thread(lambda: client.acquire("job", wait=0))
    e = box["e"]
    assert isinstance(e, dlock.Busy) and isinstance(e, dlock.DlockError)
    assert e.code == -1 and e.name == "BUSY"
    assert "job" in str(e)


def test_wait_times_out(client):
    with client.lock("job"):
        box = in_thread(lambda: client.acquire("job", wait=0.2))
    assert isinstance(box["e"], dlock.TimedOut)
    assert isinstance(box["e"], TimeoutError)


def test_waiter_gets_lock_when_released(client):
    held = client.acquire("job")
    started = threading.Event()
    got = {}

    def waiter():
        started.set()
        with client.lock("job", wait=WAIT) as h:
            got["token"] = h.token
    t = threading.Thread(target=waiter)
    t.start()
    started.wait(WAIT)
    token = held.token
    held.release()
    t.join(WAIT * 2)
    assert got["token"] > token


def test_reentrant_in_one_thread(client):
    with client.lock("job") as a:
        with client.lock("job") as b:
            assert b.token == a.token
            assert client.inspect("job").reentry == 2
        assert client.inspect("job").held
    assert not client.inspect("job").held


def test_released_twice_and_used_after(client):
    h = client.acquire("job")
    h.release()
    with pytest.raises(dlock.DlockError, match="released"):
        h.release()
    with pytest.raises(dlock.DlockError):
        h.extend(5)
    assert not h.held


def test_bad_input_is_refused_clearly(client, server):
    with pytest.raises(dlock.InvalidArgument, match="NUL"):
        client.acquire("a\0b")
    with pytest.raises(dlock.InvalidArgument):
        client.acquire("job", lease=-1)
    with pytest.raises(dlock.InvalidArgument) as ei:
        client.acquire("", wait=0)
    assert ei.value.code == -20 and str(ei.value)
    with pytest.raises(dlock.InvalidArgument) as ei:
        client.acquire("job", lease=0)
    assert str(ei.value)
    with pytest.raises(TypeError):
        client.acquire(42)
    with pytest.raises(dlock.InvalidArgument) as ei:
        dlock.Client("redis://127.0.0.1:notaport", env=False)
    assert "notaport" in str(ei.value) or "port" in str(ei.value)
    with pytest.raises(dlock.InvalidArgument):
        dlock.Client(server.url, wait_strategy="bogus", env=False)


def test_server_down_is_an_error_class(fresh_server):
    url = fresh_server.url
    fresh_server.stop()
    with dlock.Client(url, timeout=1, env=False) as c:
        with pytest.raises(dlock.DlockError) as ei:
            c.acquire("job", wait=0)
    assert isinstance(ei.value, (dlock.ConnectionFailed,
                                 dlock.ServerTimeout))
    assert "127.0.0.1" in str(ei.value)


def test_release_after_key_gone_is_not_owner(client, rpy, prefix):
    h = client.acquire("job")
    rpy.delete("%s:{job}" % prefix)
    with pytest.raises(dlock.NotOwner):
        h.release()


def test_fence_retention_zero_leaves_no_key(server, rpy, prefix):
    c = dlock.Client(server.url, prefix=prefix, env=False,
                     fence_retention=0)
    try:
        h = c.acquire("gw")
        assert h.token > 0
        assert rpy.exists("%s:{gw}:f" % prefix) == 0
        h.release()
        assert rpy.exists("%s:{gw}" % prefix, "%s:{gw}:f" % prefix) == 0
    finally:
        c.close()
    d = dlock.Client(server.url, prefix=prefix, env=False)
    try:
        d.acquire("kept").release()
        assert rpy.exists("%s:{kept}:f" % prefix) == 1
    finally:
        d.close()
    with pytest.raises(dlock.InvalidArgument):
        dlock.Client(server.url, prefix=prefix, env=False,
                     fence_retention=0.5)


def test_with_body_error_wins_over_release_error(client, rpy, prefix):
    with pytest.raises(KeyError):
        with client.lock("job"):
            rpy.delete("%s:{job}" % prefix)
            raise KeyError("body")
    with pytest.raises(dlock.NotOwner):
        with client.lock("job"):
            rpy.delete("%s:{job}" % prefix)


def test_lost_callback_and_flag(client, rpy, prefix):
    lost = threading.Event()
    seen = {}

    def on_lost(held):
        seen["thread"] = threading.get_ident()
        seen["lost"] = held.lost
        seen["reason"] = held.lost_reason
        try:
            held.release()
        except RuntimeError as e:
            seen["release"] = e
        lost.set()

    held = client.acquire("job", lease=0.6, watchdog=True, on_lost=on_lost)
    rpy.delete("%s:{job}" % prefix)
    assert lost.wait(WAIT)
    assert seen["thread"] != threading.get_ident()
    assert seen["lost"] is True
    assert isinstance(seen["reason"], dlock.NotOwner)
    assert isinstance(seen["release"], RuntimeError)
    assert held.lost and not held.held
    with pytest.raises(dlock.Lost):
        held.release()


@pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnraisableExceptionWarning")
def test_lost_callback_that_raises_does_not_stop_anything(client, rpy,
                                                          prefix):
    called = threading.Event()

    def bad(held):
        called.set()
        raise ValueError("from the callback")

    held = client.acquire("job", lease=0.6, watchdog=True, on_lost=bad)
    rpy.delete("%s:{job}" % prefix)
    assert called.wait(WAIT)
    with pytest.raises(dlock.Lost):
        held.release()
    with client.lock("job", wait=0):
        pass


def test_watchdog_keeps_a_short_lease(client):
    with client.lock("job", lease=0.3, watchdog=True) as held:
        before = client.stats()["renewals"]
        deadline = threading.Event()
        while client.stats()["renewals"] < before + 3:
            deadline.wait(0.05)
        assert held.held
        assert client.inspect("job").held


def test_extend(client):
    with client.lock("job", lease=2) as held:
        held.extend(60)
        assert client.inspect("job").ttl > 30


def test_semaphore(client):
    sem = client.semaphore("pool", 2)
    a = sem.acquire()
    b = in_thread(lambda: sem.acquire(wait=0))["v"]
    assert b.token > a.token
    assert isinstance(in_thread(lambda: sem.acquire(wait=0))["e"],
                      dlock.Busy)
    info = sem.inspect()
    assert info.kind == "semaphore" and info.limit == 2
    assert info.holders == 2 and len(info.listed) == 2
    assert sem.set_limit(3) == 2
    sem.limit = 3
    c = sem.acquire(wait=0)
    for h in (a, b, c):
        h.release()
    with pytest.raises(dlock.InvalidArgument, match="lock|semaphore"):
        client.acquire("pool", wait=0)


def test_rwlock_readers_share_writer_waits(client):
    rw = client.rwlock("cfg")
    r1 = rw.read().acquire()
    r2 = in_thread(lambda: rw.read(wait=0).acquire())["v"]
    assert rw.inspect().holders == 2
    assert isinstance(in_thread(lambda: rw.write(wait=0).acquire())["e"],
                      dlock.Busy)
    r1.release()
    r2.release()
    with rw.write(wait=0) as w:
        reader = w.downgrade()
        assert reader.kind == "read"
        assert rw.inspect().holders == 1
        assert not w.held
        reader.release()


def test_lock_all(client):
    with client.lock_all(["b", "a", "c"], lease=5) as helds:
        assert [h.name for h in helds] == ["b", "a", "c"]
        assert len({h.token for h in helds}) == 3
        assert all(client.inspect(n).held for n in "abc")
    assert not any(client.inspect(n).held for n in "abc")
    with client.lock("c"):
        e = in_thread(lambda: client.lock_all(["a", "c"], wait=0)
                      .acquire())["e"]
        assert isinstance(e, dlock.Busy) and "c" in str(e)
        assert not client.inspect("a").held
    with pytest.raises(dlock.InvalidArgument):
        client.lock_all(["a", "a"]).acquire()


def test_election(client):
    el = client.election("svc")
    assert not el.leader().leading
    with el.campaign("host:1", wait=0) as lead:
        info = el.leader()
        assert info.leading and info.value == "host:1"
        assert info.epoch == lead.epoch
        assert isinstance(
            in_thread(lambda: el.campaign("host:2", wait=0))["e"],
            dlock.Busy)
        lead.proclaim("host:3")
        changed = el.observe(info, timeout=WAIT)
        assert changed is not None and changed.value == "host:3"
        assert el.observe(changed, timeout=0.1) is None
    assert not el.leader().leading


def test_fenced_values(client):
    key = "fence:%d" % os.getpid()
    assert client.fenced_get(key) == dlock.FencedValue(None, 0)
    client.fenced_set(key, 5, b"five")
    assert client.fenced_get(key) == dlock.FencedValue(b"five", 5)
    with pytest.raises(dlock.Stale):
        client.fenced_set(key, 4, "four")
    assert client.fenced_read(key, 7) == dlock.FencedValue(b"five", 7)
    with pytest.raises(dlock.Stale):
        client.fenced_set(key, 6, b"six")


def test_check_token(client):
    with client.lock("job") as h:
        assert client.check_token("job", h.token)
        t = h.token
    assert not client.check_token("job", t)


def test_adopt_across_clients(server, prefix):
    with dlock.Client(server.url, prefix=prefix, env=False) as a, \
            dlock.Client(server.url, prefix=prefix, env=False) as b:
        h = a.acquire("job")
        owner, token = h.owner, h.token
        h.detach()
        assert a.inspect("job").held
        b.adopt("job", owner, token).release()
        assert not a.inspect("job").held
        with pytest.raises(dlock.NotOwner):
            b.adopt("job", owner, token)


def test_list_check_topology_stats(server, prefix):
    with dlock.Client(server.url, prefix=prefix, holder_info=True,
                      holder_label="pytest", env=False) as c:
        with c.lock("x1"), c.lock("x2"):
            entries = c.list("x*")
            assert [e.name for e in entries] == ["x1", "x2"]
            h = entries[0].info.holder
            assert h is not None and h.pid == os.getpid()
            assert h.label == "pytest"
        assert isinstance(c.check(), list)
        assert any(c.topology())
        st = c.stats()
        assert st["acquisitions"] >= 2 and set(st) >= {"requests", "lost"}
        m = c.metrics()
        assert m.stats["acquisitions"] >= 2
        assert m.hold.count == 2 == sum(n for _, n in m.hold.buckets)
        assert m.acquire_wait.count >= 2 and m.acquire_wait.sum > 0
        assert m.hold.buckets[0][0] == 0.0001
        assert m.hold.buckets[-1][0] == float("inf")


def test_environment_like_the_cli(server, prefix, monkeypatch, rpy):
    monkeypatch.setenv("DLOCK_SERVERS", " %s , " % server.url)
    monkeypatch.setenv("DLOCK_PREFIX", prefix + "env")
    with dlock.Client() as c:
        assert c.servers == (server.url,)
        with c.lock("job"):
            assert rpy.exists("%senv:{job}" % prefix)
    monkeypatch.setenv("DLOCK_SERVERS", " , ")
    with pytest.raises(dlock.InvalidArgument, match="DLOCK_SERVERS"):
        dlock.Client()
    monkeypatch.setenv("DLOCK_SERVERS", server.url)
    monkeypatch.setenv("DLOCK_LOCK_DELAY", "0")  # off: allowed
    monkeypatch.setenv("DLOCK_TIMEOUT", "1.5")
    dlock.Client().close()
    for bad in ("soon", "5s", " 5", "-1", "0"):
        monkeypatch.setenv("DLOCK_TIMEOUT", bad)
        with pytest.raises(dlock.InvalidArgument, match="DLOCK_TIMEOUT"):
            dlock.Client()
    monkeypatch.setenv("DLOCK_TIMEOUT", "1")
    monkeypatch.setenv("DLOCK_WAIT_REPLICAS", "two")
    with pytest.raises(dlock.InvalidArgument, match="DLOCK_WAIT_REPLICAS"):
        dlock.Client()


def test_unix_socket_url(server, prefix):
    with dlock.Client(server.unix_url, prefix=prefix, env=False) as c:
        with c.lock("job") as h:
            assert h.token


def test_close_cancels_a_waiter_and_refuses_later_calls(server, prefix):
    c = dlock.Client(server.url, prefix=prefix, env=False)
    other = dlock.Client(server.url, prefix=prefix, env=False)
    held = other.acquire("job")
    box = {}
    entered = threading.Event()

    def waiter():
        entered.set()
        try:
            c.acquire("job")  # forever, until close() cancels it
        except dlock.DlockError as e:
            box["e"] = e
    t = threading.Thread(target=waiter)
    t.start()
    entered.wait(WAIT)
    c.close()
    t.join(WAIT)
    assert not t.is_alive()
    assert isinstance(box["e"], dlock.DlockError)
    assert c.closed
    with pytest.raises(dlock.DlockError, match="closed"):
        c.acquire("job")
    held.release()
    other.close()
    c.close()  # idempotent


def test_cancel(client, server, prefix):
    with dlock.Client(server.url, prefix=prefix, env=False) as other:
        with other.lock("job"):
            box = {}

            def waiter():
                try:
                    client.acquire("job", wait=WAIT * 3)
                except dlock.DlockError as e:
                    box["e"] = e
            t = threading.Thread(target=waiter)
            t.start()
            while t.is_alive():
                client.cancel()
                t.join(0.05)
            assert isinstance(box["e"], dlock.Canceled)


def test_fork_child_must_make_its_own_client(client, server, prefix):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        out = []
        try:
            client.acquire("job")
            out.append("parent client worked")
        except dlock.DlockError as e:
            out.append("refused" if "fork" in str(e) else str(e))
        try:
            with dlock.Client(server.url, prefix=prefix, env=False) as c2:
                with c2.lock("job", wait=0) as h:
                    out.append("own client %d" % (h.token > 0))
        except BaseException as e:  # noqa: B902 - reported to the parent
            out.append(repr(e))
        os.write(w, "|".join(out).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    assert data.decode() == "refused|own client 1"
    with client.lock("job", wait=0):  # the parent's client still works
        pass


def test_help_is_useful():
    text = pydoc.render_doc(dlock)
    for word in ("Client", "lock", "DLOCK_LIBRARY", "redis_compat"):
        assert word in text
    assert "lease" in pydoc.render_doc(dlock.Client.lock)
    assert dlock.library_version()
    assert os.path.exists(dlock.library_path()) or \
        "libdlock" in dlock.library_path()


def test_events(server, prefix):
    seen = []
    with dlock.Client(server.url, prefix=prefix, env=False,
                      on_event=seen.append) as c:
        with c.lock("job") as h:
            token = h.token
            assert isinstance(in_thread(lambda: c.acquire("job", wait=0))
                              ["e"], dlock.Busy)
        kinds = [(e.kind, e.name) for e in seen]
        assert kinds == [("acquired", "job"), ("busy", "job"),
                         ("released", "job")]
        assert seen[0].token == token and seen[2].status == 0
        assert seen[2].duration >= 0


def test_lazy_token(server, prefix, rpy):
    """The string layout's plain acquire (notify, no fence retention)
    issues the token when it is first read: a hold deleted before that
    read raises NotOwner (never a token of 0 to write with); a live one
    gets a token above the last holder's, kept for later reads."""
    c = dlock.Client(server.url, prefix=prefix, env=False, layout="string",
                     wait_strategy="notify", fence_retention=0)
    try:
        with c.lock("lt", lease=10) as first:
            assert rpy.get(prefix + ":{lt}").endswith(b" 1 0")
            t1 = first.token
            assert t1 > 0 and first.token == t1
        held = c.lock("lt", lease=10).acquire(wait=0)
        rpy.delete(prefix + ":{lt}")
        with pytest.raises(dlock.NotOwner):
            held.token
        with pytest.raises(dlock.NotOwner):
            held.token
        with pytest.raises(dlock.NotOwner):
            held.release()
        with c.lock("lt", lease=10) as third:
            assert third.token > t1
    finally:
        c.close()


def test_string_layout(server, prefix, rpy, monkeypatch):
    """layout="string" (or DLOCK_LAYOUT=string): the lock is one string
    key; a hash-layout client refuses it; a bad value is refused."""
    c = dlock.Client(server.url, prefix=prefix, env=False, layout="string")
    h = dlock.Client(server.url, prefix=prefix, env=False)
    try:
        with c.lock("sl", lease=10) as held:
            assert rpy.type(prefix + ":{sl}") == b"string"
            assert held.token > 0
            with pytest.raises(dlock.InvalidArgument):
                h.lock("sl").acquire(wait=0)
        assert not rpy.exists(prefix + ":{sl}")
    finally:
        c.close()
        h.close()
    monkeypatch.setenv("DLOCK_LAYOUT", "string")
    with dlock.Client(server.url, prefix=prefix) as e:
        with e.lock("sl2"):
            assert rpy.type(prefix + ":{sl2}") == b"string"
    with pytest.raises(dlock.InvalidArgument):
        dlock.Client(server.url, env=False, layout="tree")
    with pytest.raises(dlock.InvalidArgument) as ei:
        dlock.Client(server.url, env=False, layout="string",
                     holder_info=True)
    assert ei.value.code == -20
