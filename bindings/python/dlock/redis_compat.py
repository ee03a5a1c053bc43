"""A drop-in for redis-py's Lock, backed by libdlock.

Change one import and keep the code:

    from dlock.redis_compat import Lock            # was: from redis.lock
    lock = Lock(r, "job", timeout=10, blocking_timeout=5)
    with lock: ...
    # or keep r.lock(...):  r.lock("job", timeout=10, lock_class=Lock)

Lock takes what redis-py's takes: (redis, name, timeout=None, sleep=0.1,
blocking=True, blocking_timeout=None, thread_local=True), where redis is
a redis-py client (redis.Redis: TCP, TLS or unix socket), a URL string or
a dlock.Client; and it has acquire/release/extend/reacquire/locked/owned
and `local.token`. LockError and LockNotOwnedError subclass redis-py's
(and dlock.DlockError), so `except redis.exceptions.LockError` keeps
working; connection failures raise subclasses of redis-py's
ConnectionError, TimeoutError and AuthenticationError.

AsyncLock is the same for redis.asyncio.lock.Lock (over dlock.aio, the
event-loop API: no thread per waiter):

    from dlock.redis_compat import AsyncLock as Lock   # redis.asyncio.lock
    async with Lock(r, "job", timeout=10): ...         # r: redis.asyncio
    # or keep r.lock(...):  r.lock("job", timeout=10, lock_class=AsyncLock)

Where redis-py and dlock differ, this layer follows redis-py:
- Ownership per Lock object and token, not per thread: a second acquire
  of a name this thread already holds (through the same Lock object or
  another) is not reentrant; it waits or fails as with redis-py. (This
  layer then acquires through a second dlock client, made on demand, so
  the server sees another owner.)
- timeout=None: held until released, as in redis-py; dlock gives every
  lock a lease, so it is taken with a 30 s lease renewed every 10 s by
  the watchdog thread: a process that dies frees it within 30 s instead
  of never. extend() and reacquire() still refuse such a lock, as
  redis-py does.
- With thread_local=False the token is shared by all threads, and any
  of them may release (as in redis-py). With thread_local=True, another
  thread's release() raises LockError ("Cannot release an unlocked
  lock"), where redis-py 4.3 raises AttributeError.

What differs anyway, and cannot be hidden:
- The lock is not the Redis key NAME: dlock keeps it under
  "dlock:{NAME}" (and a fencing counter beside it), so every process
  taking a given name must switch to dlock together, and code reading
  the key itself (r.get(name)) sees nothing.
- local.token is dlock's owner id (bytes), not a UUID; a token passed to
  acquire(token=...) is not used (the server assigns the owner id). A
  token copied from another process may be set as lock.local.token
  and released, as with redis-py (dlock adopts the hold by it).
- sleep is accepted and ignored: waiters are woken by the release
  (fair FIFO), not by polling.
- extend(t) without replace_ttl adds t to the lease left by this
  process's clock, a little less than the server's TTL.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import weakref
from types import SimpleNamespace
from typing import (Any, Awaitable, Dict, Iterator, List, Optional, Set,
                    Tuple, Union)
from urllib.parse import quote

import redis.exceptions as _rx

from . import _core, _errors
from ._core import Client, Held

__all__ = ["Lock", "AsyncLock", "LockError", "LockNotOwnedError",
           "ConnectionError", "TimeoutError", "AuthenticationError"]

Number = Union[int, float]

# The lease of a lock taken with timeout=None, renewed by the watchdog.
NO_TIMEOUT_LEASE = 30.0


# Each is a dlock.DlockError first (its message, code and name) and the
# redis-py exception its users catch.
class LockError(_errors.DlockError, _rx.LockError):
    """redis-py's LockError (also a dlock.DlockError)."""


class LockNotOwnedError(LockError, _rx.LockNotOwnedError):
    """redis-py's LockNotOwnedError: the lock is (no longer) ours."""


class ConnectionError(_errors.DlockError, _rx.ConnectionError):
    """redis-py's ConnectionError: a server could not be reached."""


class TimeoutError(_errors.DlockError, _rx.TimeoutError):
    """redis-py's TimeoutError: a server did not answer in time."""


class AuthenticationError(_errors.DlockError, _rx.AuthenticationError):
    """redis-py's AuthenticationError: credentials refused."""


@contextlib.contextmanager
def _owned_or_raise(what: str) -> Iterator[None]:
    """Run a release or extend: dlock's NotOwner and Lost become
    redis-py's LockNotOwnedError ("Cannot WHAT a lock that's no longer
    owned"), any other failure its redis-py class (_translate)."""
    try:
        yield
    except (_errors.NotOwner, _errors.Lost):
        raise LockNotOwnedError(
            "Cannot %s a lock that's no longer owned" % what) from None
    except _errors.DlockError as e:
        raise _translate(e) from e


def _translate(e: _errors.DlockError) -> Exception:
    """A dlock failure as the redis-py exception its users catch (the
    library's message, code and name kept)."""
    cls: Any = LockError
    if isinstance(e, (_errors.ConnectionFailed, _errors.NoQuorum)):
        cls = ConnectionError
    elif isinstance(e, _errors.ServerTimeout):
        cls = TimeoutError
    elif isinstance(e, _errors.AuthError):
        cls = AuthenticationError
    return cls(str(e), e.code, e.name)


# ------------------------------------------------------------ client pools


class _Pool:
    """The dlock clients for one server configuration, shared by every
    compat Lock of the process. A thread that holds NAME through client i
    and acquires NAME again takes it through the first client it does not
    hold NAME on (made when needed), so that the server sees a second
    owner and the acquire is not reentrant, as redis-py's is not."""

    def __init__(self, make: Any) -> None:
        self._make = make
        self._clients: List[Client] = []
        self._holds: Dict[Tuple[int, bytes], Set[int]] = {}
        self._mu = threading.Lock()

    def pick(self, bname: bytes) -> Tuple[Client, Tuple[int, bytes], int]:
        key = (threading.get_ident(), bname)
        with self._mu:
            used = self._holds.get(key, ())
            i = 0
            while i in used:
                i += 1
            if i == len(self._clients):
                self._clients.append(self._make())
            return self._clients[i], key, i

    def taken(self, key: Tuple[int, bytes], i: int) -> None:
        with self._mu:
            self._holds.setdefault(key, set()).add(i)

    def given_back(self, key: Tuple[int, bytes], i: int) -> None:
        with self._mu:
            s = self._holds.get(key)
            if s is not None:
                s.discard(i)
                if not s:
                    del self._holds[key]

    def first(self) -> Client:
        with self._mu:
            if not self._clients:
                self._clients.append(self._make())
            return self._clients[0]


_pools: Dict[Any, _Pool] = {}
_pools_mu = threading.Lock()


def _forget_pools() -> None:
    # A child after fork() makes its own clients.
    _pools.clear()


os.register_at_fork(after_in_child=_forget_pools)


def _from_redis_py(r: Any) -> Tuple[Any, Any]:
    """(cache key, factory) for the dlock client matching redis-py client
    R's connection settings."""
    key, url, kwargs = _settings_of(r)

    def make() -> Client:
        return Client(url, **kwargs)
    return key, make


def _settings_of(r: Any) -> Tuple[Any, str, Dict[str, Any]]:
    """(cache key, URL, dlock.Client keywords) matching redis-py client
    R's connection settings (redis.Redis or redis.asyncio.Redis)."""
    pool = getattr(r, "connection_pool", None)
    if pool is None:
        raise TypeError("redis must be a redis.Redis client, a URL or a "
                        "dlock.Client, not %s" % type(r).__name__)
    kw = dict(pool.connection_kwargs)
    cls = getattr(pool, "connection_class", None)
    cls_name = getattr(cls, "__name__", "")
    db = int(kw.get("db") or 0)
    tls: Dict[str, Any] = {}
    if kw.get("path"):
        url = "unix://%s?db=%d" % (quote(kw["path"]), db)
    else:
        host = kw.get("host", "localhost")
        if ":" in host and not host.startswith("["):
            host = "[%s]" % host
        scheme = "rediss" if "SSL" in cls_name else "redis"
        url = "%s://%s:%d/%d" % (scheme, host, int(kw.get("port", 6379)), db)
        if scheme == "rediss":
            tls = {"tls_ca_file": kw.get("ssl_ca_certs"),
                   "tls_cert_file": kw.get("ssl_certfile"),
                   "tls_key_file": kw.get("ssl_keyfile"),
                   "tls_insecure": kw.get("ssl_cert_reqs") in ("none", 0)}
    user = kw.get("username")
    password = kw.get("password")
    # redis-py's socket timeouts (seconds; None: its default, none) as
    # dlock's; dlock's defaults (2 s) where redis-py has none.
    times = {}
    if kw.get("socket_connect_timeout"):
        times["connect_timeout"] = float(kw["socket_connect_timeout"])
    if kw.get("socket_timeout"):
        times["command_timeout"] = float(kw["socket_timeout"])
    key = ("redis-py", url, user, password, tuple(sorted(tls.items())),
           tuple(sorted(times.items())))
    return key, url, dict(username=user, password=password, env=False,
                          **tls, **times)


def _pool_for(r: Any) -> _Pool:
    """The pool for R: a dlock.Client (the first owner; further owners
    are clients made as it was), a URL, or a redis-py client."""
    if isinstance(r, Client):
        key: Any = ("client", id(r))
        make = r._clone
    elif isinstance(r, str):
        key = ("url", r)

        def make() -> Client:
            return Client(r)
    else:
        key, make = _from_redis_py(r)
    with _pools_mu:
        p = _pools.get(key)
        if p is None:
            p = _pools[key] = _Pool(make)
            if isinstance(r, Client):
                p._clients.append(r)
        return p


# ------------------------------------------------------------------- Lock


class _LockBase:
    """What Lock and AsyncLock share: redis-py's constructor, how its
    arguments become dlock's wait and lease, and the token's hold."""

    def __init__(self, redis: Any, name: Union[str, bytes],
                 timeout: Optional[Number] = None, sleep: Number = 0.1,
                 blocking: bool = True,
                 blocking_timeout: Optional[Number] = None,
                 thread_local: bool = True) -> None:
        self.redis = redis
        self.name = name
        self.timeout = timeout
        self.sleep = sleep
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        self.thread_local = bool(thread_local)
        self.local: Any = (threading.local() if self.thread_local
                           else SimpleNamespace())
        self.local.token = None
        self._bname = _core._b(name)

    def _terms(self, blocking: Optional[bool],
               blocking_timeout: Optional[Number]
               ) -> Tuple[Optional[float], float, bool]:
        """(wait, lease, renewed) for an acquire: blocking=False tries
        once; timeout=None is a renewed NO_TIMEOUT_LEASE."""
        if blocking is None:
            blocking = self.blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        wait: Optional[float]
        if not blocking:
            wait = 0
        elif blocking_timeout is None:
            wait = None
        else:
            wait = max(0.0, float(blocking_timeout))
        if self.timeout is None:
            return wait, NO_TIMEOUT_LEASE, True
        return wait, float(self.timeout), False

    def _token(self) -> Optional[bytes]:
        token = getattr(self.local, "token", None)
        return token.encode() if isinstance(token, str) else token

    def _take_held(self) -> Any:
        """The hold this Lock took under its current token, if any."""
        held = getattr(self.local, "held", None)
        if held is not None and held._ptr and \
                held.owner.encode() == self._token():
            return held
        return None

    def _check(self, what: str) -> None:
        """extend's and reacquire's refusals, as redis-py words them."""
        if getattr(self.local, "token", None) is None:
            raise LockError("Cannot %s an unlocked lock" % what)
        if self.timeout is None:
            raise LockError("Cannot %s a lock with no timeout" % what)

    def _extended(self, additional_time: Number, replace_ttl: bool) -> float:
        """The lease extend() asks for: additional_time more than is left
        by this process's clock (replace_ttl: additional_time)."""
        add = float(additional_time)
        if replace_ttl:
            return add
        held = self._take_held()
        left = held.validity if held is not None else 0.0
        if held is not None and left <= 0:
            raise LockNotOwnedError(
                "Cannot extend a lock that's no longer owned")
        return left + add


class Lock(_LockBase):
    """redis-py's Lock over dlock: see the module's docstring for what
    follows redis-py and what differs."""

    def __init__(self, redis: Any, name: Union[str, bytes],
                 timeout: Optional[Number] = None, sleep: Number = 0.1,
                 blocking: bool = True,
                 blocking_timeout: Optional[Number] = None,
                 thread_local: bool = True) -> None:
        super().__init__(redis, name, timeout, sleep, blocking,
                         blocking_timeout, thread_local)
        self._pool_of: Optional[_Pool] = _pool_for(redis)
        self._pool_gen = _core._fork_gen

    @property
    def _pool(self) -> _Pool:
        """The clients to take the lock through: after a fork() those of
        the child (made there), as redis-py's Lock reconnects there."""
        if self._pool_gen != _core._fork_gen or self._pool_of is None:
            self._pool_of = _pool_for(self.redis)
            self._pool_gen = _core._fork_gen
        return self._pool_of

    def __enter__(self) -> "Lock":
        if self.acquire():
            return self
        raise LockError("Unable to acquire lock within the time specified")

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def acquire(self, sleep: Optional[Number] = None,
                blocking: Optional[bool] = None,
                blocking_timeout: Optional[Number] = None,
                token: Optional[Union[str, bytes]] = None) -> bool:
        """Take the lock; True once taken. blocking=False: try once and
        return False when held; else wait up to blocking_timeout seconds
        (None: forever), then False. sleep and token are accepted and not
        used (see the module's docstring)."""
        wait, lease, watchdog = self._terms(blocking, blocking_timeout)
        client, key, i = self._pool.pick(self._bname)
        try:
            held = client._acquire(0, self._bname, 0, lease, wait, watchdog,
                                   None)
        except (_errors.Busy, _errors.TimedOut):
            return False
        except _errors.DlockError as e:
            raise _translate(e) from e
        self._pool.taken(key, i)
        self.local.token = held.owner.encode()
        self.local.held = held
        self.local.slot = (key, i)
        return True

    def locked(self) -> bool:
        """True when any process holds the lock."""
        try:
            return self._pool.first().inspect(self._bname).held
        except _errors.DlockError as e:
            raise _translate(e) from e

    def owned(self) -> bool:
        """True when the lock is held under this Lock's token."""
        token = self._token()
        if token is None:
            return False
        try:
            info = self._pool.first().inspect(self._bname)
        except _errors.DlockError as e:
            raise _translate(e) from e
        return info.held and info.owner.encode() == token

    def _adopt(self, token: Union[str, bytes]) -> Held:
        """A handle for a token set by hand (another process's)."""
        owner = token.decode() if isinstance(token, bytes) else token
        return self._pool.first().adopt(self._bname, owner)

    def _done(self) -> None:
        slot = getattr(self.local, "slot", None)
        if slot is not None:
            self._pool.given_back(*slot)
        self.local.held = None
        self.local.slot = None

    def release(self) -> None:
        """Release the lock. LockError when this Lock does not hold it;
        LockNotOwnedError when it is no longer ours (expired, taken)."""
        token = getattr(self.local, "token", None)
        if token is None:
            raise LockError("Cannot release an unlocked lock")
        self.local.token = None
        held = self._take_held()
        try:
            with _owned_or_raise("release"):
                if held is None:
                    held = self._adopt(token)
                held.release()
        finally:
            self._done()

    def _renew(self, lease: float, what: str) -> bool:
        held = self._take_held()
        with _owned_or_raise(what):
            if held is None:
                held = self._adopt(self.local.token)
                self.local.held = held
            held.extend(lease)
        return True

    def extend(self, additional_time: Number,
               replace_ttl: bool = False) -> bool:
        """Add additional_time seconds to the lease left (replace_ttl:
        set the lease to it). LockError for an unheld lock or one with
        timeout=None; LockNotOwnedError when it is no longer ours."""
        self._check("extend")
        return self._renew(self._extended(additional_time, replace_ttl),
                           "extend")

    def reacquire(self) -> bool:
        """Set the lease back to timeout seconds."""
        self._check("reacquire")
        return self._renew(float(self.timeout), "reacquire")


# ------------------------------------------------------------- asyncio


# Per running event loop (weakly: a closed, dropped loop takes its
# clients with it), the dlock.aio clients by connection settings.
_aio_clients: "weakref.WeakKeyDictionary[Any, Dict[Any, Any]]" = \
    weakref.WeakKeyDictionary()


def _aio_client_for(r: Any) -> Any:
    """The dlock.aio.AsyncClient for R on the running event loop: R
    itself when it is one; else one per connection settings and loop (a
    dlock.Client's settings, a URL, a redis.asyncio.Redis's)."""
    from . import aio
    if isinstance(r, aio.AsyncClient):
        return r
    loop = asyncio.get_running_loop()
    per = _aio_clients.get(loop)
    if per is None:
        per = _aio_clients[loop] = {}
    if isinstance(r, Client):
        key: Any = ("client", id(r))
    elif isinstance(r, str):
        key = ("url", r)
    else:
        key, url, kwargs = _settings_of(r)
    ac = per.get(key)
    if ac is None or ac.closed:
        if isinstance(r, Client):
            ac = aio.AsyncClient(r._clone())
        elif isinstance(r, str):
            ac = aio.AsyncClient(r)
        else:
            ac = aio.AsyncClient(url, **kwargs)
        per[key] = ac
    return ac


class AsyncLock(_LockBase):
    """redis.asyncio.lock.Lock over dlock's event-loop API (dlock.aio):

        from dlock.redis_compat import AsyncLock as Lock  # was: from
                                                 # redis.asyncio.lock
        async with Lock(r, "job", timeout=10, blocking_timeout=5): ...
        # or keep r.lock(...):  r.lock("job", lock_class=AsyncLock)

    redis: a redis.asyncio.Redis client, a URL, a dlock.Client (its
    settings) or a dlock.aio.AsyncClient. The same signature and
    behaviour as redis-py's asyncio Lock: acquire/locked/owned are
    coroutines; release, extend and reacquire raise LockError at once on
    misuse and otherwise return an awaitable. What Lock's docstring says
    of the differences holds here too, and:
    - the locks of one event loop go through one dlock.aio.AsyncClient
      (one connection, one more while something waits, no thread); two
      Lock objects of one name are two owners: the second waits (queued
      in the client), as with redis-py;
    - a Lock dropped while held releases it in the background (the loop
      would renew a timeout=None lock for ever);
    - releasing a token set by hand (another process's) adopts it
      through the client's blocking sync API (one round trip)."""

    async def __aenter__(self) -> "AsyncLock":
        if await self.acquire():
            return self
        raise LockError("Unable to acquire lock within the time specified")

    async def __aexit__(self, *exc: Any) -> None:
        await self.release()

    async def acquire(self, blocking: Optional[bool] = None,
                      blocking_timeout: Optional[Number] = None,
                      token: Optional[Union[str, bytes]] = None) -> bool:
        """Take the lock; True once taken, False when not within
        blocking_timeout (blocking=False: try once). A cancelled task
        gives its place in the queue back. sleep and token are accepted
        and not used."""
        wait, lease, renew = self._terms(blocking, blocking_timeout)
        try:
            ac = _aio_client_for(self.redis)
            held = await ac._acquire("lock", self._bname, 0, lease, wait,
                                     renew, None, None)
        except (_errors.Busy, _errors.TimedOut):
            return False
        except _errors.DlockError as e:
            raise _translate(e) from e
        self.local.token = held.owner.encode()
        self.local.held = held
        return True

    async def _holder(self) -> Tuple[bool, bytes]:
        """(held by anyone, its owner id): the loop's leader query (a
        lock's holder), or where the loop has none (several servers,
        Sentinel, Cluster) the blocking inspect."""
        ac = _aio_client_for(self.redis)
        try:
            try:
                info = await ac.election(self._bname).leader()
                return info.leading, info.owner.encode()
            except _errors.InvalidArgument:
                li = ac.sync.inspect(self._bname)
                return li.held, li.owner.encode()
        except _errors.DlockError as e:
            raise _translate(e) from e

    async def locked(self) -> bool:
        """True when any process holds the lock."""
        return (await self._holder())[0]

    async def owned(self) -> bool:
        """True when the lock is held under this Lock's token."""
        token = self._token()
        if token is None:
            return False
        held, owner = await self._holder()
        return held and owner == token

    def release(self) -> Awaitable[None]:
        """Release the lock. LockError at once when this Lock does not
        hold it; the awaitable raises LockNotOwnedError when it is no
        longer ours (expired, taken)."""
        token = getattr(self.local, "token", None)
        if token is None:
            raise LockError("Cannot release an unlocked lock")
        held = self._take_held()
        self.local.token = None
        self.local.held = None
        return self._do_release(token, held)

    async def _do_release(self, token: Union[str, bytes], held: Any) -> None:
        with _owned_or_raise("release"):
            if held is None:
                owner = token.decode() if isinstance(token, bytes) else token
                _aio_client_for(self.redis).sync.adopt(
                    self._bname, owner).release()
            else:
                await held.release()

    async def _renew(self, lease: float, what: str) -> bool:
        held = self._take_held()
        with _owned_or_raise(what):
            if held is None:
                raise _errors.NotOwner("not held through this Lock", -3,
                                       "NOT_OWNER")
            await held.extend(lease)
        return True

    def extend(self, additional_time: Number,
               replace_ttl: bool = False) -> Awaitable[bool]:
        """Add additional_time seconds to the lease left (replace_ttl:
        set it to that). LockError at once for an unheld lock or one with
        timeout=None; LockNotOwnedError when it is no longer ours."""
        self._check("extend")
        try:
            lease = self._extended(additional_time, replace_ttl)
        except LockNotOwnedError as e:
            err = e

            async def gone() -> bool:
                raise err  # from the awaitable, as redis-py's
            return gone()
        return self._renew(lease, "extend")

    def reacquire(self) -> Awaitable[bool]:
        """Set the lease back to timeout seconds."""
        self._check("reacquire")
        return self._renew(float(self.timeout), "reacquire")
