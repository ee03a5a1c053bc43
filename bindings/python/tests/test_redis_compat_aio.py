"""dlock.redis_compat.AsyncLock keeps redis.asyncio.lock.Lock's
semantics: each case runs against redis-py's asyncio Lock and the compat
one on the same server (where they must agree), then the compat's own."""
from __future__ import annotations

import asyncio

import pytest

import test_aio  # noqa: F401 - fails clearly without pytest-asyncio
import pytest_asyncio  # noqa: E402

redis = pytest.importorskip("redis")
import redis.asyncio  # noqa: E402
import redis.asyncio.lock  # noqa: E402
import redis.exceptions as rx  # noqa: E402

import dlock  # noqa: E402
import dlock.aio  # noqa: E402
from dlock.redis_compat import AsyncLock  # noqa: E402

pytestmark = pytest.mark.asyncio
WAIT = 10.0


@pytest.fixture
def name(prefix):
    return "acompat:" + prefix


@pytest_asyncio.fixture
async def ar(server):
    r = redis.asyncio.Redis.from_url(server.url)
    yield r
    await r.close()


@pytest.fixture(params=["redis-py", "dlock"])
def lock_class(request):
    return redis.asyncio.lock.Lock if request.param == "redis-py" \
        else AsyncLock


async def test_lock_class_through_redis_py(ar, name, lock_class):
    lock = ar.lock(name, timeout=10, lock_class=lock_class)
    assert isinstance(lock, lock_class)
    assert await lock.acquire(blocking=False)
    assert await lock.locked() and await lock.owned()
    assert lock.local.token is not None
    await lock.release()
    assert not await lock.locked() and not await lock.owned()
    assert lock.local.token is None


async def test_two_lock_objects_are_two_owners(ar, name, lock_class):
    a = lock_class(ar, name, timeout=10)
    b = lock_class(ar, name, timeout=10)
    assert await a.acquire(blocking=False)
    assert not await b.acquire(blocking=False)
    assert not await b.acquire(blocking_timeout=0.1)
    assert not await b.owned()
    waiter = asyncio.ensure_future(b.acquire())
    await asyncio.sleep(0.05)
    assert not waiter.done()
    await a.release()
    assert await asyncio.wait_for(waiter, WAIT)
    assert await b.owned() and not await a.owned()
    await b.release()


async def test_context_manager_and_errors(ar, name, lock_class):
    a = lock_class(ar, name, timeout=10)
    async with a:
        with pytest.raises(rx.LockError, match="Unable to acquire"):
            async with lock_class(ar, name, timeout=10,
                                  blocking_timeout=0.1):
                pass
    assert not await a.locked()
    with pytest.raises(rx.LockError, match="unlocked"):
        lock_class(ar, name).release()
    with pytest.raises(rx.LockError, match="unlocked"):
        lock_class(ar, name).extend(1)
    nt = lock_class(ar, name)
    assert await nt.acquire()
    with pytest.raises(rx.LockError, match="no timeout"):
        nt.extend(1)
    with pytest.raises(rx.LockError, match="no timeout"):
        nt.reacquire()
    await nt.release()


async def test_expired_is_not_owned(ar, name, lock_class):
    a = lock_class(ar, name, timeout=0.2)
    assert await a.acquire()
    await asyncio.sleep(0.5)
    assert not await a.locked()
    with pytest.raises(rx.LockNotOwnedError):
        await a.release()


async def test_extend_and_reacquire(ar, name, lock_class):
    a = lock_class(ar, name, timeout=5)
    assert await a.acquire()
    assert await a.extend(10)
    assert await a.extend(20, replace_ttl=True)
    assert await a.reacquire()
    await a.release()


async def test_compat_cancel_gives_place_back(server, name, prefix):
    """A compat acquire cancelled while it waits leaves the fair queue."""
    ac = dlock.aio.AsyncClient(server.url, env=False)
    try:
        holder = await ac.lock(name)
        b = AsyncLock(server.url, name, timeout=10)
        t = asyncio.ensure_future(b.acquire())
        probe = dlock.Client(server.url, env=False)
        try:
            await test_aio.until(
                lambda: probe.inspect(name).fair_queue == 1, "queued")
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            await test_aio.until(
                lambda: probe.inspect(name).fair_queue == 0, "left")
        finally:
            probe.close()
        await holder.release()
        assert await b.acquire(blocking=False)
        await b.release()
    finally:
        ac.close()


async def test_exceptions_are_redis_pys_and_dlocks(ar, name):
    a = AsyncLock(ar, name, timeout=0.1)
    assert await a.acquire()
    await asyncio.sleep(0.3)
    with pytest.raises(rx.LockNotOwnedError) as ei:
        await a.release()
    assert isinstance(ei.value, dlock.DlockError)

async def test_server_down_is_redis_pys_connection_error(fresh_server,
                                                        name):
    url = fresh_server.url
    fresh_server.stop()
    r = redis.asyncio.Redis.from_url(url)
    try:
        with pytest.raises(rx.ConnectionError) as ei:
            await AsyncLock(r, name, timeout=5).acquire(blocking=False)
        assert isinstance(ei.value, dlock.DlockError) and str(ei.value)
        # a bounded wait ends with the failure, not False
        with pytest.raises(rx.ConnectionError):
            await AsyncLock(r, name, timeout=5).acquire(
                blocking_timeout=0.3)
    finally:
        await r.close()


async def test_over_a_redlock_client(server, fresh_server, prefix, name):
    """A dlock.Client of several servers: locked()/owned() fall back to
    the blocking inspect (the loop has no leader query there)."""
    c = dlock.Client([server.url, fresh_server.url], prefix=prefix,
                     env=False)
    a = AsyncLock(c, name, timeout=10)
    b = AsyncLock(c, name, timeout=10)
    assert await a.acquire(blocking=False)
    assert await a.locked() and await a.owned() and not await b.owned()
    assert not await b.acquire(blocking=False)
    await a.release()
    assert not await a.locked()
    c.close()
