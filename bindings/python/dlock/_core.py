"""The synchronous API over libdlock (see dlock/__init__.py for the tour).

Threads, the GIL, fork
----------------------
Every libdlock call is made through ctypes with the GIL released, so a
thread waiting for a lock lets the others run. The lost-lease callback is
called on the library's watchdog thread; ctypes takes the GIL for it.
Since no call into the library is ever made with the GIL held, the
watchdog never waits for a thread that waits for it.

A Client counts the calls in flight; close() cancels waiting acquires,
waits for the calls to return, then frees the C client, so a handle in use
never sees it freed. At interpreter exit every open client is closed the
same way (atexit), before Python stops running threads, so no callback
arrives into a finalizing interpreter.

The C library's rule for fork(): a child must create its own client. A
Client made before a fork() refuses every call in the child (DlockError)
and is never freed there (its threads do not exist in the child); Held
objects of it are left alone too.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import re
import threading
import weakref
from ctypes import byref, c_char_p, c_int64, c_size_t, c_uint64, c_void_p
from dataclasses import dataclass
from typing import (Any, Callable, Dict, Iterator, List, Optional, Sequence,
                    Tuple, Union)

from . import _errors, _ffi
from ._errors import DlockError

Name = Union[str, bytes]
"""A lock name or key: str (UTF-8) or bytes, 1 to 512 bytes, no NUL."""

OK = 0
_LOST = -4

_lib_cache: Optional[ctypes.CDLL] = None
_lib_mu = threading.Lock()


def _lib() -> ctypes.CDLL:
    """libdlock, loaded on first use (so `import dlock` and help(dlock)
    work without it)."""
    global _lib_cache
    if _lib_cache is None:
        with _lib_mu:
            if _lib_cache is None:
                _lib_cache = _ffi.load()
    return _lib_cache


def library_path() -> str:
    """The path libdlock was loaded from (loading it if need be)."""
    return _lib().path


def library_version() -> str:
    """The loaded libdlock's version string (dlock_version())."""
    return _lib().dlock_version().decode()


def strerror(code: int) -> str:
    """libdlock's static text for a status code."""
    return _lib().dlock_strerror(code).decode()


# ---------------------------------------------------------------- fork

_fork_gen = 0


def _after_fork_in_child() -> None:
    global _fork_gen
    _fork_gen += 1
    _lost_handlers.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)

# ---------------------------------------------------------------- helpers


def _b(name: Name, what: str = "name") -> bytes:
    """NAME as bytes for C; a NUL inside would cut it short silently, so
    it is refused."""
    if isinstance(name, str):
        b = name.encode("utf-8", "surrogateescape")
    elif isinstance(name, (bytes, bytearray, memoryview)):
        b = bytes(name)
    else:
        raise TypeError("%s must be str or bytes, not %s"
                        % (what, type(name).__name__))
    if b"\0" in b:
        raise _errors.InvalidArgument("%s contains a NUL byte" % what,
                                      -20, "EINVAL")
    return b


def _s(b: Optional[bytes]) -> str:
    return "" if b is None else b.decode("utf-8", "surrogateescape")


def _ms(seconds: Optional[float], what: str, forever_ok: bool) -> int:
    """Seconds (float) to whole milliseconds; None is -1 (forever) where
    allowed."""
    if seconds is None:
        if forever_ok:
            return -1
        raise _errors.InvalidArgument("%s must be a number of seconds"
                                      % what, -20, "EINVAL")
    if seconds < 0:
        raise _errors.InvalidArgument(
            "%s must not be negative%s" %
            (what, " (None waits forever)" if forever_ok else ""),
            -20, "EINVAL")
    return int(round(seconds * 1000))


def _secs(ms: int) -> Optional[float]:
    return None if ms < 0 else ms / 1000.0


def _env(name: str) -> Optional[str]:
    v = os.environ.get(name)
    return v if v else None


def _split_servers(spec: str) -> List[str]:
    """A server list as DLOCK_SERVERS spells it: comma-separated URLs,
    blanks around them ignored; a redis+cluster:// URL is one entry,
    commas and all (its seeds)."""
    s = spec.strip(" \t")
    if s.lower().startswith(("redis+cluster://", "rediss+cluster://")):
        return [s.split()[0]] if s else []
    return [t.strip(" \t") for t in spec.split(",") if t.strip(" \t")]


# ------------------------------------------------------ lost callbacks

_tls = threading.local()
_lost_handlers: Dict[int, Tuple["weakref.ref[Held]",
                                Callable[["Held"], Any]]] = {}
_lost_next = [1]
_lost_mu = threading.Lock()


def _lost_trampoline(lock_ptr: Optional[int],
                     userdata: Optional[int]) -> None:
    """Called by libdlock's watchdog thread (ctypes holds the GIL for us)
    when a lease is found lost: find the Held and the user's callback by
    the key in userdata and call it. An exception in the callback is
    reported by ctypes as unraisable and otherwise ignored."""
    entry = _lost_handlers.get(userdata or 0)
    if entry is None:
        return
    held = entry[0]()
    if held is None:
        return
    _tls.lost_ptr = lock_ptr
    try:
        entry[1](held)
    finally:
        _tls.lost_ptr = None


# One C function pointer for every lock, alive as long as the module: a
# lock's callback can never outlive it.
_LOST_TRAMPOLINE = _ffi.LOST_CB(_lost_trampoline)


def _in_lost_callback() -> bool:
    return getattr(_tls, "lost_ptr", None) is not None


def _finish(end: Callable[[], Any], exc_type: Any) -> None:
    """A `with` block's end: END() (a release, a resign). Its failure is
    raised only when the block raised nothing: the block's own exception
    matters more, and without one a failed release says the work was not
    protected all along."""
    try:
        end()
    except DlockError:
        if exc_type is None:
            raise


# --------------------------------------------------------- data classes


@dataclass(frozen=True)
class HolderInfo:
    """Who holds a lock, as its holder recorded it (holder_info=True)."""
    host: str
    pid: int
    label: str
    version: str
    held_for: Optional[float]
    """Seconds since the hold began (server's clock), None if unknown."""


@dataclass(frozen=True)
class LockInfo:
    """What the servers say about a lock (Client.inspect, Client.list)."""
    held: bool
    owner: str
    reentry: int
    ttl: Optional[float]
    """Remaining lease in seconds, None when free."""
    last_token: int
    waiters: int
    """Waiters Redis can count (notify + fair queue), -1 unknown."""
    nodes_holding: int
    holder: Optional[HolderInfo]
    notify_waiters: int
    fair_queue: int

    @classmethod
    def _from(cls, i: _ffi.Info) -> "LockInfo":
        holder = None
        if i.has_holder:
            holder = HolderInfo(_s(i.holder_host), i.holder_pid,
                                _s(i.holder_label), _s(i.holder_version),
                                _secs(i.held_ms))
        return cls(bool(i.held), _s(i.owner), i.reentry, _secs(i.ttl_ms),
                   i.last_token, i.waiters, i.nodes_holding, holder,
                   i.notify_waiters, i.fair_queue)


@dataclass(frozen=True)
class ListEntry:
    """One held lock found by Client.list()."""
    kind: str
    name: str
    info: LockInfo


@dataclass(frozen=True)
class SharedHolder:
    """A holder of a semaphore permit or a read lease."""
    owner: str
    ttl: float
    token: int


@dataclass(frozen=True)
class SharedInfo:
    """What the server says about a semaphore or a lock's readers."""
    kind: str
    """"none", "lock" or "semaphore"."""
    limit: int
    holders: int
    waiters: int
    writer_waiting: float
    """Seconds a waiting writer keeps new readers out yet (0: none)."""
    last_token: int
    listed: List[SharedHolder]


@dataclass(frozen=True)
class LeaderInfo:
    """Who leads an election, as the servers tell (Election.leader)."""
    leading: bool
    proclaimed: bool
    owner: str
    epoch: int
    value: str
    since_ms: int
    """When it won, Unix ms by the server's clock; 0 when unknown."""
    ttl: Optional[float]

    @classmethod
    def _from(cls, i: _ffi.LeaderInfo) -> "LeaderInfo":
        return cls(bool(i.leading), bool(i.proclaimed), _s(i.owner),
                   i.epoch, _s(i.value), i.since_ms, _secs(i.ttl_ms))

    def _to(self) -> _ffi.LeaderInfo:
        i = _ffi.LeaderInfo()
        i.leading = int(self.leading)
        i.proclaimed = int(self.proclaimed)
        i.owner = _b(self.owner)
        i.epoch = self.epoch
        i.value = _b(self.value)
        i.since_ms = self.since_ms
        i.ttl_ms = -1 if self.ttl is None else int(self.ttl * 1000)
        return i


@dataclass(frozen=True)
class Event:
    """One event of a client (Client(on_event=...)): kind is "acquired",
    "busy", "waited", "renewed", "lost" or "released"; status the
    outcome's code (0, or e.g. -2 TIMEDOUT for "waited"); duration in
    seconds (see dlock.h: time in the call, waited, held, round trip);
    token the fencing token (0 when none)."""
    kind: str
    name: str
    status: int
    duration: float
    token: int


@dataclass(frozen=True)
class Histogram:
    """A latency histogram (Client.metrics): count and sum of the values,
    and per bucket (upper bound in seconds, inf for the last; values v
    with previous bound < v <= bound) how many; not cumulative."""
    count: int
    sum: float
    """Seconds."""
    buckets: List[Tuple[float, int]]


@dataclass(frozen=True)
class Metrics:
    """Client.metrics(): the counters of stats() and three histograms:
    acquire_wait (time in successful acquires, waiting included), hold
    (acquisition to last release) and renewal (renewal round trips)."""
    stats: Dict[str, int]
    acquire_wait: Histogram
    hold: Histogram
    renewal: Histogram


@dataclass(frozen=True)
class FencedValue:
    """A fenced value: its bytes (None when the key has none) and the
    highest fencing token the key has seen (0: never written)."""
    value: Optional[bytes]
    fence: int


# --------------------------------------------------------------- client

_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()
# Event callbacks of C clients left running (a close that gave up).
_kept_alive: List[Any] = []

_WAIT_STRATEGIES = {"notify": 0, "spin": 1, "fair": 2}
# A number of seconds as the tool takes it (fullmatch).
_SECONDS_RE = re.compile(r"(?=\.?[0-9])[0-9]*(\.[0-9]*)?([eE][-+]?[0-9]+)?")


class Client:
    """A connection to one or more Redis servers, shared by every thread.

    servers: one URL or a list of them, as the dlock tool takes them:
    redis://[user[:password]@]host[:port][/db], rediss:// (TLS),
    unix:///path.sock[?db=N], redis+sentinel://..., redis+cluster://seed,...
    Several independent masters make a Redlock. None: $DLOCK_SERVERS
    (comma-separated), else redis://127.0.0.1:6379.

    Every option left None is taken, like the tool does, from the
    environment when env is true: DLOCK_USER, DLOCK_PASSWORD,
    DLOCK_PREFIX, DLOCK_CACERT, DLOCK_TLS_CERT, DLOCK_TLS_KEY,
    DLOCK_TIMEOUT (seconds: connect and command timeout),
    DLOCK_WAIT_REPLICAS, DLOCK_WAIT_REPLICAS_TIMEOUT, DLOCK_LOCK_DELAY and
    DLOCK_FENCE_RETENTION (seconds), DLOCK_SENTINEL_USER,
    DLOCK_SENTINEL_PASSWORD, DLOCK_LAYOUT. layout: "hash" (default) or
    "string" (exclusive locks as one string key: fewer Redis commands a
    cycle; one server, Sentinel or Cluster only, no holder_info, no read
    locks or elections; every client of a name must use the same one:
    docs/design.md, "The string layout"). fence_retention: how long a name's last
    fencing token outlives its lock (default 7 days); 0 keeps nothing once
    the name is released and free (docs/design.md, "Fence retention"). Durations are
    seconds (floats). wait_strategy: "fair" (default), "notify" or "spin".

    on_event(event): called with an Event for every acquisition, busy
    answer, given-up wait, renewal, loss and release of this client, on
    the thread where it happens (the acquiring or releasing thread, the
    watchdog's for renewals and losses). Keep it short; it must not
    acquire or release locks of this client.

    Connections are made on first use. Close the client (close(), or use
    it as a context manager) when done; locks still held are then left
    to their leases. One Client per process is the intended use: it keeps
    one subscriber connection and one renewer thread for all.
    """

    def __init__(self, servers: Union[None, str, Sequence[str]] = None, *,
                 username: Optional[str] = None,
                 password: Optional[str] = None,
                 prefix: Optional[str] = None,
                 timeout: Optional[float] = None,
                 connect_timeout: Optional[float] = None,
                 command_timeout: Optional[float] = None,
                 pool_size: Optional[int] = None,
                 wait_strategy: str = "fair",
                 tls_ca_file: Optional[str] = None,
                 tls_ca_dir: Optional[str] = None,
                 tls_server_name: Optional[str] = None,
                 tls_cert_file: Optional[str] = None,
                 tls_key_file: Optional[str] = None,
                 tls_insecure: bool = False,
                 sentinel_username: Optional[str] = None,
                 sentinel_password: Optional[str] = None,
                 wait_replicas: Optional[int] = None,
                 wait_replicas_timeout: Optional[float] = None,
                 lock_delay: Optional[float] = None,
                 fence_retention: Optional[float] = None,
                 holder_info: bool = False,
                 holder_label: Optional[str] = None,
                 on_event: Optional[Callable[["Event"], Any]] = None,
                 layout: Optional[str] = None,
                 env: bool = True) -> None:
        self._ptr: Optional[int] = None
        self._gen = _fork_gen
        # Set while a dlock.aio.AsyncClient's loop uses it: no close.
        self._pinned = False
        # What made it, for _clone() (dlock.redis_compat's extra owners).
        self._made_with = dict(
            username=username, password=password, prefix=prefix,
            timeout=timeout, connect_timeout=connect_timeout,
            command_timeout=command_timeout, pool_size=pool_size,
            wait_strategy=wait_strategy, tls_ca_file=tls_ca_file,
            tls_ca_dir=tls_ca_dir, tls_server_name=tls_server_name,
            tls_cert_file=tls_cert_file, tls_key_file=tls_key_file,
            tls_insecure=tls_insecure, sentinel_username=sentinel_username,
            sentinel_password=sentinel_password, wait_replicas=wait_replicas,
            wait_replicas_timeout=wait_replicas_timeout,
            lock_delay=lock_delay, fence_retention=fence_retention,
            holder_info=holder_info,
            holder_label=holder_label, on_event=on_event, layout=layout,
            env=env)
        self._calls = 0
        self._event_cb: Any = None
        self._closing = False
        # _mu guards _ptr, _calls and _closing; _cv (on _mu) wakes close().
        # Reentrant: the cyclic GC may run a Held's __del__ (a detach,
        # which enters here) on a thread that is inside it already.
        self._mu = threading.RLock()
        self._cv = threading.Condition(self._mu)
        lib = _lib()
        self._lib = lib

        def pick(value: Any, var: str) -> Any:
            return value if value is not None or not env else _env(var)

        if servers is None:
            spec = os.environ.get("DLOCK_SERVERS") if env else None
            if spec is None:
                urls = ["redis://127.0.0.1:6379"]
            else:
                urls = _split_servers(spec)
                if not urls:
                    raise _errors.InvalidArgument(
                        "DLOCK_SERVERS is set but names no server (unset "
                        "it for redis://127.0.0.1:6379, or give servers)",
                        -20, "EINVAL")
        elif isinstance(servers, (str, bytes)):
            urls = [_s(servers) if isinstance(servers, bytes) else servers]
        else:
            urls = list(servers)
        if layout is None and env:
            layout = _env("DLOCK_LAYOUT")
        if layout is not None and layout not in ("hash", "string"):
            raise _errors.InvalidArgument(
                "layout must be hash or string, not %r" % (layout,), -20,
                "EINVAL")
        if wait_strategy not in _WAIT_STRATEGIES:
            raise _errors.InvalidArgument(
                "wait_strategy must be one of fair, notify, spin, not %r"
                % (wait_strategy,), -20, "EINVAL")
        if timeout is None and env and _env("DLOCK_TIMEOUT"):
            timeout = self._env_seconds("DLOCK_TIMEOUT")
        if wait_replicas is None and env and _env("DLOCK_WAIT_REPLICAS"):
            try:
                wait_replicas = int(_env("DLOCK_WAIT_REPLICAS") or "")
            except ValueError:
                raise _errors.InvalidArgument(
                    "DLOCK_WAIT_REPLICAS %r: not a whole number"
                    % _env("DLOCK_WAIT_REPLICAS"), -20, "EINVAL") from None
        if wait_replicas_timeout is None and env and \
                _env("DLOCK_WAIT_REPLICAS_TIMEOUT"):
            wait_replicas_timeout = self._env_seconds(
                "DLOCK_WAIT_REPLICAS_TIMEOUT")
        if lock_delay is None and env and _env("DLOCK_LOCK_DELAY"):
            lock_delay = self._env_seconds("DLOCK_LOCK_DELAY", True)
        if fence_retention is None and env and \
                _env("DLOCK_FENCE_RETENTION"):
            fence_retention = self._env_seconds("DLOCK_FENCE_RETENTION",
                                                True)

        o = _ffi.Options()
        lib.dlock_options_init(byref(o))
        keep: List[Any] = []  # bytes kept alive until dlock_client_new

        def cstr(v: Optional[str]) -> Optional[bytes]:
            if v is None:
                return None
            b = _b(v, "option")
            keep.append(b)
            return b

        arr = (c_char_p * max(1, len(urls)))(*[cstr(u) for u in urls])
        o.servers = ctypes.cast(arr, ctypes.POINTER(c_char_p))
        o.nservers = len(urls)
        o.username = cstr(pick(username, "DLOCK_USER"))
        o.password = cstr(pick(password, "DLOCK_PASSWORD"))
        p = pick(prefix, "DLOCK_PREFIX")
        if p is not None:
            o.key_prefix = cstr(p)
        if timeout is not None:
            o.connect_timeout_ms = o.command_timeout_ms = \
                _ms(timeout, "timeout", False)
        if connect_timeout is not None:
            o.connect_timeout_ms = _ms(connect_timeout, "connect_timeout",
                                       False)
        if command_timeout is not None:
            o.command_timeout_ms = _ms(command_timeout, "command_timeout",
                                       False)
        if pool_size is not None:
            o.pool_size = pool_size
        o.wait_strategy = _WAIT_STRATEGIES[wait_strategy]
        o.tls_ca_file = cstr(pick(tls_ca_file, "DLOCK_CACERT"))
        o.tls_ca_dir = cstr(tls_ca_dir)
        o.tls_server_name = cstr(tls_server_name)
        o.tls_cert_file = cstr(pick(tls_cert_file, "DLOCK_TLS_CERT"))
        o.tls_key_file = cstr(pick(tls_key_file, "DLOCK_TLS_KEY"))
        o.tls_insecure = int(bool(tls_insecure))
        o.sentinel_username = cstr(pick(sentinel_username,
                                        "DLOCK_SENTINEL_USER"))
        o.sentinel_password = cstr(pick(sentinel_password,
                                        "DLOCK_SENTINEL_PASSWORD"))
        if wait_replicas is not None:
            o.wait_replicas = wait_replicas
        if wait_replicas_timeout is not None:
            o.wait_replicas_timeout_ms = _ms(wait_replicas_timeout,
                                             "wait_replicas_timeout", False)
        if lock_delay is not None:
            o.lock_delay_ms = _ms(lock_delay, "lock_delay", False)
        if fence_retention is not None:
            o.fence_retention_ms = _ms(fence_retention, "fence_retention",
                                       False)
        o.holder_info = int(bool(holder_info))
        o.holder_label = cstr(holder_label)
        if on_event is not None:
            if not callable(on_event):
                raise TypeError("on_event must be callable")
            names = {t: _s(lib.dlock_event_name(t)) for t in range(1, 7)}

            def tramp(ev: Any, _ud: Any) -> None:
                e = ev.contents
                on_event(Event(names.get(e.type, "unknown"), _s(e.name),
                               e.status, e.duration_us / 1e6, e.token))
            # Kept by the client until the C client is freed.
            self._event_cb = _ffi.EVENT_CB(tramp)
            o.on_event = self._event_cb

        out = c_void_p()
        err = ctypes.create_string_buffer(512)
        rc = lib.dlock_client_new(byref(out), byref(o), err, len(err))
        if rc != OK:
            raise _errors.make(rc, _s(err.value) or strerror(rc),
                               _s(lib.dlock_status_name(rc)))
        self._ptr = out.value
        if layout == "string":
            if not hasattr(lib, "dlock_client_set_layout"):
                lib.dlock_client_free(out)
                self._ptr = None
                raise _errors.InvalidArgument(
                    "this libdlock (%s) has no string layout" % lib.path,
                    -20, "EINVAL")
            rc = lib.dlock_client_set_layout(out, 1)
            if rc != OK:
                e = self._error(out.value, rc)
                lib.dlock_client_free(out)
                self._ptr = None
                raise e
        self.warning: str = _s(err.value)
        """A warning dlock_client_new gave while succeeding (e.g. about
        tls_insecure), or ""."""
        self.servers: Tuple[str, ...] = tuple(urls)
        _clients.add(self)

    def _clone(self) -> "Client":
        """Another client made as this one was: the same servers and
        settings, another owner."""
        return Client(list(self.servers), **self._made_with)

    @staticmethod
    def _env_seconds(var: str, zero_ok: bool = False) -> float:
        """$VAR as the tool reads it: a plain number of seconds (digits,
        an optional fraction and exponent; no sign, no blanks), more
        than 0 unless zero_ok."""
        v = _env(var) or ""
        f = -1.0
        if _SECONDS_RE.fullmatch(v):
            f = float(v)
        if f < 0 or f == float("inf") or (f == 0 and not zero_ok):
            raise _errors.InvalidArgument(
                "%s %r: not a number of seconds%s" %
                (var, v, "" if zero_ok else " more than 0"), -20, "EINVAL")
        return f

    # -- call accounting: close() waits for these to return
    def _enter(self) -> int:
        if self._gen != _fork_gen:
            raise DlockError("this Client was made before fork(): a "
                             "child process must create its own Client",
                             -20, "EINVAL")
        with self._mu:
            if self._ptr is None or self._closing:
                raise DlockError("the Client is closed", -20, "EINVAL")
            self._calls += 1
            return self._ptr

    def _leave(self) -> None:
        with self._mu:
            self._calls -= 1
            if self._closing and self._calls == 0:
                self._cv.notify_all()

    def _error(self, ptr: int, rc: int) -> DlockError:
        """The exception for RC, with this thread's message for the call
        just made on PTR (call before _leave: a later call replaces it)."""
        lib = self._lib
        msg = _s(lib.dlock_errmsg(ptr)) or _s(lib.dlock_strerror(rc))
        return _errors.make(rc, msg, _s(lib.dlock_status_name(rc)))

    def _call(self, fn: Callable[..., int], *args: Any) -> int:
        """fn(client, *args); raise the mapped exception on failure."""
        ptr = self._enter()
        try:
            rc = fn(ptr, *args)
            if rc < 0:
                raise self._error(ptr, rc)
            return rc
        finally:
            self._leave()

    # -- life
    def close(self) -> None:
        """Cancel waiting acquires, wait for calls in flight, stop the
        client's threads and close its connections. Locks still held are
        not released: their leases run out (release them first). Idempotent.
        In a child process after fork() it only forgets the parent's
        client."""
        self._close(None)

    def _close(self, limit: Optional[float]) -> bool:
        if self._gen != _fork_gen:
            self._ptr = None
            return True
        if self._pinned:
            # The C client must outlive the AsyncClient's event loop.
            raise DlockError("this Client belongs to a dlock.aio."
                             "AsyncClient: close that instead", -20,
                             "EINVAL")
        if _in_lost_callback():
            raise RuntimeError("Client.close() from a lost callback would "
                               "wait for the callback's own thread")
        with self._cv:
            if self._ptr is None:
                return True
            self._closing = True
            ptr = self._ptr
        waited = 0.0
        with self._cv:
            while self._calls:
                # An acquire started after a cancel waits again: cancel
                # until every call has returned.
                self._lib.dlock_client_cancel(ptr)
                self._cv.wait(0.05)
                waited += 0.05
                if limit is not None and waited > limit:
                    # Leave it: a call is stuck inside. Its event
                    # callback must outlive this object then.
                    _kept_alive.append(self._event_cb)
                    return False
            self._ptr = None
        _clients.discard(self)
        self._lib.dlock_client_free(ptr)
        return True

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if self._ptr is not None and not _in_lost_callback():
                self._close(5.0)
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "closed" if self._ptr is None else "open"
        return "<dlock.Client %s %s>" % (",".join(self.servers), state)

    @property
    def closed(self) -> bool:
        """True once close() ran."""
        return self._ptr is None

    @property
    def id(self) -> str:
        """The client's instance id (32 hex digits): owner ids of its
        locks start with it."""
        ptr = self._enter()
        try:
            return _s(self._lib.dlock_client_id(ptr))
        finally:
            self._leave()

    def cancel(self) -> None:
        """Wake every acquire waiting on this client: they raise Canceled.
        Acquires started later wait normally. Safe from any thread."""
        ptr = self._enter()
        try:
            self._lib.dlock_client_cancel(ptr)
        finally:
            self._leave()

    def stats(self) -> Dict[str, int]:
        """The client's counters since it was made (dlock_client_stats):
        requests, acquisitions, busy, waits, wakeups, renewals, lost,
        reconnects."""
        st = _ffi.Stats()
        ptr = self._enter()
        try:
            self._lib.dlock_client_stats(ptr, byref(st))
        finally:
            self._leave()
        return {n: getattr(st, n) for n, _ in _ffi.Stats._fields_}

    def metrics(self) -> Metrics:
        """A snapshot of the counters and latency histograms, for export
        to Prometheus or OpenTelemetry (dlock_client_metrics)."""
        m = _ffi.Metrics()
        ptr = self._enter()
        try:
            self._lib.dlock_client_metrics(ptr, byref(m))
        finally:
            self._leave()
        bounds = [self._lib.dlock_histogram_bound_us(i)
                  for i in range(_ffi.HIST_BUCKETS)]
        upper = [b / 1e6 if b >= 0 else float("inf") for b in bounds]

        def hist(h: _ffi.Histogram) -> Histogram:
            return Histogram(h.count, h.sum_us / 1e6,
                             list(zip(upper, list(h.bucket))))
        return Metrics({n: getattr(m.stats, n) for n, _ in
                        _ffi.Stats._fields_},
                       hist(m.acquire_wait), hist(m.hold), hist(m.renewal))

    # -- acquiring
    def lock(self, name: Name, *, lease: float = 30.0,
             wait: Optional[float] = None, watchdog: bool = False,
             on_lost: Optional[Callable[["Held"], Any]] = None) -> "Lock":
        """The exclusive lock NAME, to acquire: `with client.lock("job",
        lease=10) as held: ... held.token`, or `held =
        client.lock("job").acquire()` ... `held.release()`.

        lease: seconds the lock outlives a holder that stops renewing.
        wait: None (default) waits as long as it takes, 0 tries once
        (Busy when held), t > 0 waits at most t seconds (TimedOut).
        watchdog: renew the lease every lease/3 from the library's thread
        until released. on_lost(held): called on that thread when the lease
        is found lost (watchdog locks); keep it short, do not release
        there. held.lost tells the same without a callback.
        Reentrant per thread: the thread holding NAME gets it again (each
        acquisition its own Held, each released once).

        A waiting acquire waits inside the library with the GIL released:
        other threads run, but Ctrl-C (KeyboardInterrupt) is seen only
        when it returns. Give a finite wait, or call client.cancel() from
        another thread, where that matters."""
        return Lock(self, name, lease=lease, wait=wait, watchdog=watchdog,
                    on_lost=on_lost)

    def acquire(self, name: Name, *, lease: float = 30.0,
                wait: Optional[float] = None, watchdog: bool = False,
                on_lost: Optional[Callable[["Held"], Any]] = None
                ) -> "Held":
        """Acquire the lock NAME now: client.lock(name, ...).acquire()."""
        return self._acquire(0, _b(name), 0, lease, wait, watchdog, on_lost)

    def semaphore(self, name: Name, limit: int, *, lease: float = 30.0,
                  wait: Optional[float] = None, watchdog: bool = False,
                  on_lost: Optional[Callable[["Held"], Any]] = None
                  ) -> "Semaphore":
        """The counting semaphore NAME: at most LIMIT holders at once
        (one server only; not over Redlock). Each acquire is a hold of
        its own, with its own token; not reentrant. Options as lock()."""
        return Semaphore(self, name, limit, lease=lease, wait=wait,
                         watchdog=watchdog, on_lost=on_lost)

    def set_semaphore_limit(self, name: Name, limit: int) -> int:
        """Set semaphore NAME's limit (creating it if unused); returns the
        previous limit (0: none)."""
        old = c_int64()
        self._call(self._lib.dlock_sem_set_limit, _b(name), limit,
                   byref(old))
        return old.value

    def rwlock(self, name: Name) -> "RWLock":
        """The read-write lock NAME: rw.read(...) for shared holds,
        rw.write(...) for the exclusive one (the same as lock(NAME))."""
        return RWLock(self, name)

    def lock_all(self, names: Sequence[Name], *, lease: float = 30.0,
                 wait: Optional[float] = None, watchdog: bool = False,
                 on_lost: Optional[Callable[["Held"], Any]] = None
                 ) -> "MultiLock":
        """Several locks at once, all or nothing, without deadlock
        whatever order callers name them in (1 to 64 distinct names).
        `with client.lock_all(["a", "b"]) as helds: helds[0].token`.
        wait bounds the whole call."""
        return MultiLock(self, names, lease=lease, wait=wait,
                         watchdog=watchdog, on_lost=on_lost)

    def election(self, name: Name) -> "Election":
        """The leader election NAME: campaign(), leader(), observe()."""
        return Election(self, name)

    def adopt(self, name: Name, owner: str, token: int = 0) -> "Held":
        """Take over a hold made elsewhere (another process) under OWNER
        (its Held.owner), to release or extend it. NotOwner unless OWNER
        holds NAME now."""
        held = Held(self, _b(name), "lock")
        out = c_void_p()
        bowner = _b(owner, "owner")
        ptr = self._enter()
        try:
            rc = self._lib.dlock_lock_adopt(byref(out), ptr, held._bname,
                                            bowner, token)
            if rc != OK:
                raise self._error(ptr, rc)
        finally:
            self._leave()
        held._ptr = out.value
        return held

    def _acquire(self, kind: int, bname: bytes, extra: int, lease: float,
                 wait: Optional[float], watchdog: bool,
                 on_lost: Optional[Callable[["Held"], Any]]) -> "Held":
        """kind 0: lock, 1: semaphore permit (extra: limit), 2: reader
        (extra: flags)."""
        lease_ms = _ms(lease, "lease", False)
        wait_ms = _ms(wait, "wait", True)
        lib = self._lib
        held = Held(self, bname, ("lock", "semaphore", "read")[kind])
        out = c_void_p()
        ptr = self._enter()
        try:
            if kind == 0 and not watchdog and on_lost is None:
                rc = lib.dlock_lock_acquire(byref(out), ptr, bname, wait_ms,
                                            lease_ms)
            else:
                ao = held._options(wait_ms, lease_ms, watchdog, on_lost)
                if kind == 0:
                    rc = lib.dlock_lock_acquire_ex(byref(out), ptr, bname,
                                                   byref(ao))
                elif kind == 1:
                    rc = lib.dlock_sem_acquire(byref(out), ptr, bname, extra,
                                               byref(ao))
                else:
                    rc = lib.dlock_rw_acquire_shared(byref(out), ptr, bname,
                                                     extra, byref(ao))
            if rc != OK:
                held._forget_callback()
                raise self._error(ptr, rc)
        finally:
            self._leave()
        held._ptr = out.value
        return held

    # -- fencing
    def fenced_set(self, key: Name, token: int,
                   value: Union[bytes, str]) -> None:
        """Store VALUE under the Redis key KEY (not prefixed) only if
        TOKEN is >= every token a fenced write or read of KEY carried;
        Stale otherwise (nothing changed)."""
        v = value.encode() if isinstance(value, str) else bytes(value)
        self._call(self._lib.dlock_fenced_set, _b(key, "key"), token, v,
                   len(v))

    def fenced_get(self, key: Name) -> FencedValue:
        """Read the fenced value KEY and the highest token it has seen."""
        return self._fenced(None, key)

    def fenced_read(self, key: Name, token: int) -> FencedValue:
        """The read of a read-modify-write under a lock: read KEY and make
        TOKEN its highest token in one step, so an older holder's later
        write is refused. Stale when TOKEN is older than KEY's."""
        return self._fenced(token, key)

    def _fenced(self, token: Optional[int], key: Name) -> FencedValue:
        val = c_void_p()
        n = c_size_t()
        fence = c_uint64()
        bkey = _b(key, "key")
        ptr = self._enter()
        try:
            if token is None:
                rc = self._lib.dlock_fenced_get(ptr, bkey, byref(val),
                                                byref(n), byref(fence))
            else:
                rc = self._lib.dlock_fenced_read(ptr, bkey, token,
                                                 byref(val), byref(n),
                                                 byref(fence))
            data = None
            if val.value:
                data = ctypes.string_at(val.value, n.value)
                _ffi.libc.free(val)
            if rc != OK:
                raise self._error(ptr, rc)
        finally:
            self._leave()
        return FencedValue(data, fence.value)

    def check_token(self, name: Name, token: int) -> bool:
        """Is TOKEN the token of NAME's current hold? True when it is;
        False when a later token was granted since (its hold is over) or
        NAME is free or TOKEN is not one the servers granted. A snapshot:
        the hold can end right after. Errors raise."""
        ptr = self._enter()
        try:
            rc = self._lib.dlock_lock_check(ptr, _b(name), token)
            if rc in (-6, -3):  # STALE, NOT_OWNER
                return False
            if rc != OK:
                raise self._error(ptr, rc)
            return True
        finally:
            self._leave()

    # -- looking
    def inspect(self, name: Name) -> LockInfo:
        """What the servers say about the lock NAME."""
        info = _ffi.Info()
        self._call(self._lib.dlock_lock_inspect, _b(name), byref(info))
        return LockInfo._from(info)

    def inspect_shared(self, name: Name, max_holders: int = 64
                       ) -> SharedInfo:
        """A semaphore's or a lock's readers: counts and up to
        MAX_HOLDERS holders, earliest lease end first."""
        si = _ffi.SharedInfo()
        hs = (_ffi.Holder * max(1, max_holders))()
        self._call(self._lib.dlock_shared_inspect, _b(name), byref(si), hs,
                   max_holders)
        kinds = {0: "none", 1: "lock", 2: "semaphore"}
        return SharedInfo(kinds.get(si.kind, str(si.kind)), si.limit,
                          si.holders, si.waiters,
                          si.writer_waiting_ms / 1000.0, si.last_token,
                          [SharedHolder(_s(h.owner), h.ttl_ms / 1000.0,
                                        h.token)
                           for h in hs[:si.listed]])

    def list(self, pattern: Optional[Name] = None) -> List[ListEntry]:
        """Every held lock whose name matches PATTERN (a Redis glob; None:
        all), with what inspect() says of each."""
        found: List[ListEntry] = []

        def each(entry: Any, _ud: Any) -> int:
            e = entry.contents
            found.append(ListEntry(_s(e.kind), _s(e.name),
                                   LockInfo._from(e.info)))
            return 0

        cb = _ffi.LIST_CB(each)  # alive until the call returns
        self._call(self._lib.dlock_list,
                   None if pattern is None else _b(pattern, "pattern"), cb,
                   None)
        return found

    def _lines(self, fn: Callable[..., int]) -> List[str]:
        size = 16384
        while True:
            buf = ctypes.create_string_buffer(size)
            self._call(fn, buf, size)
            text = _s(buf.value)
            if len(buf.value) < size - 512 or size >= 1 << 22:
                return [ln for ln in text.split("\n") if ln]
            size *= 4

    def check(self) -> List[str]:
        """Ask every server for the settings the lock's promises rest on;
        one finding per setting that weakens them (empty: none)."""
        return self._lines(self._lib.dlock_client_check)

    def topology(self) -> List[str]:
        """The deployment, one fact a line (roles, replicas, persistence,
        failovers seen), as `dlock status` shows it."""
        return self._lines(self._lib.dlock_client_topology)


# ------------------------------------------------------------------ holds


class Held:
    """One held lock, semaphore permit or read lease.

    Release it once: held.release(), or use it as a context manager.
    Use it from one thread at a time, and release it before the thread
    that acquired it ends: the library tells threads apart by
    pthread_self(), which a thread started later may be given, and that
    thread would then re-enter the lock as if it held it. A Held dropped
    without release is detached (the lock stays held until its lease
    runs out, renewal stops)."""

    __slots__ = ("_client", "_ptr", "_bname", "kind", "_token", "_cb_key",
                 "_ao", "__weakref__")

    def __init__(self, client: Client, bname: bytes, kind: str) -> None:
        self._client = client
        self._ptr: Optional[int] = None
        self._bname = bname
        self.kind = kind
        """"lock", "semaphore", "read" (a reader of an RWLock) or
        "leader"."""
        self._token: Optional[int] = None
        self._cb_key = 0
        self._ao: Optional[_ffi.AcquireOptions] = None

    def _options(self, wait_ms: int, lease_ms: int, watchdog: bool,
                 on_lost: Optional[Callable[["Held"], Any]]
                 ) -> _ffi.AcquireOptions:
        ao = _ffi.AcquireOptions()
        ao.version = _ffi.ACQUIRE_OPTIONS_VERSION
        ao.wait_ms = wait_ms
        ao.lease_ms = lease_ms
        ao.watchdog = int(bool(watchdog))
        if on_lost is not None:
            if not callable(on_lost):
                raise TypeError("on_lost must be callable")
            with _lost_mu:
                key = _lost_next[0]
                _lost_next[0] += 1
            _lost_handlers[key] = (weakref.ref(self), on_lost)
            self._cb_key = key
            ao.on_lost = _LOST_TRAMPOLINE
            ao.on_lost_userdata = key
        return ao

    def _forget_callback(self) -> None:
        if self._cb_key:
            _lost_handlers.pop(self._cb_key, None)
            self._cb_key = 0

    def _use(self) -> Tuple[int, int]:
        """(client, lock) pointers for a call; raises when released."""
        if self._ptr is None:
            raise DlockError("this hold was released or detached",
                             -20, "EINVAL")
        return self._client._enter(), self._ptr

    def _end(self, fn: Callable[[int], Any]) -> Any:
        """Release or detach: the handle is freed whatever the outcome."""
        if self._ptr is None:
            raise DlockError("this hold was released or detached already",
                             -20, "EINVAL")
        if _in_lost_callback():
            raise RuntimeError("a lock cannot be released or detached from "
                               "a lost callback: the release waits for the "
                               "callback")
        cptr = self._client._enter()
        lp, self._ptr = self._ptr, None
        try:
            rc = fn(lp)
            err = self._client._error(cptr, rc) if rc else None
        finally:
            self._client._leave()
            self._forget_callback()
        if err is not None:
            raise err
        return rc

    def release(self) -> None:
        """Release it (one reentry level) and free the handle, whatever
        the outcome. Raises NotOwner (the lease had run out or another
        owner has it), Lost (the watchdog had found it lost) or an error:
        then the work done under it was not protected all along."""
        self._end(self._client._lib.dlock_lock_release)

    def detach(self) -> None:
        """Free the handle without releasing: the lock stays held until
        its lease runs out (or another process adopts it)."""
        def det(lp: int) -> int:
            self._client._lib.dlock_lock_detach(lp)
            return 0
        self._end(det)

    def extend(self, lease: float) -> None:
        """Set the lease to LEASE seconds from now (NotOwner when it ran
        out or was taken)."""
        ms = _ms(lease, "lease", False)
        cptr, lp = self._use()
        try:
            rc = self._client._lib.dlock_lock_extend(lp, ms)
            if rc != OK:
                raise self._client._error(cptr, rc)
        finally:
            self._client._leave()

    def downgrade(self) -> "Held":
        """Turn this exclusive hold into a shared one (a reader of the
        same RWLock) in one step; returns the reader's Held. This Held is
        finished whatever the outcome."""
        if self._ptr is None:
            raise DlockError("this hold was released or detached",
                             -20, "EINVAL")
        reader = Held(self._client, self._bname, "read")
        out = c_void_p()
        cptr = self._client._enter()
        lp, self._ptr = self._ptr, None
        try:
            rc = self._client._lib.dlock_rw_downgrade(byref(out), lp)
            if rc != OK:
                raise self._client._error(cptr, rc)
        finally:
            self._client._leave()
        reader._ptr = out.value
        # The callback, if any, goes with the lock to the reader.
        if self._cb_key:
            entry = _lost_handlers.get(self._cb_key)
            if entry is not None:
                _lost_handlers[self._cb_key] = (weakref.ref(reader),
                                                entry[1])
            reader._cb_key, self._cb_key = self._cb_key, 0
        return reader

    @property
    def name(self) -> str:
        """The lock's name."""
        return _s(self._bname)

    @property
    def token(self) -> int:
        """The fencing token: greater than every earlier acquisition's of
        this name (for a leader: its epoch). In the string layout without
        fence retention the first read asks the server (the token is
        issued lazily); NotOwner when the hold is gone by then,
        ConnectionFailed (EIO) when the server did not answer (a later
        read asks again). Never 0."""
        if self._token is None:
            cptr, lp = self._use()
            try:
                lib = self._client._lib
                tok = lib.dlock_lock_token(lp)
                if tok == 0:
                    st = lib.dlock_lock_status(lp)
                    msg = _s(lib.dlock_errmsg(cptr))
                    gone = st < 0 or "not the owner" in msg
                    raise self._client._error(cptr, -3 if gone else -21)
                self._token = tok
            finally:
                self._client._leave()
        return self._token

    def _get(self, fn: Callable[[int], Any]) -> Any:
        cptr, lp = self._use()
        try:
            return fn(lp)
        finally:
            self._client._leave()

    @property
    def owner(self) -> str:
        """The owner id it is held under on the servers (adopt() takes
        it)."""
        return _s(self._get(self._client._lib.dlock_lock_owner))

    @property
    def validity(self) -> float:
        """Seconds of validity left by this process's clock; 0 once
        expired or lost."""
        return self._get(self._client._lib.dlock_lock_validity_ms) / 1000.0

    @property
    def held(self) -> bool:
        """True while it is believed held (not released, not lost, lease
        not run out)."""
        if self._ptr is None:
            return False
        return self._get(self._client._lib.dlock_lock_status) == OK

    @property
    def lost(self) -> bool:
        """True once the watchdog found the lease lost. Safe to read from
        any thread and from the lost callback."""
        if self._ptr is None:
            return False
        return self._get(self._client._lib.dlock_lock_status) == _LOST

    @property
    def lost_reason(self) -> Optional[DlockError]:
        """Why the lease was lost, as an exception object (not raised):
        NotOwner (the servers said it is not ours) or the last renewal's
        failure with its message; None while not lost."""
        if self._ptr is None:
            return None
        why = c_char_p()
        rc = self._get(lambda lp: self._client._lib.dlock_lock_lost_reason(
            lp, byref(why)))
        if rc == OK:
            return None
        return _errors.make(rc, _s(why.value) or strerror(rc),
                            _s(self._client._lib.dlock_status_name(rc)))

    def __enter__(self) -> "Held":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if self._ptr is not None:
            _finish(self.release, exc_type)

    def __del__(self) -> None:
        if self._ptr is None:
            return
        c = self._client
        if c._gen != _fork_gen or c._ptr is None or _in_lost_callback():
            return
        try:
            self.detach()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "released" if self._ptr is None else "held"
        return "<dlock.Held %s %r %s>" % (self.kind, self.name, state)


# ------------------------------------------------------- lock objects


class _WithStack:
    """As a context manager: acquire() on entry (what it gives is the
    `as` target), released on exit. Entries nest per thread."""

    _stack: threading.local

    def acquire(self, *, wait: Any = ...) -> Any:
        raise NotImplementedError

    def __enter__(self) -> Any:
        held = self.acquire()
        st = getattr(self._stack, "v", None)
        if st is None:
            st = self._stack.v = []
        st.append(held)
        return held

    def __exit__(self, *exc: Any) -> None:
        self._stack.v.pop().__exit__(*exc)


class _Acquirable(_WithStack):
    """A lock to acquire, with its options: acquire() gives a Held, and
    as a context manager it acquires on entry (giving the Held) and
    releases on exit. Entries nest per thread."""

    def __init__(self, client: Client, name: Name, lease: float,
                 wait: Optional[float], watchdog: bool,
                 on_lost: Optional[Callable[[Held], Any]]) -> None:
        self.client = client
        self._bname = _b(name)
        self.lease = lease
        self.wait = wait
        self.watchdog = watchdog
        self.on_lost = on_lost
        self._stack = threading.local()

    @property
    def name(self) -> str:
        return _s(self._bname)

    def __repr__(self) -> str:
        return "<dlock.%s %r>" % (type(self).__name__, self.name)


class Lock(_Acquirable):
    """An exclusive lock (Client.lock): acquire() or `with`."""

    def __init__(self, client: Client, name: Name, *, lease: float = 30.0,
                 wait: Optional[float] = None, watchdog: bool = False,
                 on_lost: Optional[Callable[[Held], Any]] = None) -> None:
        super().__init__(client, name, lease, wait, watchdog, on_lost)

    def acquire(self, *, wait: Any = ...) -> Held:
        """Acquire it (wait: as in Client.lock; default the Lock's).
        Raises Busy (wait=0 and held), TimedOut, Canceled, or an error."""
        return self.client._acquire(0, self._bname, 0, self.lease,
                                    self.wait if wait is ... else wait,
                                    self.watchdog, self.on_lost)

    def inspect(self) -> LockInfo:
        """What the servers say about it."""
        return self.client.inspect(self._bname)


class Semaphore(_Acquirable):
    """A counting semaphore (Client.semaphore): each acquire takes one of
    LIMIT permits."""

    def __init__(self, client: Client, name: Name, limit: int, *,
                 lease: float = 30.0, wait: Optional[float] = None,
                 watchdog: bool = False,
                 on_lost: Optional[Callable[[Held], Any]] = None) -> None:
        super().__init__(client, name, lease, wait, watchdog, on_lost)
        self.limit = limit

    def acquire(self, *, wait: Any = ...) -> Held:
        """Take a permit (wait as in Client.lock)."""
        return self.client._acquire(1, self._bname, self.limit, self.lease,
                                    self.wait if wait is ... else wait,
                                    self.watchdog, self.on_lost)

    def set_limit(self, limit: int) -> int:
        """Change the limit; returns the previous one."""
        old = self.client.set_semaphore_limit(self._bname, limit)
        self.limit = limit
        return old

    def inspect(self) -> SharedInfo:
        """Limit, holders and waiters as the server says."""
        return self.client.inspect_shared(self._bname)


class ReadLock(_Acquirable):
    """The shared side of an RWLock (RWLock.read)."""

    def __init__(self, client: Client, name: Name, *, lease: float = 30.0,
                 wait: Optional[float] = None, watchdog: bool = False,
                 on_lost: Optional[Callable[[Held], Any]] = None,
                 prefer_readers: bool = False) -> None:
        super().__init__(client, name, lease, wait, watchdog, on_lost)
        self.prefer_readers = prefer_readers

    def acquire(self, *, wait: Any = ...) -> Held:
        """Enter as a reader (wait as in Client.lock)."""
        flags = _ffi.RW_PREFER_READERS if self.prefer_readers else 0
        return self.client._acquire(2, self._bname, flags, self.lease,
                                    self.wait if wait is ... else wait,
                                    self.watchdog, self.on_lost)


class RWLock:
    """A read-write lock (Client.rwlock): readers share it, a writer holds
    it alone. Writer preference: a waiting writer keeps new readers out
    (prefer_readers=True lets a reader in regardless). A writer may
    downgrade (Held.downgrade()); upgrading is refused (release first)."""

    def __init__(self, client: Client, name: Name) -> None:
        self.client = client
        self._bname = _b(name)

    @property
    def name(self) -> str:
        return _s(self._bname)

    def read(self, *, lease: float = 30.0, wait: Optional[float] = None,
             watchdog: bool = False,
             on_lost: Optional[Callable[[Held], Any]] = None,
             prefer_readers: bool = False) -> ReadLock:
        """The shared lock, to acquire or use in `with`."""
        return ReadLock(self.client, self._bname, lease=lease, wait=wait,
                        watchdog=watchdog, on_lost=on_lost,
                        prefer_readers=prefer_readers)

    def write(self, *, lease: float = 30.0, wait: Optional[float] = None,
              watchdog: bool = False,
              on_lost: Optional[Callable[[Held], Any]] = None) -> Lock:
        """The exclusive lock (waits for the readers to leave)."""
        return Lock(self.client, self._bname, lease=lease, wait=wait,
                    watchdog=watchdog, on_lost=on_lost)

    def inspect(self) -> SharedInfo:
        """Its readers, and whether a writer waits."""
        return self.client.inspect_shared(self._bname)


class HeldAll(Sequence[Held]):
    """The holds of one MultiLock.acquire(), in the order of the names;
    release() gives them all back (in reverse of the global order)."""

    def __init__(self, client: Client, helds: List[Held]) -> None:
        self._client = client
        self._helds = helds

    def __getitem__(self, i: Any) -> Any:
        return self._helds[i]

    def __len__(self) -> int:
        return len(self._helds)

    def __iter__(self) -> Iterator[Held]:
        return iter(self._helds)

    def release(self) -> None:
        """Release every hold still held; raises the first failure (in the
        names' order) after releasing all."""
        live = [h for h in self._helds if h._ptr is not None]
        if not live:
            return
        if _in_lost_callback():
            raise RuntimeError("locks cannot be released from a lost "
                               "callback")
        arr = (c_void_p * len(live))(*[h._ptr for h in live])
        cptr = self._client._enter()
        for h in live:
            h._ptr = None
        try:
            rc = self._client._lib.dlock_lock_release_all(arr, len(live))
            err = self._client._error(cptr, rc) if rc else None
        finally:
            self._client._leave()
            for h in live:
                h._forget_callback()
        if err is not None:
            raise err

    def __enter__(self) -> "HeldAll":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        _finish(self.release, exc_type)


class MultiLock(_WithStack):
    """Several locks taken all or nothing (Client.lock_all): acquire()
    gives a HeldAll; `with` gives it too and releases them all."""

    def __init__(self, client: Client, names: Sequence[Name], *,
                 lease: float = 30.0, wait: Optional[float] = None,
                 watchdog: bool = False,
                 on_lost: Optional[Callable[[Held], Any]] = None) -> None:
        if isinstance(names, (str, bytes)):
            raise TypeError("names must be a sequence of names")
        self.client = client
        self._bnames = [_b(n) for n in names]
        self.lease = lease
        self.wait = wait
        self.watchdog = watchdog
        self.on_lost = on_lost
        self._stack = threading.local()

    def acquire(self, *, wait: Any = ...) -> HeldAll:
        """Take them all (wait bounds the whole call)."""
        c = self.client
        n = len(self._bnames)
        w = _ms(self.wait if wait is ... else wait, "wait", True)
        lease_ms = _ms(self.lease, "lease", False)
        helds = [Held(c, b, "lock") for b in self._bnames]
        # One options struct for all: on_lost's userdata names the first
        # Held; the trampoline finds the lost one by its pointer.
        ao = _ffi.AcquireOptions()
        ao.version = _ffi.ACQUIRE_OPTIONS_VERSION
        ao.wait_ms = w
        ao.lease_ms = lease_ms
        ao.watchdog = int(bool(self.watchdog))
        user_cb = self.on_lost
        if user_cb is not None:
            byptr: Dict[int, Held] = {}

            def dispatch(_first: Held) -> None:
                h = byptr.get(getattr(_tls, "lost_ptr", None) or 0)
                if h is not None and user_cb is not None:
                    user_cb(h)

            ao2 = helds[0]._options(w, lease_ms, self.watchdog, dispatch)
            ao.on_lost = ao2.on_lost
            ao.on_lost_userdata = ao2.on_lost_userdata
        names = (c_char_p * max(1, n))(*self._bnames)
        out = (c_void_p * max(1, n))()
        cptr = c._enter()
        try:
            rc = c._lib.dlock_lock_acquire_all(out, cptr, names, n,
                                               byref(ao))
            if rc != OK:
                helds[0]._forget_callback()
                raise c._error(cptr, rc)
        finally:
            c._leave()
        for i, h in enumerate(helds):
            h._ptr = out[i]
        if user_cb is not None:
            byptr.update({h._ptr: h for h in helds if h._ptr})
            # The first Held carries the key; the others keep a share so
            # that the callback stays while any is held.
        return HeldAll(c, helds)


# ---------------------------------------------------------------- election


class Leadership:
    """This thread leads an election (Election.campaign). The leadership
    is a watchdog lock: lost when its lease is (leadership.lost,
    on_lost). Use as a context manager, or resign()."""

    def __init__(self, client: Client, bname: bytes) -> None:
        self._client = client
        self._bname = bname
        self._ptr: Optional[int] = None
        self._hold = Held(client, bname, "leader")  # carries on_lost

    @property
    def name(self) -> str:
        return _s(self._bname)

    def _get(self, fn: Callable[[int], Any]) -> Any:
        if self._ptr is None:
            raise DlockError("this leadership was resigned", -20, "EINVAL")
        self._client._enter()
        try:
            return fn(self._ptr)
        finally:
            self._client._leave()

    @property
    def epoch(self) -> int:
        """The leadership's epoch (its fencing token): greater than every
        earlier leader's."""
        return self._get(self._client._lib.dlock_election_epoch)

    @property
    def leading(self) -> bool:
        """True while this process still leads (as far as it knows)."""
        if self._ptr is None:
            return False
        return self._get(self._client._lib.dlock_election_status) == OK

    @property
    def lost(self) -> bool:
        """True once the leadership's lease was found lost."""
        if self._ptr is None:
            return False
        return self._get(self._client._lib.dlock_election_status) == _LOST

    @property
    def validity(self) -> float:
        """Seconds of leadership left by this process's clock."""
        lib = self._client._lib
        return self._get(lambda p: lib.dlock_lock_validity_ms(
            lib.dlock_election_lock(p))) / 1000.0

    def proclaim(self, value: str) -> None:
        """Change the value the leader shows (NotOwner once lost)."""
        bv = _b(value, "value")
        cptr = self._client._enter()
        try:
            if self._ptr is None:
                raise DlockError("this leadership was resigned", -20,
                                 "EINVAL")
            rc = self._client._lib.dlock_election_proclaim(self._ptr, bv)
            if rc != OK:
                raise self._client._error(cptr, rc)
        finally:
            self._client._leave()

    def resign(self) -> None:
        """Give the leadership up (Lost when it had already been lost)."""
        if self._ptr is None:
            raise DlockError("this leadership was resigned already", -20,
                             "EINVAL")
        if _in_lost_callback():
            raise RuntimeError("cannot resign from a lost callback")
        cptr = self._client._enter()
        p, self._ptr = self._ptr, None
        try:
            rc = self._client._lib.dlock_election_resign(p)
            err = self._client._error(cptr, rc) if rc else None
        finally:
            self._client._leave()
            self._hold._forget_callback()
        if err is not None:
            raise err

    def __enter__(self) -> "Leadership":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if self._ptr is not None:
            _finish(self.resign, exc_type)

    def __del__(self) -> None:
        # No detach for an election: resign, unless the client is gone.
        c = self._client
        if self._ptr is None or c._gen != _fork_gen or c._ptr is None or \
                _in_lost_callback():
            return
        try:
            self.resign()
        except Exception:
            pass


class Election:
    """The leader election NAME (Client.election). The leader holds the
    lock NAME with the watchdog; its epoch is the lock's fencing token."""

    def __init__(self, client: Client, name: Name) -> None:
        self.client = client
        self._bname = _b(name)

    @property
    def name(self) -> str:
        return _s(self._bname)

    def campaign(self, value: str = "", *, lease: float = 30.0,
                 wait: Optional[float] = None,
                 on_lost: Optional[Callable[[Leadership], Any]] = None
                 ) -> Leadership:
        """Wait until this thread leads (wait: None forever, 0 try once,
        t seconds), then proclaim VALUE. on_lost(leadership) is called on
        the watchdog thread if the leadership is lost."""
        c = self.client
        lead = Leadership(c, self._bname)
        cb = None
        if on_lost is not None:
            def cb(_h: Held, _lead: Any = weakref.ref(lead)) -> None:
                ld = _lead()
                if ld is not None:
                    on_lost(ld)
        ao = lead._hold._options(_ms(wait, "wait", True),
                                 _ms(lease, "lease", False), True, cb)
        out = c_void_p()
        bv = _b(value, "value")
        cptr = c._enter()
        try:
            rc = c._lib.dlock_campaign(byref(out), cptr, self._bname, bv,
                                       byref(ao))
            if rc != OK:
                lead._hold._forget_callback()
                raise c._error(cptr, rc)
        finally:
            c._leave()
        lead._ptr = out.value
        return lead

    def leader(self) -> LeaderInfo:
        """Who leads now (info.leading False: nobody)."""
        li = _ffi.LeaderInfo()
        self.client._call(self.client._lib.dlock_leader, self._bname,
                          byref(li))
        return LeaderInfo._from(li)

    def observe(self, known: Optional[LeaderInfo] = None,
                timeout: Optional[float] = None) -> Optional[LeaderInfo]:
        """Wait until the leader differs from KNOWN (None: return the
        current one at once) and return the new one; None when TIMEOUT
        seconds passed without a change (None: wait forever)."""
        out = _ffi.LeaderInfo()
        k = known._to() if known is not None else None
        c = self.client
        cptr = c._enter()
        try:
            rc = c._lib.dlock_leader_wait(
                cptr, self._bname, byref(k) if k is not None else None,
                _ms(timeout, "timeout", True), byref(out))
            if rc == -2:  # TIMEDOUT
                return None
            if rc != OK:
                raise c._error(cptr, rc)
        finally:
            c._leave()
        return LeaderInfo._from(out)


# ------------------------------------------------------------------- exit


@atexit.register
def _close_all_at_exit() -> None:
    """Close every open client before the interpreter finalizes, so no
    watchdog callback arrives into it; a client with a call stuck inside
    after 5 s is left alone (the process is ending anyway)."""
    for c in list(_clients):
        try:
            c._close(5.0)
        except Exception:
            pass
