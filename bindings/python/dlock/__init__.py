"""dlock: distributed locks on Redis, the Python binding of libdlock.

A lock shared by many processes on many machines, kept in Redis, with
what libdlock gives: leases renewed by a watchdog thread (and a flag or
callback when one is lost anyway), fair FIFO waiting without polling,
fencing tokens, Redlock over several masters, Sentinel and Cluster,
semaphores, read-write locks, several locks at once, leader election.

    import dlock

    client = dlock.Client("redis://127.0.0.1:6379")   # or $DLOCK_SERVERS
    with client.lock("job", lease=10) as held:        # waits until free
        print(held.token)                             # fencing token

    try:
        with client.lock("job", wait=0):              # try once
            ...
    except dlock.Busy:
        ...

    with client.lock("report", lease=30, watchdog=True,
                     on_lost=lambda h: stop.set()) as held:
        while not held.lost:                          # renewed meanwhile
            work()

    with client.semaphore("gpu", 4):        ...       # 4 holders at most
    rw = client.rwlock("cfg")
    with rw.read():  ...;  with rw.write():  ...
    with client.lock_all(["a", "b"]) as (a, b): ...   # no deadlock
    lead = client.election("svc").campaign("host:8080")  # blocks to win
    client.fenced_set("data", held.token, b"v")      # dlock.Stale if old
    client.inspect("job"); client.list("job*"); client.check()
    client.stats(); client.metrics()                  # counters, histograms

Durations are seconds (floats). wait: None waits as long as it takes
(the default, like threading.Lock), 0 tries once (Busy), t > 0 waits at
most t seconds (TimedOut). Every failure raises a subclass of
DlockError carrying the library's status code and message.

Sentinel and Cluster: Client("redis+sentinel://s1:26379,s2:26379/mymaster")
or Client("redis+cluster://node1:7000,node2:7001"). A lock held through a
failover (watchdog=True, or any dlock.aio hold) stays held and renews on
the promoted master when its lease outlasts the failover's write pause;
afterwards this client grants nothing new on that master until the
lock-delay has passed (Sentinel: 30 s by default; Cluster: lock_delay=,
off by default): a try (wait=0) raises dlock.LockDelay, a waiting
acquire waits it out, and client.check() says it saw the failover. A
waiting acquire rides the failover out.

dlock.redis_compat.Lock is a drop-in for redis-py's Lock (AsyncLock for
redis.asyncio's).

The library is found by $DLOCK_LIBRARY (a path to libdlock.so), then a
libdlock.so.0 in this package's directory, then the system loader.
Threads: one Client serves all threads (make one per process; a child
after fork() must make its own). A lock's owner is the client and the
thread: release from the thread that acquired.

asyncio: dlock.aio (import dlock.aio; help(dlock.aio)), on libdlock's
event-loop interface: `async with AsyncClient(url) as c: async with
c.lock("job", lease=10, timeout=5) as held: ...`, no thread per waiter.
"""
from ._core import (Client, Election, Event, FencedValue, Held, HeldAll,
                    Histogram, HolderInfo, LeaderInfo, Leadership, ListEntry,
                    Lock, LockInfo, Metrics, MultiLock, ReadLock, RWLock,
                    Semaphore, SharedHolder, SharedInfo, library_path,
                    library_version, strerror)
from ._errors import (AuthError, Busy, Canceled, ConnectionFailed,
                      DlockError, InvalidArgument, LockDelay, Lost, NoQuorum,
                      NotOwner, NotReplicated, OutOfMemory, ProtocolError,
                      Refused, ServerError, ServerTimeout, Stale, TimedOut,
                      TLSError)

__version__ = "0.1.0"

__all__ = [
    "Client", "Lock", "Semaphore", "RWLock", "ReadLock", "MultiLock",
    "Election", "Leadership", "Held", "HeldAll", "LockInfo", "HolderInfo",
    "ListEntry", "SharedInfo", "SharedHolder", "LeaderInfo", "FencedValue",
    "Metrics", "Histogram", "Event",
    "library_path", "library_version", "strerror",
    "DlockError", "Busy", "TimedOut", "NotOwner", "Lost", "Canceled",
    "Stale", "NoQuorum", "NotReplicated", "LockDelay", "InvalidArgument",
    "ConnectionFailed", "ServerTimeout", "ProtocolError", "ServerError",
    "OutOfMemory", "TLSError", "AuthError", "Refused",
]
