"""Sentinel and Cluster from Python, sync and asyncio, against real
deployments (tests/fixtures/topology.sh through topo_driver.sh: a master,
2 replicas and 3 sentinels; a 6-node cluster with a replica per master).

Each test runs once per topology ("sentinel", "cluster"); pytest runs one
topology's tests together on one deployment, in file order. A failover
(SENTINEL FAILOVER, or CLUSTER FAILOVER on a replica of the lock key's
master) moves the master under a held lock and under a waiting acquire,
and the tests check what the user sees: the hold stays held and renews,
extend and release reach the new master, the waiter is served, and the
lock-delay (default on with Sentinel, an option with Cluster) refuses new
grants of the client that saw the old master with dlock.LockDelay and
the library's message, which Client.check() repeats.

Marked `topology` (about a minute in all: the deployments' start and the
failovers): `pytest -m "not topology"` leaves them out. No wall-clock
thresholds: every wait that must end is bounded and fails only when the
thing never happens."""
from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from typing import Any, Iterator, List

import pytest

import dlock
import dlock.aio
from conftest import Topology

pytestmark = pytest.mark.topology
WAIT = 60.0


@pytest.fixture(scope="module", params=["sentinel", "cluster"])
def topo(request: Any) -> Iterator[Topology]:
    """The deployment of this run of the module's tests."""
    t = Topology(request.param)
    yield t
    t.stop()


def key(prefix: str, name: str) -> str:
    return "%s:{%s}" % (prefix, name)


def master_of(t: Topology, k: str) -> int:
    """The port of the master that holds key k now."""
    return t.master_port() if t.kind == "sentinel" else t.key_port(k)


def failover(t: Topology, k: str) -> int:
    """Move the master of key k to one of its replicas (waits until the
    deployment agrees); the new master's port."""
    if t.kind == "sentinel":
        t.cmd("settle")
        return int(t.cmd("failover"))
    t.cmd("settle")
    return int(t.cmd("cluster_failover " + k))


def exists(port: int, k: str) -> bool:
    out = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port),
                          "EXISTS", k], capture_output=True, text=True,
                         timeout=10).stdout.strip()
    return out == "1"


def client(t: Topology, prefix: str, **kw: Any) -> dlock.Client:
    kw.setdefault("env", False)
    return dlock.Client(t.url, prefix=prefix, **kw)


def until(pred: Any, what: str) -> None:
    end = time.monotonic() + WAIT
    while not pred():
        assert time.monotonic() < end, "never happened: " + what
        time.sleep(0.02)


# ---- sync -------------------------------------------------------------------

def test_lock_semaphore_election_fenced(topo: Topology, prefix: str) -> None:
    with client(topo, prefix) as c, client(topo, prefix) as other:
        with c.lock("job", lease=10) as held:
            assert exists(master_of(topo, key(prefix, "job")),
                          key(prefix, "job"))
            with pytest.raises(dlock.Busy):
                other.lock("job").acquire(wait=0)
            c.fenced_set("data", held.token, b"v1")
            assert c.fenced_get("data").value == b"v1"
            assert c.fenced_get("data").fence == held.token
            with pytest.raises(dlock.Stale):
                c.fenced_set("data", held.token - 1, b"old")
            assert other.fenced_get("data").value == b"v1"
        assert not exists(master_of(topo, key(prefix, "job")),
                          key(prefix, "job"))

        sem = c.semaphore("pool", 2, lease=10)
        p1, p2 = sem.acquire(wait=0), other.semaphore("pool", 2).acquire(
            wait=0)
        with pytest.raises(dlock.Busy):
            other.semaphore("pool", 2).acquire(wait=0)
        assert c.inspect_shared("pool").holders == 2
        p1.release()
        p2.release()

        e = c.election("svc")
        with e.campaign("host:1", lease=10) as lead:
            assert lead.leading
            info = other.election("svc").leader()
            assert info.value == "host:1" and info.epoch == lead.epoch
        assert not other.election("svc").leader().leading


def test_check_and_topology_name_the_deployment(topo: Topology,
                                                prefix: str) -> None:
    with client(topo, prefix) as c:
        c.lock("warm", lease=5).acquire().release()
        top = "\n".join(c.topology())
        found = "\n".join(c.check())
        if topo.kind == "sentinel":
            assert "client: Sentinel" in top and "lock-delay 30000" in top
        else:
            assert "Cluster" in top
        assert "no wait_replicas" in found or "without wait_replicas" in \
            found, found


def test_failover_under_a_held_lock(topo: Topology, prefix: str) -> None:
    """A held lock rides out a failover: it stays held (a graceful
    failover replicates it), the watchdog renews it on the new master,
    it extends and releases there. The same client's next grant on that
    master then waits out the lock-delay (Sentinel's default; lock_delay=
    on a cluster): a try raises dlock.LockDelay, and check() says why.
    (The lease must outlast the failover's write pause: SENTINEL FAILOVER
    pauses the old master's writes ~2 s here, and a 2 s lease is then
    lost, with held.lost and a "lost" event.)"""
    k = key(prefix, "held")
    renewed: List[Any] = []
    delay = {} if topo.kind == "sentinel" else {"lock_delay": 30.0}
    with client(topo, prefix, on_event=lambda e: renewed.append(e)
                if e.kind == "renewed" else None, **delay) as c:
        h = c.lock("held", lease=10, watchdog=True).acquire()
        token = h.token
        new = failover(topo, k)
        assert master_of(topo, k) == new
        seen = len(renewed)
        until(lambda: len(renewed) >= seen + 2, "two renewals after it")
        assert h.held and not h.lost, h.lost_reason
        assert exists(new, k)
        h.extend(5)
        assert h.token == token
        h.release()
        assert not exists(new, k)
        with pytest.raises(dlock.LockDelay) as ei:
            c.lock("held").acquire(wait=0)
        assert "lock-delay" in str(ei.value)
        assert any("failover or restart seen" in ln for ln in c.check())
    # A client that never saw the old master is not delayed.
    with client(topo, prefix) as fresh:
        with fresh.lock("held").acquire(wait=0) as h2:
            assert h2.token > token


def test_failover_under_a_waiting_acquire(topo: Topology,
                                          prefix: str) -> None:
    """A waiter queued before the failover is served after it, when the
    holder releases on the new master."""
    k = key(prefix, "queue")
    with client(topo, prefix, lock_delay=0) as a, \
            client(topo, prefix, lock_delay=0) as b:
        h = a.lock("queue", lease=10, watchdog=True).acquire()
        first = h.token
        got: List[Any] = []

        def wait() -> None:
            try:
                got.append(b.lock("queue", lease=5).acquire(wait=WAIT))
            except BaseException as ex:  # reported by the assert below
                got.append(ex)
        th = threading.Thread(target=wait)
        th.start()
        until(lambda: a.inspect("queue").fair_queue >= 1 or bool(got),
              "the waiter queued")
        failover(topo, k)
        assert h.held, h.lost_reason
        assert not got, got
        h.release()
        th.join(WAIT)
        assert not th.is_alive(), "the waiter was never served"
        assert isinstance(got[0], dlock.Held), got[0]
        assert got[0].token > first
        got[0].release()


# ---- asyncio ----------------------------------------------------------------

def arun(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, WAIT * 2))


def test_aio_lock_semaphore_election_fenced(topo: Topology,
                                                prefix: str) -> None:
    async def main() -> None:
        async with dlock.aio.AsyncClient(topo.url, prefix=prefix,
                                         env=False) as c, \
                dlock.aio.AsyncClient(topo.url, prefix=prefix,
                                      env=False) as other:
            async with c.lock("ajob", lease=10, timeout=5) as held:
                assert exists(master_of(topo, key(prefix, "ajob")),
                              key(prefix, "ajob"))
                with pytest.raises(dlock.Busy):
                    await other.lock("ajob", timeout=0)
            assert not held.held
            async with c.semaphore("apool", 2, timeout=5) as p1, \
                    other.semaphore("apool", 2, timeout=5) as p2:
                assert p1.held and p2.held
                with pytest.raises(dlock.Busy):
                    await other.semaphore("apool", 2, timeout=0)
            # Elections and fenced values on these loops too.
            async with c.lock("afence", lease=10, timeout=5) as fh:
                await c.fenced_set("adata", fh.token, b"v")
                assert (await other.fenced_get("adata")).value == b"v"
            lead = await c.election("asvc").campaign("x", timeout=5)
            info = await other.election("asvc").leader()
            assert info.leading and info.value == "x"
            await lead.resign()
    arun(main())


def test_aio_failover_under_a_held_lock(topo: Topology, prefix: str) -> None:
    """The loop's renewals follow the master: the hold is still held two
    leases after the failover, then extends and releases there."""
    k = key(prefix, "aheld")

    async def main() -> None:
        async with dlock.aio.AsyncClient(topo.url, prefix=prefix,
                                         env=False, lock_delay=0) as c:
            h = await c.lock("aheld", lease=10, timeout=5)
            token = h.token
            new = await asyncio.to_thread(failover, topo, k)
            # Two renewals on the new master: the validity, which falls
            # between renewals, jumps up (by about a third of the lease;
            # at most lease - drift, so a sample taken right after a
            # renewal is never exceeded: count jumps, not new highs).
            end = asyncio.get_running_loop().time() + WAIT
            prev, jumps = h.validity, 0
            while jumps < 2:
                assert asyncio.get_running_loop().time() < end, \
                    "no renewal after the failover (held %s, lost %s: " \
                    "%s; validity %.3f)" % (h.held, h.lost,
                                            h.lost_reason, h.validity)
                await asyncio.sleep(0.05)
                cur = h.validity
                if cur > prev + 1.0:
                    jumps += 1
                prev = cur
            assert h.held and not h.lost, h.lost_reason
            assert exists(new, k)
            await h.extend(5)
            assert h.token == token
            await h.release()
            assert not exists(new, k)
    arun(main())


def test_aio_failover_under_a_waiting_acquire(topo: Topology,
                                              prefix: str) -> None:
    k = key(prefix, "aqueue")

    async def main() -> None:
        async with dlock.aio.AsyncClient(topo.url, prefix=prefix,
                                         env=False, lock_delay=0) as a, \
                dlock.aio.AsyncClient(topo.url, prefix=prefix,
                                      env=False, lock_delay=0) as b:
            h = await a.lock("aqueue", lease=10, timeout=5)
            first = h.token
            waiter = asyncio.ensure_future(b.lock("aqueue", timeout=WAIT))
            await asyncio.sleep(0.3)
            assert not waiter.done()
            await asyncio.to_thread(failover, topo, k)
            assert h.held, h.lost_reason
            assert not waiter.done(), waiter
            await h.release()
            got = await asyncio.wait_for(waiter, WAIT)
            assert got.held and got.token > first
            await got.release()
    arun(main())
