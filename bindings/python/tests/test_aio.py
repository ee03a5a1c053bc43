"""dlock.aio, the asyncio API, against a real redis-server.

Needs pytest-asyncio (Debian: python3-pytest-asyncio, in scripts/deps.sh).
No wall-clock thresholds: every wait that must end is bounded by WAIT and
only fails the test when the thing never happens."""
from __future__ import annotations

import asyncio
import gc
import os
import pydoc
import threading

import pytest

try:
    import pytest_asyncio  # noqa: F401 - the plugin must be there
except ImportError:  # a clear failure, not a silent skip of the suite
    raise ImportError("dlock.aio's tests need pytest-asyncio (Debian: "
                      "python3-pytest-asyncio; scripts/deps.sh installs it)")

import dlock
import dlock.aio
from dlock.aio import AsyncClient

WAIT = 10.0
pytestmark = pytest.mark.asyncio


@pytest.fixture
def make(server, prefix):
    """make(): an AsyncClient of the shared server under the test's
    prefix (closed at the end)."""
    made = []

    def mk(**kw):
        kw.setdefault("env", False)
        c = AsyncClient(server.url, prefix=prefix, **kw)
        made.append(c)
        return c
    yield mk
    for c in made:
        c.close()


async def until(pred, what):
    """Poll PRED (sync or async) until true, at most WAIT seconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + WAIT
    while True:
        v = pred()
        if asyncio.iscoroutine(v):
            v = await v
        if v:
            return
        assert loop.time() < end, "never happened: " + what
        await asyncio.sleep(0.01)


def threads():
    return len(os.listdir("/proc/self/task"))


async def test_lock_context_token_and_busy_message(make):
    a, b = make(), make()
    async with a.lock("job", lease=10, timeout=5) as held:
        assert held.name == "job" and held.kind == "lock"
        assert held.held and not held.lost
        assert 0 < held.validity <= 10
        assert held.owner.startswith(a.sync.id)
        assert a.sync.inspect("job").last_token == held.token
        with pytest.raises(dlock.Busy) as ei:
            await b.lock("job", timeout=0)
        assert "job" in str(ei.value) and ei.value.code == -1
        first = held.token
    assert not held.held
    held = await b.lock("job", timeout=0)  # `await lock` acquires
    assert held.token > first
    await held.release()
    assert not a.sync.inspect("job").held


async def test_timeout_and_waiter_gets_it_on_release(make):
    a, b = make(), make()
    h = await a.lock("job").acquire()
    with pytest.raises(dlock.TimedOut):
        await b.lock("job", timeout=0.2).acquire()
    waiter = asyncio.ensure_future(b.lock("job", timeout=WAIT).acquire())
    await until(lambda: a.sync.inspect("job").waiters >= 1, "queued")
    assert not waiter.done()
    await h.release()
    got = await asyncio.wait_for(waiter, WAIT)
    assert got.held and got.token > h.token
    await got.release()


@pytest.mark.parametrize("how", ["cancel", "wait_for"])
async def test_cancelled_waiter_gives_its_queue_place_back(make, how):
    """A task waiting in the fair queue is cancelled: the library's
    operation is cancelled (dlock_op_cancel) and leaves the queue at
    once, so the waiter behind it is next."""
    a, b, c = make(), make(), make()
    h = await a.lock("q", lease=30)
    if how == "cancel":
        t = asyncio.ensure_future(b.lock("q").acquire())
        await until(lambda: a.sync.inspect("q").fair_queue == 1, "queued")
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
    else:
        t = asyncio.ensure_future(asyncio.wait_for(b.lock("q").acquire(),
                                                   0.3))
        await until(lambda: a.sync.inspect("q").fair_queue == 1, "queued")
        with pytest.raises(asyncio.TimeoutError):
            await t
    # The place is given back: the queue empties without any release.
    await until(lambda: a.sync.inspect("q").fair_queue == 0,
                "the cancelled waiter left the fair queue")
    third = asyncio.ensure_future(c.lock("q").acquire())
    await until(lambda: a.sync.inspect("q").fair_queue == 1, "c queued")
    await h.release()
    got = await asyncio.wait_for(third, WAIT)
    assert got.owner.startswith(c.sync.id)
    await got.release()
    # b's loop holds nothing: it can take the lock at once.
    h2 = await b.lock("q", timeout=0)
    await h2.release()


async def test_tasks_of_one_client_queue_for_a_name(make):
    c = make()
    order = []

    async def worker(i):
        async with c.lock("same", lease=10) as h:
            order.append(("in", i))
            await asyncio.sleep(0.01)
            order.append(("out", i))
            return h.token
    tokens = await asyncio.wait_for(
        asyncio.gather(*[worker(i) for i in range(5)]), WAIT)
    assert len(set(tokens)) == 5
    # never two inside at once
    for k in range(0, len(order), 2):
        assert order[k][0] == "in" and order[k + 1] == ("out", order[k][1])
    # try once while another task holds it: Busy, with a message
    h = await c.lock("same")
    with pytest.raises(dlock.Busy, match="another task"):
        await c.lock("same", timeout=0)
    # a task queued in the client and cancelled leaves the queue
    t = asyncio.ensure_future(c.lock("same").acquire())
    await asyncio.sleep(0.05)
    t.cancel()
    with pytest.raises(asyncio.CancelledError):
        await t
    with pytest.raises(dlock.TimedOut, match="another task"):
        await c.lock("same", timeout=0.1)
    await h.release()
    h = await c.lock("same", timeout=0)
    await h.release()


async def test_lost_lease_sets_flag_and_calls_back(make, rpy, prefix):
    c = make()
    seen = asyncio.Event()
    got = []

    def on_lost(h):
        got.append(h)
        seen.set()
    h = await c.lock("job", lease=0.3, on_lost=on_lost)
    rpy.delete("%s:{job}" % prefix)
    await asyncio.wait_for(seen.wait(), WAIT)
    assert got == [h] and h.lost and not h.held
    assert isinstance(h.lost_reason, (dlock.NotOwner, dlock.Lost))
    assert str(h.lost_reason)  # the library's words
    with pytest.raises((dlock.Lost, dlock.NotOwner)):
        await h.release()


async def test_renewal_keeps_a_short_lease(make):
    a, b = make(), make()
    h = await a.lock("r", lease=1.0)
    renewals, last = 0, h.validity
    loop = asyncio.get_running_loop()
    end = loop.time() + WAIT * 2
    while renewals < 3:  # the validity went up: renewed on the loop
        assert loop.time() < end and h.held, "not renewed"
        await asyncio.sleep(0.02)
        v = h.validity
        renewals += v > last
        last = v
    assert h.held and not h.lost
    with pytest.raises(dlock.Busy):
        await b.lock("r", timeout=0)
    await h.release()


async def test_extend_release_twice_and_closed(make):
    c = make()
    h = await c.lock("e", lease=5, renew=False)
    await h.extend(20)
    assert h.validity > 10
    await h.release()
    with pytest.raises(dlock.DlockError, match="released"):
        await h.release()
    with pytest.raises(dlock.DlockError, match="released"):
        await h.extend(5)
    await c.aclose()
    with pytest.raises(dlock.DlockError, match="closed"):
        await c.lock("e")


async def test_close_cancels_a_waiter(make):
    a, b = make(), make()
    h = await a.lock("w")
    t = asyncio.ensure_future(b.lock("w").acquire())
    await until(lambda: a.sync.inspect("w").waiters >= 1, "queued")
    b.close()
    with pytest.raises(dlock.Canceled):
        await t
    await h.release()


async def test_aclose_drains_the_give_backs(make):
    """aclose() cancels a waiter (dlock.Canceled) and lets its give-back
    and a release in flight reach the server before freeing the loop."""
    a, b = make(), make()
    h = await a.lock("g")
    mine = await b.lock("own")
    t = asyncio.ensure_future(b.lock("g").acquire())
    await until(lambda: a.sync.inspect("g").fair_queue == 1, "queued")
    rel = asyncio.ensure_future(mine.release())
    await asyncio.sleep(0)
    await b.aclose()
    with pytest.raises(dlock.Canceled):
        await t
    await rel  # answered before the loop was freed
    assert a.sync.inspect("g").fair_queue == 0
    assert not a.sync.inspect("own").held
    await h.release()


async def test_dropped_hold_is_released(make):
    a, b = make(), make()
    h = await a.lock("d")
    waiter = asyncio.ensure_future(a.lock("d").acquire())  # queued in a
    await asyncio.sleep(0.05)
    del h
    gc.collect()
    # a's next task for the name gets it (not stuck behind the dropped
    # hold), and b sees it free once that one is released too
    h = await asyncio.wait_for(waiter, WAIT)
    await h.release()
    await until(lambda: not a.sync.inspect("d").held, "released")
    h = await b.lock("d", timeout=0)
    await h.release()


async def test_semaphore_rwlock_lock_all(make):
    a, b = make(), make()
    s = a.semaphore("s", 2)
    p1, p2 = await s, await s
    assert p1.token != p2.token and p1.kind == "semaphore"
    with pytest.raises(dlock.TimedOut):
        await b.semaphore("s", 2).acquire(timeout=0.1)
    w = asyncio.ensure_future(b.semaphore("s", 2).acquire())
    await p1.release()
    p3 = await asyncio.wait_for(w, WAIT)
    await p2.release()
    await p3.release()

    rw = a.rwlock("rw")
    async with rw.read() as r1:
        async with b.rwlock("rw").read() as r2:
            assert r1.kind == r2.kind == "read"
            with pytest.raises(dlock.Busy):
                await b.rwlock("rw").write(timeout=0)
    async with b.rwlock("rw").write(timeout=0) as wr:
        assert wr.held

    async with a.lock_all(["x", "y", "z"]) as helds:
        assert [h.name for h in helds] == ["x", "y", "z"]
        with pytest.raises(dlock.Busy, match="y"):
            await b.lock_all(["y", "q"], timeout=0)
    assert not a.sync.inspect("y").held
    # a lock_all waits behind a task of its own client holding a name
    h = await a.lock("y")
    t = asyncio.ensure_future(a.lock_all(["x", "y"]).acquire())
    await asyncio.sleep(0.05)
    assert not t.done()
    await h.release()
    got = await asyncio.wait_for(t, WAIT)
    await got.release()
    with pytest.raises(dlock.InvalidArgument):
        await a.lock_all(["x", "x"])


async def test_election(make):
    a, b = make(), make()
    e = a.election("svc")
    assert not (await e.leader()).leading
    lead = await e.campaign("one")
    info = await e.leader()
    assert info.leading and info.value == "one" and info.epoch == lead.epoch
    watcher = asyncio.ensure_future(b.election("svc").observe(info,
                                                              timeout=WAIT))
    await asyncio.sleep(0.05)
    await lead.proclaim("two")
    new = await asyncio.wait_for(watcher, WAIT)
    assert new.value == "two"
    with pytest.raises(dlock.Busy):
        await b.election("svc").campaign("b", timeout=0)
    waiting = asyncio.ensure_future(b.election("svc").campaign("b"))
    await asyncio.sleep(0.05)
    await lead.resign()
    lead_b = await asyncio.wait_for(waiting, WAIT)
    assert lead_b.epoch > lead.epoch and lead_b.leading
    assert await b.election("svc").observe(await e.leader(),
                                           timeout=0.1) is None
    await lead_b.resign()


async def test_fenced_set_get(make):
    c = make()
    async with c.lock("f") as h:
        await c.fenced_set("fk", h.token, b"v1")
        fv = await c.fenced_get("fk")
        assert fv.value == b"v1" and fv.fence == h.token
        with pytest.raises(dlock.Stale):
            await c.fenced_set("fk", h.token - 1, "old")
    assert (await c.fenced_get("nothing")).value is None
    # fenced_read raises the floor: an older token's write is then stale
    h1 = await c.lock("g")
    await h1.release()
    h2 = await c.lock("g")
    fv = await c.fenced_read("gk", h2.token)
    assert fv.value is None and fv.fence == h2.token
    with pytest.raises(dlock.Stale):
        await c.fenced_set("gk", h1.token, b"late")
    with pytest.raises(dlock.Stale):
        await c.fenced_read("gk", h1.token)
    await h2.release()


async def test_no_thread_per_waiter(make):
    a, b = make(), make()
    h = await a.lock("t0")
    await (await b.lock("warm")).release()  # b's connections are made
    before_py, before = threading.active_count(), threads()
    tasks = [asyncio.ensure_future(b.lock("t%d" % (i % 50)).acquire())
             for i in range(200)]
    await until(lambda: a.sync.inspect("t0").waiters >= 1, "waiting")
    assert threading.active_count() == before_py
    assert threads() <= before + 1
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await h.release()


@pytest.fixture
def three_servers():
    """Three independent redis-servers (a Redlock of three masters)."""
    from conftest import RedisServer
    made = []
    try:
        for _ in range(3):
            made.append(RedisServer())
        yield made
    finally:
        for s in made:
            s.stop()


async def test_redlock_locks_and_what_is_refused(three_servers, prefix):
    urls = [s.url for s in three_servers]
    a = AsyncClient(urls, prefix=prefix, env=False)
    b = AsyncClient(urls, prefix=prefix, env=False)
    try:
        h = await a.lock("job", lease=10)
        assert h.held and h.token > 0
        with pytest.raises(dlock.Busy):
            await b.lock("job", timeout=0)
        waiter = asyncio.ensure_future(b.lock("job", timeout=WAIT).acquire())
        await asyncio.sleep(0.05)
        assert not waiter.done()
        await h.release()
        got = await asyncio.wait_for(waiter, WAIT)
        assert got.token > h.token
        await got.release()
        async with a.lock_all(["x", "y"]) as (x, y):
            assert x.held and y.held
        # Elections and fenced values on an engine loop (mnloop, session
        # 3): a majority leads; fenced values on the first server.
        lead = await a.election("e").campaign("v", timeout=5)
        info = await b.election("e").leader()
        assert info.leading and info.value == "v"
        await lead.resign()
        await a.fenced_set("k", got.token, b"val")
        assert (await b.fenced_get("k")).value == b"val"
        # Still refused, as by the blocking API: a semaphore over Redlock.
        with pytest.raises(dlock.InvalidArgument):
            await a.semaphore("s", 2, timeout=0)
    finally:
        a.close()
        b.close()


async def test_bad_input_is_refused(make):
    c = make()
    with pytest.raises(dlock.InvalidArgument):
        await c.lock("", timeout=0)
    with pytest.raises(dlock.InvalidArgument):
        await c.lock("a\0b")
    with pytest.raises(dlock.InvalidArgument):
        await c.lock("a", lease=-1)
    with pytest.raises(dlock.InvalidArgument):
        await c.lock("a", strategy="sometimes")
    with pytest.raises(TypeError):
        c.lock("a", timeout=1, wait=1)
    with pytest.raises(dlock.DlockError):
        c.sync.close()  # the AsyncClient's: close that


async def test_help_is_useful():
    text = pydoc.render_doc(dlock.aio)
    for word in ("add_reader", "AsyncClient", "cancel", "on_lost",
                 "timeout"):
        assert word in text


async def test_cancelled_in_flight_gives_back_what_it_got(make):
    """Cancelled while its request is in flight (the lock is free, so it
    would have got it): nothing stays held, by this client or anyone."""
    a, b = make(), make()
    for _ in range(5):
        t = asyncio.ensure_future(a.lock("f").acquire())
        await asyncio.sleep(0)  # started: the request is on its way
        t.cancel()
        try:
            h = await t
        except asyncio.CancelledError:
            continue
        await h.release()  # it completed before the cancel: a normal hold
    # A give-back may trail the cancel (it goes once the answer is in),
    # so b waits; a hold left behind would keep it out for the 30 s lease.
    h = await b.lock("f", timeout=WAIT)
    await h.release()
    h = await a.lock("f", timeout=WAIT)  # and a's queue for "f" is open
    await h.release()


async def test_server_down_is_an_error_class(fresh_server):
    url = fresh_server.url
    fresh_server.stop()
    c = AsyncClient(url, env=False)
    try:
        with pytest.raises(dlock.ConnectionFailed) as ei:
            await c.lock("x", timeout=0)
        assert str(ei.value)
    finally:
        c.close()


async def test_one_event_loop_per_client(make):
    c = make()

    async def use():
        await (await c.lock("x")).release()
    await use()
    with pytest.raises(RuntimeError, match="another event loop"):
        await asyncio.to_thread(asyncio.run, use())


async def test_string_layout(make, rpy, prefix):
    c = make(layout="string")
    async with c.lock("asl", lease=5, timeout=2) as held:
        assert rpy.type(prefix + ":{asl}") == b"string"
        assert held.token > 0
    assert not rpy.exists(prefix + ":{asl}")
