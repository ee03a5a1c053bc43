"""The GIL, the watchdog thread, interpreter exit and fork."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading
import time

import dlock
from conftest import PKG

from test_core import WAIT


def test_release_while_the_lost_callback_runs(client, rpy, prefix):
    """The release waits for the lock's running callback, which needs the
    GIL: the binding must not hold the GIL while it waits (ctypes.CDLL
    releases it around every call)."""
    entered = threading.Event()
    finished = threading.Event()

    def slow(held):
        entered.set()
        end = time.monotonic() + 0.3
        while time.monotonic() < end:  # Python code: needs the GIL
            sum(range(100))
        finished.set()

    held = client.acquire("job", lease=0.6, watchdog=True, on_lost=slow)
    rpy.delete("%s:{job}" % prefix)
    assert entered.wait(WAIT)
    box = {}

    def release():
        try:
            held.release()
        except dlock.DlockError as e:
            box["e"] = e
    t = threading.Thread(target=release, daemon=True)
    t.start()
    t.join(WAIT)
    assert not t.is_alive(), "release deadlocked with the callback"
    assert finished.is_set()
    assert isinstance(box.get("e"), dlock.Lost)


def test_dropped_hold_is_detached_not_released(client):
    h = client.acquire("job", lease=30, watchdog=True)
    owner = h.owner
    del h
    gc.collect()
    info = client.inspect("job")
    assert info.held and info.owner == owner
    assert client.stats()["lost"] == 0


def run_script(server, body):
    """Run BODY in a fresh /usr/bin/python3 (sys.executable) with the
    package and library of this session; (returncode, stdout+stderr)."""
    script = "import sys; sys.path.insert(0, %r)\nimport dlock\n" % PKG + \
        "URL = %r\n" % server.url + textwrap.dedent(body)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ))
    return p.returncode, p.stdout + p.stderr


def test_exit_with_locks_held_and_callbacks_due(server, prefix):
    rc, out = run_script(server, """
        import redis, threading
        c = dlock.Client(URL, prefix=%r, env=False)
        held = [c.acquire("x%%d" %% i, lease=0.3, watchdog=True,
                          on_lost=lambda h: print("lost", h.name))
                for i in range(20)]
        redis.Redis.from_url(URL).delete(*["%s:{x%%d}" %% i
                                           for i in range(20)])
        # exit now: callbacks are due while the interpreter ends
        print("bye")
        """ % (prefix, prefix))
    assert rc == 0, out
    assert "bye" in out and "Fatal" not in out and "Traceback" not in out


def test_exit_in_a_forked_child_leaves_the_parents_client(server, prefix):
    rc, out = run_script(server, """
        import os
        c = dlock.Client(URL, prefix=%r, env=False)
        h = c.acquire("job", watchdog=True)
        pid = os.fork()
        if pid == 0:
            try:
                c.acquire("other")
            except dlock.DlockError as e:
                print("child refused:", e)
            sys.exit(0)  # normal exit: atexit and __del__ run here
        _, st = os.waitpid(pid, 0)
        print("child status", st)
        print("parent holds", h.held)
        h.release()
        """ % prefix)
    assert rc == 0, out
    assert "child refused: this Client was made before fork()" in out
    assert "child status 0" in out
    assert "parent holds True" in out


def test_cyclic_gc_inside_the_client_does_not_deadlock(client):
    """A Held in a reference cycle is freed by the cyclic GC, which may
    run inside the client's own bookkeeping on the same thread; its
    __del__ (a detach) enters that bookkeeping again."""
    class Box:
        pass
    b = Box()
    b.me = b
    b.held = client.acquire("job", lease=30)
    del b
    done = threading.Event()

    def collect_inside():
        with client._mu:
            gc.collect()
        done.set()
    t = threading.Thread(target=collect_inside, daemon=True)
    t.start()
    assert done.wait(WAIT), "the GC's detach deadlocked on the client"
    assert client.inspect("job").held  # detached, not released
