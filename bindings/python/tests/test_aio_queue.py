"""A long semaphore queue through dlock.aio (issue 32: 10,000 waiters in
one event loop were served at ~1 handoff/s).

Two costs grew with the queue, both counted here on the server, never
timed:
- every queued waiter refreshed its place every second (a sem_acquire.lua
  call each), so 10,000 waiters sent 10,000 scripts a second, more than
  the server runs, and the handoffs' confirmations queued behind them:
  the queue's places now last longer the longer it is (3 ms per waiter,
  at least the 3 s waiter TTL), and the loop refreshes at a third of
  that, so the refreshes of the whole queue stay near 1,000 a second;
- every handoff's confirmation ran LREM over the whole queue (O(n)) to
  unqueue a waiter that the release had already popped: now only when
  the waiter is still queued.
"""
from __future__ import annotations

import asyncio
from typing import Any, List

import pytest

try:
    import pytest_asyncio  # noqa: F401
except ImportError:
    raise ImportError("dlock.aio's tests need pytest-asyncio (Debian: "
                      "python3-pytest-asyncio; scripts/deps.sh installs it)")

import dlock
from dlock.aio import AsyncClient

pytestmark = pytest.mark.asyncio
WAIT = 60.0
N = 3000  # waiters: places of 9 s, refreshed every 3 s


def commands(r: Any, name: str) -> int:
    """How many times the server ran command NAME (INFO commandstats,
    script internals counted)."""
    v = r.info("commandstats").get("cmdstat_" + name)
    return int(v["calls"]) if v else 0


async def test_long_semaphore_queue_refreshes_less_and_unqueues_cheaply(
        fresh_server: Any) -> None:
    redis = pytest.importorskip("redis")
    r = redis.Redis.from_url(fresh_server.url)
    holder = AsyncClient(fresh_server.url, prefix="q", env=False,
                         command_timeout=30)
    a = AsyncClient(fresh_server.url, prefix="q", env=False,
                    command_timeout=30)
    loop = asyncio.get_running_loop()
    try:
        first = await holder.semaphore("s", 1, lease=60)
        served: List[int] = []

        async def waiter() -> None:
            h = await a.semaphore("s", 1, lease=60).acquire()
            served.append(h.token)
            await h.release()
        tasks = [asyncio.ensure_future(waiter()) for _ in range(N)]
        end = loop.time() + WAIT
        while a.sync.inspect_shared("s", 1).waiters < N:
            assert loop.time() < end, "the waiters never all queued"
            await asyncio.sleep(0.05)

        # Every place, once refreshed in the full queue, lasts longer
        # than the 3 s a short queue's does (by the server's clock).
        def least_left() -> float:
            now_s, now_us = r.time()
            now = now_s * 1000 + now_us // 1000
            scores = r.zrange("q:{s}:qt", 0, -1, withscores=True)
            assert len(scores) == N
            return min(sc // 2048 for _, sc in scores) - now
        while least_left() <= 3000:
            assert loop.time() < end, \
                "waiters' places never outlast the 3 s waiter TTL " \
                "(least left: %d ms)" % least_left()
            await asyncio.sleep(0.1)

        r.config_resetstat()
        await first.release()
        await asyncio.wait_for(asyncio.gather(*tasks), WAIT * 3)
        assert len(served) == N
        assert served == sorted(served)  # FIFO: tokens in queue order
        # The confirmations did not scan the queue.
        assert commands(r, "lrem") == 0, commands(r, "lrem")
    finally:
        await holder.aclose()
        await a.aclose()
        r.close()
