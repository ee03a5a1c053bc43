"""dlock.aio: the asyncio API of dlock, on libdlock's event-loop interface.

    import asyncio, dlock, dlock.aio

    async def main():
        async with dlock.aio.AsyncClient("redis://127.0.0.1:6379") as c:
            async with c.lock("job", lease=10, timeout=5) as held:
                print(held.token)                  # fencing token
            held = await c.lock("job", timeout=0)  # try once: dlock.Busy
            await held.release()

    asyncio.run(main())

How it runs. An AsyncClient holds one dlock.Client (the same servers,
options and environment variables as dlock.Client takes) and, once used
from a running event loop, one dlock_loop of it (include/dlock_loop.h):
the loop's one descriptor is registered with loop.add_reader and a
loop.call_at timer is re-armed from dlock_loop_timeout_ms after every
dlock_loop_process, which never blocks. Every operation returns an
asyncio Future that the library's completion callback resolves, inside
process, on the event loop's thread. No thread is started per waiter or
per lock: 10,000 waiting tasks are 10,000 small records in the loop
(bench/peers/aio_waiters.py measures them). Leases are renewed on the
loop too (renew=True, the default, at a third of the lease): a loop that
does not run for a whole lease loses its locks, and says so.

The API mirrors the sync one (help(dlock)), awaited:

    held = await c.lock("job").acquire()     # or: await c.lock("job")
    await held.extend(30); await held.release()
    async with c.semaphore("gpu", 4): ...
    rw = c.rwlock("cfg")
    async with rw.read(): ...;  async with rw.write(): ...
    async with c.lock_all(["a", "b"]) as (a, b): ...
    e = c.election("svc")
    async with await e.campaign("host:8080") as lead:  # waits to win
        await lead.proclaim("host:8081")
    info = await e.leader(); new = await e.observe(info, timeout=60)
    await c.fenced_set("data", held.token, b"v"); await c.fenced_get("data")
    await c.fenced_read("data", held.token)  # read, and shut older out

Waiting. timeout=None (the default) waits as long as it takes, 0 tries
once (dlock.Busy when held), t > 0 waits at most t seconds
(dlock.TimedOut). (wait= is accepted too, the sync API's name.)
Cancelling a waiting task (task.cancel(), asyncio.wait_for running out)
cancels the library's operation (dlock_op_cancel), which gives back the
task's place in the fair queue, or the lock if it was just handed over.

Tasks of one AsyncClient. The library refuses a second acquire of a
name its loop holds or is acquiring (each acquire is an owner of its
own, never re-entered). Tasks of one AsyncClient that want the same
exclusive lock (lock, write lock, campaign, lock_all) therefore queue
in the client, first come first served, and only the first waits on the
servers; timeout bounds both waits. Semaphore permits and read locks
are not queued so: each is its own owner on the servers.

Losing a lease. held.lost turns True and on_lost(held), when given, is
called soon after from the event loop (never inside the library). The
hold stays the caller's: release it (dlock.Lost).

Errors are the sync API's classes (dlock.DlockError and subclasses)
with the library's message for that operation (dlock_op_errmsg).

Topologies. Everything above works on one server (redis://, rediss://,
unix://). On several servers (Redlock), Sentinel or Cluster the library's
loop does locks, read locks, permits (not over Redlock), lock_all,
extend and release, elections and fenced values (over Redlock: on the
first server, as the sync API); a cancelled attempt's give-back runs
on the client's watchdog thread (one thread, not one per waiter). The client options wait_replicas, holder_info and
on_event are not used by loop holds. No downgrade through the loop.

Threads. An AsyncClient is used from one event loop (the first one that
uses it; another raises RuntimeError). The blocking sync calls
(inspect, list, check, ...) are on client.sync, the dlock.Client inside
(they block the event loop for their round trip). Close the AsyncClient
(aclose() or `async with`): operations still running complete with
dlock.Canceled, releases already sent and the give-backs of cancelled
waits are let through first (at most 2 s); holds not released are left
to their leases. close() (not awaitable) frees at once.
"""
from __future__ import annotations

import asyncio
import collections
import ctypes
import itertools
import weakref
from ctypes import byref, c_char_p, c_size_t, c_uint64, c_void_p
from typing import (Any, Awaitable, Callable, Deque, Dict, Generator,
                    Iterator, List, Optional, Sequence, Union)

from . import _core, _errors, _ffi
from ._core import Client, FencedValue, LeaderInfo, Name, _b, _ms, _s
from ._errors import DlockError

__all__ = ["AsyncClient", "AsyncLock", "AsyncSemaphore", "AsyncReadLock",
           "AsyncRWLock", "AsyncMultiLock", "AsyncElection", "AsyncHeld",
           "AsyncHeldAll", "AsyncLeadership"]

OK = 0
_BUSY = -1
_TIMEDOUT = -2
_CANCELED = -5
_STRATEGIES = {"notify": 0, "spin": 1, "fair": 2}

# Keys of operations in flight -> their record; the one C callback finds
# its operation by the key passed as userdata. Every lane's lost
# callbacks go through one function too (userdata: the lane's key).
_ops: Dict[int, "_Op"] = {}
_lanes: "weakref.WeakValueDictionary[int, _Lane]" = \
    weakref.WeakValueDictionary()
_keys = itertools.count(1)


def _op_trampoline(op: Optional[int], status: int, hold: Optional[int],
                   ud: Optional[int]) -> None:
    """Every operation's completion (called inside dlock_loop_process,
    dlock_op_cancel or dlock_loop_free, on the event loop's thread):
    resolve its future. Never raises into the library."""
    rec = _ops.pop(ud or 0, None)
    if rec is None:
        return
    try:
        rec.complete(op or 0, status, hold or 0)
    except BaseException as e:  # noqa: B902 - reported, not raised in C
        rec.lane.report(e)


def _lost_trampoline(hold: Optional[int], status: int,
                     ud: Optional[int]) -> None:
    """A hold's lease was found lost (inside dlock_loop_process)."""
    lane = _lanes.get(ud or 0)
    if lane is not None:
        try:
            lane.lost(hold or 0, status)
        except BaseException as e:  # noqa: B902
            lane.report(e)


# Alive as long as the module: no C callback can outlive its function.
_OP_CB = _ffi.OP_CB(_op_trampoline)
_LOST_CB = _ffi.HOLD_LOST_CB(_lost_trampoline)


def _timeout_of(timeout: Optional[float], wait: Any) -> Optional[float]:
    """The wait asked for: timeout, or the sync API's wait= (not both)."""
    if wait is not ...:
        if timeout is not None:
            raise TypeError("give timeout or wait, not both")
        return wait
    return timeout


class _Op:
    """One operation in flight: its future, what makes its result, what
    gives back what a cancelled acquire got anyway."""

    __slots__ = ("lane", "fut", "ptr", "key", "finish", "orphan", "keep")

    def __init__(self, lane: "_Lane", finish: Callable[[int, int, int], Any],
                 orphan: Optional[Callable[[int, int], None]]) -> None:
        self.lane = lane
        self.fut: "asyncio.Future[Any]" = lane.aloop.create_future()
        self.ptr = 0
        self.key = next(_keys)
        self.finish = finish
        self.orphan = orphan
        # A release: aclose() lets it finish rather than cancel it.
        self.keep = False

    def complete(self, op: int, status: int, hold: int) -> None:
        fut = self.fut
        if fut.done():
            # Cancelled before the library knew: give back what came.
            if status == OK and self.orphan is not None:
                self.orphan(op, hold)
            return
        try:
            value = self.finish(op, status, hold)
        except DlockError as e:
            fut.set_exception(e)
        else:
            fut.set_result(value)

    def cancelled(self, fut: "asyncio.Future[Any]") -> None:
        """The future's done callback: a cancelled future whose operation
        still runs cancels the operation (its callback runs now)."""
        if fut.cancelled() and self.key in _ops and self.lane.ptr:
            self.lane.lib.dlock_op_cancel(self.ptr)
            self.lane.kick()


class _Lane:
    """One dlock_loop driven by one asyncio event loop."""

    def __init__(self, client: Client, aloop: asyncio.AbstractEventLoop
                 ) -> None:
        self.client = client
        self.lib = client._lib
        self.aloop = aloop
        self.ptr = 0
        if not hasattr(self.lib, "dlock_loop_new"):
            raise DlockError("this libdlock (%s) has no event-loop API "
                             "(dlock_loop.h): dlock.aio needs a newer one"
                             % self.lib.path, -20, "EINVAL")
        out = c_void_p()
        cptr = client._enter()
        try:
            rc = self.lib.dlock_loop_new(byref(out), cptr)
            if rc != OK:
                raise client._error(cptr, rc)
        finally:
            client._leave()
        self.ptr = out.value or 0
        self.key = next(_keys)
        _lanes[self.key] = self
        self.fd = self.lib.dlock_loop_fd(self.ptr)
        self.timer: Optional[asyncio.TimerHandle] = None
        self.soon: Optional[asyncio.Handle] = None
        # Live holds of this loop: pointer -> AsyncHeld (weak: a dropped
        # AsyncHeld is released, see AsyncHeld.__del__).
        self.holds: "weakref.WeakValueDictionary[int, AsyncHeld]" = \
            weakref.WeakValueDictionary()
        aloop.add_reader(self.fd, self.process)

    # -- driving the loop
    def process(self) -> None:
        """dlock_loop_process, then the timer for what it asks next."""
        self.soon = None
        if not self.ptr:
            return
        self.lib.dlock_loop_process(self.ptr)
        self.arm()

    def arm(self) -> None:
        """Re-arm the timer from dlock_loop_timeout_ms (a timer due
        earlier is kept: processing early is harmless)."""
        if not self.ptr:
            return
        ms = self.lib.dlock_loop_timeout_ms(self.ptr)
        if ms < 0:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            return
        if ms == 0:
            self.kick()
            return
        when = self.aloop.time() + ms / 1000.0
        t = self.timer
        if t is not None and not t.cancelled() and t.when() <= when:
            return
        if t is not None:
            t.cancel()
        self.timer = self.aloop.call_at(when, self._timer_fired)

    def _timer_fired(self) -> None:
        self.timer = None
        self.process()

    def kick(self) -> None:
        """Process soon (once, however many operations start meanwhile)."""
        if self.soon is None and self.ptr:
            self.soon = self.aloop.call_soon(self.process)

    def report(self, e: BaseException) -> None:
        self.aloop.call_exception_handler({
            "message": "dlock.aio: an error in a completion", "exception": e})

    # -- starting operations
    def check(self) -> None:
        if self.client._gen != _core._fork_gen:
            raise DlockError("this AsyncClient was made before fork(): a "
                             "child process must create its own", -20,
                             "EINVAL")
        if not self.ptr:
            raise DlockError("the AsyncClient is closed", -20, "EINVAL")

    def start(self, call: Callable[[Any, int], int],
              finish: Callable[[int, int, int], Any],
              orphan: Optional[Callable[[int, int], None]] = None,
              keep: bool = False) -> "asyncio.Future[Any]":
        """call(out, key) starts a C operation with _OP_CB and userdata
        KEY; the future resolves with finish(op, status, hold). keep: a
        release, which aclose() waits for instead of cancelling."""
        self.check()
        rec = _Op(self, finish, orphan)
        rec.keep = keep
        out = c_void_p()
        _ops[rec.key] = rec
        rc = call(byref(out), rec.key)
        if rc != OK:
            _ops.pop(rec.key, None)
            # The message of a refused start is the client's.
            lib = self.lib
            msg = _s(lib.dlock_errmsg(self.client._ptr)) or \
                _s(lib.dlock_strerror(rc))
            raise _errors.make(rc, msg, _s(lib.dlock_status_name(rc)))
        rec.ptr = out.value or 0
        rec.fut.add_done_callback(rec.cancelled)
        self.kick()
        return rec.fut

    def error(self, op: int, status: int) -> DlockError:
        """The exception for an operation's STATUS, with its message."""
        lib = self.lib
        msg = _s(lib.dlock_op_errmsg(op)) or _s(lib.dlock_strerror(status))
        return _errors.make(status, msg, _s(lib.dlock_status_name(status)))

    def options(self, wait_ms: int, lease_ms: int, renew: bool,
                strategy: Optional[str]) -> _ffi.LoopAcquire:
        o = _ffi.LoopAcquire()
        self.lib.dlock_loop_acquire_init(byref(o), self.client._ptr)
        o.wait_ms = wait_ms
        o.lease_ms = lease_ms
        o.renew = int(bool(renew))
        if strategy is not None:
            if strategy not in _STRATEGIES:
                raise _errors.InvalidArgument(
                    "strategy must be one of fair, notify, spin, not %r"
                    % (strategy,), -20, "EINVAL")
            o.strategy = _STRATEGIES[strategy]
        o.on_lost = _LOST_CB
        o.on_lost_userdata = self.key
        return o

    def release_quiet(self, hold: int,
                      then: Optional[Callable[[], None]] = None) -> None:
        """Give HOLD back without anyone waiting for the answer (an
        acquire cancelled too late, a dropped AsyncHeld); then() once
        the library is done with it."""
        if not self.ptr:
            return
        h = self.holds.pop(hold, None)
        if h is not None:
            h._ptr = 0

        def done(op: int, status: int, _h: int) -> None:
            if h is not None:
                h._ended()
            if then is not None:
                then()
        try:
            fut = self.start(lambda out, key: self.lib.dlock_loop_release(
                out, self.ptr, hold, _OP_CB, key), done, keep=True)
            fut.add_done_callback(_consume)
        except DlockError:
            pass

    def lost(self, hold: int, status: int) -> None:
        h = self.holds.get(hold)
        if h is None:
            return
        h._lost_status = status
        if h.on_lost is not None:
            self.aloop.call_soon(h.on_lost, h)

    def close(self) -> None:
        """Free the loop: operations in flight complete with Canceled,
        holds are forgotten (left to their leases)."""
        if not self.ptr:
            return
        p = self.ptr
        try:
            self.aloop.remove_reader(self.fd)
        except Exception:  # a closed event loop
            pass
        for t in (self.timer, self.soon):
            if t is not None:
                t.cancel()
        self.timer = self.soon = None
        self.lib.dlock_loop_free(p)
        self.ptr = 0
        for h in list(self.holds.values()):
            h._ptr = 0
        self.holds.clear()


def _consume(fut: "asyncio.Future[Any]") -> None:
    """Retrieve a background future's outcome (nobody awaits it)."""
    if not fut.cancelled():
        fut.exception()


class _Gate:
    """In-client FIFO for one exclusive name: who may ask the loop (the
    queue is made when a second task comes: most names never have one)."""

    __slots__ = ("waiters",)

    def __init__(self) -> None:
        self.waiters: Optional[Deque["asyncio.Future[None]"]] = None


class _Ticket:
    """The right of COUNT holds to the gates of BNAMES: the gates open
    when the last of them leaves (a released hold, a failed acquire)."""

    __slots__ = ("ac", "bnames", "count", "handed")

    def __init__(self, ac: "AsyncClient", bnames: List[bytes]) -> None:
        self.ac = ac
        self.bnames = bnames
        self.count = 1
        # True once a late success's give-back leaves it instead.
        self.handed = False

    def leave(self) -> None:
        self.count -= 1
        if self.count == 0:
            for b in self.bnames:
                self.ac._gate_leave(b)


class AsyncClient:
    """A dlock client for asyncio (see help(dlock.aio)).

    servers and every keyword: as dlock.Client (URLs, $DLOCK_SERVERS and
    the other environment variables); or servers may be a dlock.Client
    made for this AsyncClient (it is then the AsyncClient's: closed with
    it). Over several servers, Sentinel or Cluster, elections and fenced
    values are not there yet (help(dlock.aio), "Topologies").

    Use it from one event loop; close it with `await aclose()` or
    `async with`. Blocking sync calls: client.sync (a dlock.Client)."""

    def __init__(self, servers: Union[None, str, Sequence[str], Client] = None,
                 **options: Any) -> None:
        if isinstance(servers, Client):
            if options:
                raise TypeError("options go to the dlock.Client, not here")
            self._client = servers
        else:
            self._client = Client(servers, **options)
        self._client._pinned = True
        self._lane: Optional[_Lane] = None
        self._gates: Dict[bytes, _Gate] = {}
        self._closed = False

    @property
    def sync(self) -> Client:
        """The dlock.Client inside: its calls block (inspect, list,
        check, topology, stats...). Closed with this AsyncClient."""
        return self._client

    @property
    def closed(self) -> bool:
        return self._closed

    def _get_lane(self) -> _Lane:
        if self._closed:
            raise DlockError("the AsyncClient is closed", -20, "EINVAL")
        aloop = asyncio.get_running_loop()
        lane = self._lane
        if lane is None:
            lane = self._lane = _Lane(self._client, aloop)
        elif lane.aloop is not aloop:
            raise RuntimeError("this AsyncClient belongs to another event "
                               "loop: make one per event loop")
        lane.check()
        return lane

    # -- life
    def close(self) -> None:
        """Close now (from the event loop's thread): operations still
        running fail with dlock.Canceled, tasks queued in the client too;
        holds not released are left to their leases. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for g in self._gates.values():
            for f in g.waiters or ():
                if not f.done():
                    f.set_exception(_errors.Canceled(
                        "the AsyncClient was closed", -5, "CANCELED"))
        self._gates.clear()
        if self._lane is not None:
            self._lane.close()
        self._client._pinned = False
        self._client.close()

    async def aclose(self, drain: float = 2.0) -> None:
        """Close, letting what the library still has out finish first:
        operations in flight but releases are cancelled (dlock.Canceled),
        then the event loop runs until the releases and the give-backs of
        cancelled waits are answered (dlock_loop_pending), at most DRAIN
        seconds, then close()."""
        lane = self._lane
        if self._closed or lane is None or not lane.ptr or \
                not hasattr(lane.lib, "dlock_loop_pending"):
            self.close()
            return
        for rec in [r for r in list(_ops.values()) if r.lane is lane]:
            if not rec.keep and rec.key in _ops and lane.ptr:
                lane.lib.dlock_op_cancel(rec.ptr)  # Canceled, now
        lane.kick()
        loop = asyncio.get_running_loop()
        end = loop.time() + drain
        await asyncio.sleep(0)
        while lane.ptr and lane.lib.dlock_loop_pending(lane.ptr) > 0 and \
                loop.time() < end:
            await asyncio.sleep(0.005)
        self.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def __del__(self) -> None:
        lane = self._lane
        if lane is None or not lane.ptr or self._closed:
            return
        try:
            if self._client._gen != _core._fork_gen:
                return
            if lane.aloop.is_closed():
                self.close()  # no event loop runs it any more
            else:
                # Never from here: this may run inside dlock_loop_process.
                lane.aloop.call_soon_threadsafe(self.close)
        except Exception:
            pass

    def __repr__(self) -> str:
        return "<dlock.aio.AsyncClient %s %s>" % (
            ",".join(self._client.servers),
            "closed" if self._closed else "open")

    # -- the in-client queue of exclusive names
    async def _gate_enter(self, bnames: List[bytes],
                          deadline: Optional[float]) -> None:
        """Enter the gates of BNAMES (sorted: two lock_all never wait for
        each other in a cycle), waiting behind this client's other tasks
        until DEADLINE (loop time; None: no bound; 0: not at all)."""
        got: List[bytes] = []
        try:
            for b in sorted(set(bnames)):
                await self._gate_one(b, deadline)
                got.append(b)
        except BaseException:
            for b in got:
                self._gate_leave(b)
            raise

    async def _gate_one(self, b: bytes, deadline: Optional[float]) -> None:
        g = self._gates.get(b)
        if g is None:
            self._gates[b] = _Gate()
            return
        if deadline == 0:
            raise _errors.Busy("%s: held or being acquired by another task "
                               "of this AsyncClient" % _s(b), -1, "BUSY")
        aloop = asyncio.get_running_loop()
        fut: "asyncio.Future[None]" = aloop.create_future()
        if g.waiters is None:
            g.waiters = collections.deque()
        g.waiters.append(fut)
        timer = None
        if deadline is not None:
            def expire() -> None:
                if not fut.done():
                    fut.set_exception(_errors.TimedOut(
                        "%s: timed out waiting behind another task of this "
                        "AsyncClient" % _s(b), -2, "TIMEDOUT"))
            timer = aloop.call_at(deadline, expire)
        try:
            await fut
        except BaseException:
            if fut.done() and not fut.cancelled() and \
                    fut.exception() is None:
                self._gate_leave(b)  # handed over as we were cancelled
            elif g.waiters is not None:
                try:
                    g.waiters.remove(fut)
                except ValueError:
                    pass
            raise
        finally:
            if timer is not None:
                timer.cancel()

    def _gate_leave(self, b: bytes) -> None:
        g = self._gates.get(b)
        if g is None:
            return
        while g.waiters:
            f = g.waiters.popleft()
            if not f.done():
                f.set_result(None)
                return
        del self._gates[b]

    # -- acquiring
    async def _acquire(self, kind: str, bname: bytes, extra: int,
                       lease: float, timeout: Optional[float], renew: bool,
                       strategy: Optional[str],
                       on_lost: Optional[Callable[["AsyncHeld"], Any]],
                       value: Optional[bytes] = None) -> "AsyncHeld":
        """kind: "lock", "semaphore" (extra: limit), "read", "leader"
        (value: what to proclaim)."""
        lane = self._get_lane()
        lib = lane.lib
        wait_ms = _ms(timeout, "timeout", True)
        lease_ms = _ms(lease, "lease", False)
        if on_lost is not None and not callable(on_lost):
            raise TypeError("on_lost must be callable")
        ticket = None
        if kind in ("lock", "leader"):
            deadline = None if wait_ms < 0 else (
                0 if wait_ms == 0 else lane.aloop.time() + wait_ms / 1000.0)
            await self._gate_enter([bname], deadline)
            ticket = _Ticket(self, [bname])
            if deadline:
                left = deadline - lane.aloop.time()
                wait_ms = max(1, int(left * 1000))
        try:
            o = lane.options(wait_ms, lease_ms, renew, strategy)

            def finish(op: int, status: int, hold: int) -> AsyncHeld:
                if status != OK:
                    raise lane.error(op, status)
                cls = AsyncLeadership if kind == "leader" else AsyncHeld
                return cls(lane, hold, bname, kind, on_lost, ticket)

            def orphan(op: int, hold: int) -> None:
                if ticket is not None:
                    ticket.handed = True
                lane.release_quiet(hold, ticket.leave if ticket else None)

            def call(out: Any, key: int) -> int:
                if kind == "lock":
                    return lib.dlock_loop_lock(out, lane.ptr, bname,
                                               byref(o), _OP_CB, key)
                if kind == "semaphore":
                    return lib.dlock_loop_sem_acquire(out, lane.ptr, bname,
                                                      extra, byref(o),
                                                      _OP_CB, key)
                if kind == "read":
                    return lib.dlock_loop_read_acquire(out, lane.ptr, bname,
                                                       byref(o), _OP_CB, key)
                return lib.dlock_loop_campaign(out, lane.ptr, bname, value,
                                               byref(o), _OP_CB, key)
            fut = lane.start(call, finish, orphan)
        except BaseException:
            if ticket is not None:
                ticket.leave()
            raise
        o = None  # copied by the library: not kept while waiting
        return await _settle(fut, ticket)

    def lock(self, name: Name, *, lease: float = 30.0,
             timeout: Optional[float] = None, wait: Any = ...,
             renew: bool = True, strategy: Optional[str] = None,
             on_lost: Optional[Callable[["AsyncHeld"], Any]] = None
             ) -> "AsyncLock":
        """The exclusive lock NAME: `async with c.lock("job", lease=10,
        timeout=5) as held: ... held.token`, or `held = await
        c.lock("job")` ... `await held.release()`.

        lease: seconds the lock outlives a holder that stops renewing.
        timeout: None waits as long as it takes, 0 tries once (Busy), t
        waits at most t seconds (TimedOut). renew: the event loop renews
        the lease (a third into it) until released. strategy: "fair"
        (FIFO queue), "notify" or "spin"; None: the client's.
        on_lost(held): called from the event loop when the lease is found
        lost (held.lost says it too)."""
        return AsyncLock(self, name, lease=lease,
                         timeout=_timeout_of(timeout, wait), renew=renew,
                         strategy=strategy, on_lost=on_lost)

    def semaphore(self, name: Name, limit: int, *, lease: float = 30.0,
                  timeout: Optional[float] = None, wait: Any = ...,
                  renew: bool = True, strategy: Optional[str] = None,
                  on_lost: Optional[Callable[["AsyncHeld"], Any]] = None
                  ) -> "AsyncSemaphore":
        """The counting semaphore NAME (at most LIMIT holders); each
        acquire is a permit of its own. Options as lock()."""
        return AsyncSemaphore(self, name, limit, lease=lease,
                              timeout=_timeout_of(timeout, wait), renew=renew,
                              strategy=strategy, on_lost=on_lost)

    def rwlock(self, name: Name) -> "AsyncRWLock":
        """The read-write lock NAME: .read(...) and .write(...)."""
        return AsyncRWLock(self, name)

    def lock_all(self, names: Sequence[Name], *, lease: float = 30.0,
                 timeout: Optional[float] = None, wait: Any = ...,
                 renew: bool = True, strategy: Optional[str] = None,
                 on_lost: Optional[Callable[["AsyncHeld"], Any]] = None
                 ) -> "AsyncMultiLock":
        """Several locks at once, all or nothing, free of deadlock (1 to
        64 distinct names): `async with c.lock_all(["a", "b"]) as (a,
        b):`. timeout bounds the whole call."""
        return AsyncMultiLock(self, names, lease=lease,
                              timeout=_timeout_of(timeout, wait), renew=renew,
                              strategy=strategy, on_lost=on_lost)

    def election(self, name: Name) -> "AsyncElection":
        """The leader election NAME: campaign(), leader(), observe()."""
        return AsyncElection(self, name)

    # -- fencing
    async def fenced_set(self, key: Name, token: int,
                         value: Union[bytes, str]) -> None:
        """Store VALUE under the Redis key KEY (not prefixed) only if
        TOKEN is >= every token a fenced write of KEY carried;
        dlock.Stale otherwise (nothing changed)."""
        lane = self._get_lane()
        v = value.encode() if isinstance(value, str) else bytes(value)
        bkey = _b(key, "key")

        def finish(op: int, status: int, _h: int) -> None:
            if status != OK:
                raise lane.error(op, status)
        await lane.start(lambda out, k: lane.lib.dlock_loop_fenced_set(
            out, lane.ptr, bkey, token, v, len(v), _OP_CB, k), finish)

    async def fenced_get(self, key: Name) -> FencedValue:
        """The fenced value KEY and the highest token it has seen."""
        return await self._fenced(key, None)

    async def fenced_read(self, key: Name, token: int) -> FencedValue:
        """The read of a read-modify-write under a lock: read KEY and make
        TOKEN its highest token in one step, so an older holder's later
        write is refused. dlock.Stale when TOKEN is older than KEY's. (No
        wait for replicas, unlike the sync call.)"""
        return await self._fenced(key, token)

    async def _fenced(self, key: Name, token: Optional[int]) -> FencedValue:
        lane = self._get_lane()
        lib = lane.lib
        bkey = _b(key, "key")
        if token is not None and not hasattr(lib, "dlock_loop_fenced_read"):
            raise DlockError("this libdlock has no dlock_loop_fenced_read",
                             -20, "EINVAL")

        def finish(op: int, status: int, _h: int) -> FencedValue:
            if status != OK:
                raise lane.error(op, status)
            n = c_size_t()
            fence = c_uint64()
            p = lib.dlock_op_value(op, byref(n), byref(fence))
            data = ctypes.string_at(p, n.value) if p else None
            return FencedValue(data, fence.value)
        if token is None:
            return await lane.start(lambda out, k: lib.dlock_loop_fenced_get(
                out, lane.ptr, bkey, _OP_CB, k), finish)
        return await lane.start(lambda out, k: lib.dlock_loop_fenced_read(
            out, lane.ptr, bkey, token, _OP_CB, k), finish)


async def _settle(fut: "asyncio.Future[Any]",
                  ticket: Optional[_Ticket]) -> Any:
    """Await an acquire's future. Cancelled or failed: a result that came
    anyway is given back, and the gate goes to the next task (once the
    library is done with what the acquire got)."""
    try:
        return await fut
    except BaseException:
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            res = fut.result()  # got it as the task was cancelled
            for h in (res if isinstance(res, AsyncHeldAll) else [res]):
                h._abandon()
        elif ticket is not None and not ticket.handed:
            ticket.leave()
        raise


# ------------------------------------------------------------------ holds


class AsyncHeld:
    """One held lock, permit or read lock of an AsyncClient.

    Release it once: `await held.release()`, or use it in `async with`.
    A hold dropped without release is released in the background (the
    loop would otherwise renew it for ever)."""

    __slots__ = ("_lane", "_ptr", "_bname", "kind", "on_lost", "_ticket",
                 "_token", "_owner", "_lost_status", "__weakref__")

    def __init__(self, lane: _Lane, ptr: int, bname: bytes, kind: str,
                 on_lost: Optional[Callable[["AsyncHeld"], Any]],
                 ticket: Optional[_Ticket]) -> None:
        lib = lane.lib
        self._lane = lane
        self._ptr = ptr
        self._bname = bname
        self.kind = kind
        """"lock", "semaphore", "read" or "leader"."""
        self.on_lost = on_lost
        self._ticket = ticket
        self._token: int = lib.dlock_hold_token(ptr)
        self._owner = _s(lib.dlock_hold_owner(ptr))
        self._lost_status = OK
        lane.holds[ptr] = self

    def _ended(self) -> None:
        """The hold is over (released, or given back): the next task
        queued for its name may go."""
        t, self._ticket = self._ticket, None
        if t is not None:
            t.leave()

    def _abandon(self) -> None:
        """Release in the background (nobody wants the answer)."""
        if self._ptr and self._lane.ptr:
            self._lane.release_quiet(self._ptr)

    @property
    def name(self) -> str:
        return _s(self._bname)

    @property
    def token(self) -> int:
        """The fencing token (for a leader: its epoch)."""
        return self._token

    @property
    def owner(self) -> str:
        """The owner id on the servers."""
        return self._owner

    @property
    def validity(self) -> float:
        """Seconds of validity left by this process's clock (0 once
        expired, lost or released)."""
        if not self._ptr:
            return 0.0
        return self._lane.lib.dlock_hold_validity_ms(self._ptr) / 1000.0

    @property
    def held(self) -> bool:
        """True while believed held (not released, not lost, not run
        out)."""
        if not self._ptr:
            return False
        return self._lane.lib.dlock_hold_status(self._ptr) == OK

    @property
    def lost(self) -> bool:
        """True once the loop found the lease lost."""
        return self._lost_status != OK

    @property
    def lost_reason(self) -> Optional[DlockError]:
        """Why it was lost (NotOwner or Lost, not raised, with the
        library's message while the hold is not released), or None."""
        st = self._lost_status
        if st == OK:
            return None
        lib = self._lane.lib
        msg = ""
        if self._ptr and hasattr(lib, "dlock_hold_lost_reason"):
            why = c_char_p()
            lib.dlock_hold_lost_reason(self._ptr, byref(why))
            msg = _s(why.value)
        return _errors.make(st, msg or _s(lib.dlock_strerror(st)),
                            _s(lib.dlock_status_name(st)))

    def _op(self, call: Callable[[Any, int], int],
            finish: Callable[[int, int, int], Any]) -> "asyncio.Future[Any]":
        if not self._ptr:
            raise DlockError("this hold was released", -20, "EINVAL")
        return self._lane.start(call, finish)

    async def release(self) -> None:
        """Release it; the handle is finished whatever the outcome.
        Raises NotOwner (run out or taken), Lost (found lost before) or
        an error: the work under it was then not protected all along."""
        lane = self._lane
        if not self._ptr:
            raise DlockError("this hold was released already", -20,
                             "EINVAL")
        lane.check()
        p = self._ptr

        def finish(op: int, status: int, _h: int) -> None:
            self._ended()
            if status != OK:
                raise lane.error(op, status)
        fut = lane.start(lambda out, k: lane.lib.dlock_loop_release(
            out, lane.ptr, p, _OP_CB, k), finish, keep=True)
        self._ptr = 0
        lane.holds.pop(p, None)
        # A cancelled wait for the answer does not stop the release.
        fut.add_done_callback(_consume)
        await asyncio.shield(fut)

    async def extend(self, lease: float) -> None:
        """Set the lease to LEASE seconds from now (and the renewals'
        from then on). NotOwner when it ran out or was taken."""
        ms = _ms(lease, "lease", False)
        lane = self._lane
        p = self._ptr

        def finish(op: int, status: int, _h: int) -> None:
            if status != OK:
                raise lane.error(op, status)
        await self._op(lambda out, k: lane.lib.dlock_loop_extend(
            out, lane.ptr, p, ms, _OP_CB, k), finish)

    async def __aenter__(self) -> "AsyncHeld":
        return self

    async def __aexit__(self, exc_type: Any, *exc: Any) -> None:
        if self._ptr:
            await _finish(self.release, exc_type)

    def __del__(self) -> None:
        p = self._ptr
        lane = self._lane
        if not p or not lane.ptr:
            return
        try:
            if lane.client._gen != _core._fork_gen:
                return
            # The next task queued for the name goes once it is released.
            t = self._ticket
            lane.aloop.call_soon_threadsafe(lane.release_quiet, p,
                                            t.leave if t else None)
        except Exception:
            pass

    def __repr__(self) -> str:
        return "<dlock.aio.AsyncHeld %s %r %s>" % (
            self.kind, self.name, "held" if self._ptr else "released")


async def _finish(end: Callable[[], Awaitable[None]], exc_type: Any) -> None:
    """An `async with` block's end: its failure is raised only when the
    block raised nothing (as the sync API does)."""
    try:
        await end()
    except DlockError:
        if exc_type is None:
            raise


class AsyncLeadership(AsyncHeld):
    """This process leads an election (AsyncElection.campaign): a renewed
    lock whose token is the epoch. resign() (or `async with`) ends it."""

    __slots__ = ()

    @property
    def epoch(self) -> int:
        return self._token

    @property
    def leading(self) -> bool:
        """True while it still leads, as far as this process knows."""
        return self.held

    async def proclaim(self, value: str) -> None:
        """Change the value the leader shows (NotOwner once lost)."""
        bv = _b(value, "value")
        lane = self._lane
        p = self._ptr

        def finish(op: int, status: int, _h: int) -> None:
            if status != OK:
                raise lane.error(op, status)
        await self._op(lambda out, k: lane.lib.dlock_loop_proclaim(
            out, lane.ptr, p, bv, _OP_CB, k), finish)

    async def resign(self) -> None:
        """Give the leadership up (release())."""
        await self.release()


# ------------------------------------------------------- lock objects


class _Acquirable:
    """acquire() gives an AsyncHeld; `await x` is acquire(); `async with
    x as held` acquires and releases (entries nest per task)."""

    def __init__(self, ac: AsyncClient, name: Name, lease: float,
                 timeout: Optional[float], renew: bool,
                 strategy: Optional[str],
                 on_lost: Optional[Callable[[AsyncHeld], Any]]) -> None:
        self.client = ac
        self._bname = _b(name)
        self.lease = lease
        self.timeout = timeout
        self.renew = renew
        self.strategy = strategy
        self.on_lost = on_lost
        # `async with` entries per task, made on first use.
        self._entered: Optional[Dict[Any, List[Any]]] = None

    @property
    def name(self) -> str:
        return _s(self._bname)

    def _timeout(self, timeout: Any) -> Optional[float]:
        return self.timeout if timeout is ... else timeout

    async def acquire(self, *, timeout: Any = ...) -> Any:
        raise NotImplementedError

    def __await__(self) -> Generator[Any, None, Any]:
        return self.acquire().__await__()

    async def __aenter__(self) -> Any:
        held = await self.acquire()
        if self._entered is None:
            self._entered = {}
        self._entered.setdefault(asyncio.current_task(), []).append(held)
        return held

    async def __aexit__(self, *exc: Any) -> None:
        task = asyncio.current_task()
        assert self._entered is not None
        st = self._entered[task]
        held = st.pop()
        if not st:
            del self._entered[task]
        await held.__aexit__(*exc)

    def __repr__(self) -> str:
        return "<dlock.aio.%s %r>" % (type(self).__name__, self.name)


class AsyncLock(_Acquirable):
    """An exclusive lock (AsyncClient.lock)."""

    def __init__(self, ac: AsyncClient, name: Name, *, lease: float = 30.0,
                 timeout: Optional[float] = None, renew: bool = True,
                 strategy: Optional[str] = None,
                 on_lost: Optional[Callable[[AsyncHeld], Any]] = None
                 ) -> None:
        super().__init__(ac, name, lease, timeout, renew, strategy, on_lost)

    async def acquire(self, *, timeout: Any = ...) -> AsyncHeld:
        """Acquire it (timeout as in AsyncClient.lock; default the
        lock's). Busy, TimedOut, or an error; a cancelled task gives its
        place back."""
        return await self.client._acquire(
            "lock", self._bname, 0, self.lease, self._timeout(timeout),
            self.renew, self.strategy, self.on_lost)


class AsyncSemaphore(_Acquirable):
    """A counting semaphore (AsyncClient.semaphore)."""

    def __init__(self, ac: AsyncClient, name: Name, limit: int, *,
                 lease: float = 30.0, timeout: Optional[float] = None,
                 renew: bool = True, strategy: Optional[str] = None,
                 on_lost: Optional[Callable[[AsyncHeld], Any]] = None
                 ) -> None:
        super().__init__(ac, name, lease, timeout, renew, strategy, on_lost)
        self.limit = limit

    async def acquire(self, *, timeout: Any = ...) -> AsyncHeld:
        """Take a permit."""
        return await self.client._acquire(
            "semaphore", self._bname, self.limit, self.lease,
            self._timeout(timeout), self.renew, self.strategy, self.on_lost)


class AsyncReadLock(_Acquirable):
    """The shared side of an AsyncRWLock."""

    async def acquire(self, *, timeout: Any = ...) -> AsyncHeld:
        """Enter as a reader (a waiting writer keeps new readers out)."""
        return await self.client._acquire(
            "read", self._bname, 0, self.lease, self._timeout(timeout),
            self.renew, self.strategy, self.on_lost)


class AsyncRWLock:
    """A read-write lock (AsyncClient.rwlock): readers share it, a writer
    (an exclusive lock of the same name) holds it alone."""

    def __init__(self, ac: AsyncClient, name: Name) -> None:
        self.client = ac
        self._bname = _b(name)

    @property
    def name(self) -> str:
        return _s(self._bname)

    def read(self, *, lease: float = 30.0, timeout: Optional[float] = None,
             wait: Any = ..., renew: bool = True,
             on_lost: Optional[Callable[[AsyncHeld], Any]] = None
             ) -> AsyncReadLock:
        """The shared lock."""
        return AsyncReadLock(self.client, self._bname, lease,
                             _timeout_of(timeout, wait), renew, None, on_lost)

    def write(self, *, lease: float = 30.0, timeout: Optional[float] = None,
              wait: Any = ..., renew: bool = True,
              strategy: Optional[str] = None,
              on_lost: Optional[Callable[[AsyncHeld], Any]] = None
              ) -> AsyncLock:
        """The exclusive lock (waits for the readers to leave)."""
        return AsyncLock(self.client, self._bname, lease=lease,
                         timeout=_timeout_of(timeout, wait), renew=renew,
                         strategy=strategy, on_lost=on_lost)


class AsyncHeldAll(Sequence[AsyncHeld]):
    """The holds of one AsyncMultiLock.acquire(), in the names' order."""

    def __init__(self, helds: List[AsyncHeld]) -> None:
        self._helds = helds

    def __getitem__(self, i: Any) -> Any:
        return self._helds[i]

    def __len__(self) -> int:
        return len(self._helds)

    def __iter__(self) -> Iterator[AsyncHeld]:
        return iter(self._helds)

    async def release(self) -> None:
        """Release every hold still held (at once); raise the first
        failure, in the names' order, after all."""
        live = [h for h in self._helds if h._ptr]
        res = await asyncio.gather(*[h.release() for h in live],
                                   return_exceptions=True)
        for r in res:
            if isinstance(r, BaseException):
                raise r

    async def __aenter__(self) -> "AsyncHeldAll":
        return self

    async def __aexit__(self, exc_type: Any, *exc: Any) -> None:
        await _finish(self.release, exc_type)


class AsyncMultiLock(_Acquirable):
    """Several locks taken all or nothing (AsyncClient.lock_all)."""

    def __init__(self, ac: AsyncClient, names: Sequence[Name], *,
                 lease: float = 30.0, timeout: Optional[float] = None,
                 renew: bool = True, strategy: Optional[str] = None,
                 on_lost: Optional[Callable[[AsyncHeld], Any]] = None
                 ) -> None:
        if isinstance(names, (str, bytes)):
            raise TypeError("names must be a sequence of names")
        self._bnames = [_b(n) for n in names]
        super().__init__(ac, b",".join(self._bnames) or b"-", lease, timeout,
                         renew, strategy, on_lost)

    async def acquire(self, *, timeout: Any = ...) -> AsyncHeldAll:
        """Take them all (timeout bounds the whole call)."""
        ac = self.client
        lane = ac._get_lane()
        lib = lane.lib
        bnames = self._bnames
        n = len(bnames)
        wait_ms = _ms(self._timeout(timeout), "timeout", True)
        lease_ms = _ms(self.lease, "lease", False)
        on_lost = self.on_lost
        if on_lost is not None and not callable(on_lost):
            raise TypeError("on_lost must be callable")
        gate = list(set(bnames)) if len(set(bnames)) == n else []
        deadline = None if wait_ms < 0 else (
            0 if wait_ms == 0 else lane.aloop.time() + wait_ms / 1000.0)
        await ac._gate_enter(gate, deadline)
        ticket = _Ticket(ac, gate)
        if deadline:
            wait_ms = max(1, int((deadline - lane.aloop.time()) * 1000))

        def holds_of(op: int) -> List[int]:
            arr = (c_void_p * max(1, n))()
            got = lib.dlock_op_holds(op, arr)
            return [arr[i] or 0 for i in range(max(0, got))]

        def finish(op: int, status: int, _h: int) -> AsyncHeldAll:
            if status != OK:
                raise lane.error(op, status)
            ptrs = holds_of(op)
            # The names' gates open when the last of them is released.
            ticket.count = len(ptrs)
            return AsyncHeldAll([AsyncHeld(lane, p, b, "lock", on_lost,
                                           ticket)
                                 for p, b in zip(ptrs, bnames)])

        def orphan(op: int, _h: int) -> None:
            ptrs = holds_of(op)
            ticket.handed = True
            ticket.count = len(ptrs)
            for p in ptrs:
                lane.release_quiet(p, ticket.leave)

        try:
            o = lane.options(wait_ms, lease_ms, self.renew, self.strategy)
            arr = (c_char_p * max(1, n))(*bnames)
            fut = lane.start(lambda out, k: lib.dlock_loop_lock_all(
                out, lane.ptr, arr, n, byref(o), _OP_CB, k), finish, orphan)
        except BaseException:
            ticket.leave()
            raise
        return await _settle(fut, ticket)


# ---------------------------------------------------------------- election


class AsyncElection:
    """The leader election NAME (AsyncClient.election)."""

    def __init__(self, ac: AsyncClient, name: Name) -> None:
        self.client = ac
        self._bname = _b(name)

    @property
    def name(self) -> str:
        return _s(self._bname)

    async def campaign(self, value: str = "", *, lease: float = 30.0,
                       timeout: Optional[float] = None,
                       on_lost: Optional[Callable[[AsyncHeld], Any]] = None
                       ) -> AsyncLeadership:
        """Wait until this process leads (timeout: None forever, 0 try
        once, t seconds), then proclaim VALUE. The leadership is renewed
        on the loop; on_lost(leadership) if it is lost."""
        held = await self.client._acquire(
            "leader", self._bname, 0, lease, timeout, True, None, on_lost,
            _b(value, "value"))
        assert isinstance(held, AsyncLeadership)
        return held

    def _info(self, lane: _Lane, op: int) -> LeaderInfo:
        li = _ffi.LeaderInfo()
        lane.lib.dlock_op_leader(op, byref(li))
        return LeaderInfo._from(li)

    async def leader(self) -> LeaderInfo:
        """Who leads now (info.leading False: nobody)."""
        lane = self.client._get_lane()

        def finish(op: int, status: int, _h: int) -> LeaderInfo:
            if status != OK:
                raise lane.error(op, status)
            return self._info(lane, op)
        return await lane.start(lambda out, k: lane.lib.dlock_loop_leader(
            out, lane.ptr, self._bname, _OP_CB, k), finish)

    async def observe(self, known: Optional[LeaderInfo] = None,
                      timeout: Optional[float] = None
                      ) -> Optional[LeaderInfo]:
        """Wait until the leader differs from KNOWN (another leader or
        epoch, a new value, nobody) and return it; None after TIMEOUT
        seconds without a change (None: no bound). known=None: the
        current leader at once."""
        if known is None:
            return await self.leader()
        lane = self.client._get_lane()
        k = known._to()
        ms = _ms(timeout, "timeout", True)

        def finish(op: int, status: int, _h: int) -> Optional[LeaderInfo]:
            if status == _TIMEDOUT:
                return None
            if status != OK:
                raise lane.error(op, status)
            return self._info(lane, op)
        return await lane.start(
            lambda out, key: lane.lib.dlock_loop_leader_wait(
                out, lane.ptr, self._bname, byref(k), ms, _OP_CB, key),
            finish)
