#!/usr/bin/python3
"""aio_waiters.py - N waiting acquisitions in one asyncio event loop
(dlock.aio, issue 32's asyncio target): threads and memory per waiter.

    aio_waiters.py [-s URL] [-n N] [--mode names|sem]

Run with Debian's /usr/bin/python3 and DLOCK_LIBRARY set to a built
libdlock.so (bindings/python is put on the path). Without -s it starts a
throwaway redis-server of its own (127.0.0.1, a free port, a temp dir;
killed by its pid at the end). Not a timed test: it prints what it sees.

  names  a holder (another AsyncClient, another owner) holds N names;
         N tasks of one AsyncClient each wait for one of them (fair
         queue, so every waiter is a queued place on the server and a
         subscribed channel on the loop's subscriber connection).
  sem    the holder holds the one permit of a semaphore of limit 1; N
         tasks wait for a permit (all in one fair queue).

It measures, once every waiter is queued on the server: the threads of
the process (threading.active_count() and /proc/self/task, before and
during), the RSS growth per waiter (/proc/self/status VmRSS), and in a
second pass the Python allocations per waiter (tracemalloc). Then the
holder releases and the time until every waiter has had its turn is
printed (information only). One JSON line at the end sums it up.
"""
import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))
if not os.environ.get("DLOCK_LIBRARY"):
    for d in ("build/release", "build/plain", "build/dev"):
        p = os.path.join(ROOT, d, "libdlock.so")
        if os.path.exists(p):
            os.environ["DLOCK_LIBRARY"] = p
            break

import dlock  # noqa: E402
import dlock.aio  # noqa: E402


def rss_kib():
    with open("/proc/self/status") as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1])
    return 0


def nthreads():
    return len(os.listdir("/proc/self/task"))


def start_server():
    """A throwaway redis-server: (url, pid, dir, Popen)."""
    exe = shutil.which("redis-server")
    if exe is None:
        sys.exit("aio_waiters: no redis-server (scripts/deps.sh)")
    d = tempfile.mkdtemp(prefix="dlock-aio-bench-")
    for _ in range(20):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        p = subprocess.Popen(
            [exe, "--port", str(port), "--bind", "127.0.0.1", "--dir", d,
             "--save", "", "--appendonly", "no", "--maxclients", "1000",
             "--daemonize", "no", "--logfile", os.path.join(d, "log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.monotonic() + 10
        while time.monotonic() < end and p.poll() is None:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return "redis://127.0.0.1:%d" % port, p, d
            time.sleep(0.02)
        if p.poll() is None:
            p.kill()
        p.wait()
    sys.exit("aio_waiters: redis-server did not start")


async def until(pred, what, limit=300.0):
    end = time.monotonic() + limit
    while not pred():
        if time.monotonic() > end:
            raise SystemExit("aio_waiters: never happened: " + what)
        await asyncio.sleep(0.05)


async def one_pass(url, prefix, n, mode, trace):
    """Hold, start N waiters, measure, release; a dict of what was seen."""
    # A deep pipeline: 10,000 requests in flight on one connection wait
    # behind each other, longer than the default 2 s command timeout.
    holder = dlock.aio.AsyncClient(url, prefix=prefix, env=False,
                                   command_timeout=30)
    a = dlock.aio.AsyncClient(url, prefix=prefix, env=False,
                              command_timeout=30)
    probe = dlock.Client(url, prefix=prefix, env=False)
    names = ["w:%d" % i for i in range(n)] if mode == "names" else ["s"]
    held = []
    for i in range(0, len(names), 500):
        part = names[i:i + 500]
        if mode == "names":
            held += await asyncio.gather(*[holder.lock(x, lease=60)
                                           for x in part])
        else:
            held.append(await holder.semaphore("s", 1, lease=60))
    # the waiting client's connections exist before the baseline
    await (await a.lock("warm")).release()
    base_py, base_tasks = threading.active_count(), nthreads()
    if trace:
        tracemalloc.start()
        t0 = tracemalloc.take_snapshot()
    base_rss = rss_kib()
    done = [0]
    errors = []

    async def waiter(i):
        try:
            if mode == "names":
                h = await a.lock(names[i], lease=60).acquire()
            else:
                h = await a.semaphore("s", 1, lease=60).acquire()
            done[0] += 1
            await h.release()
        except dlock.DlockError as e:
            errors.append(e)
    t_start = time.monotonic()
    tasks = [asyncio.ensure_future(waiter(i)) for i in range(n)]

    def queued():
        if mode == "names":
            return all(probe.inspect(names[j]).fair_queue == 1
                       for j in (0, n // 2, n - 1))
        return probe.inspect_shared("s", 1).waiters >= n
    await until(queued, "every waiter queued")
    # a little more for stragglers in the middle, then measure
    await asyncio.sleep(0.5)
    queued_s = time.monotonic() - t_start
    rss = rss_kib()
    during_py, during_tasks = threading.active_count(), nthreads()
    out = {"queued_s": round(queued_s, 3),
           "threads_py": [base_py, during_py],
           "threads_os": [base_tasks, during_tasks],
           "rss_kib": [base_rss, rss],
           "rss_per_waiter_b": round((rss - base_rss) * 1024 / n)}
    if trace:
        t1 = tracemalloc.take_snapshot()
        grown = sum(s.size_diff for s in t1.compare_to(t0, "filename"))
        tracemalloc.stop()
        out["py_alloc_per_waiter_b"] = round(grown / n)
    assert done[0] == 0, "a waiter got a held lock"
    t_rel = time.monotonic()
    for i in range(0, len(held), 500):
        await asyncio.gather(*[h.release() for h in held[i:i + 500]])
    await asyncio.wait_for(asyncio.gather(*tasks), 600)
    out["all_served_s"] = round(time.monotonic() - t_rel, 3)
    out["served"] = done[0]
    out["errors"] = [str(e) for e in errors[:3]] + (
        ["... %d in all" % len(errors)] if len(errors) > 3 else [])
    probe.close()
    holder.close()
    a.close()
    return out


async def main_async(args, url):
    r1 = await one_pass(url, "aiob1", args.n, args.mode, False)
    r2 = await one_pass(url, "aiob2", args.n, args.mode, True)
    return r1, r2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("-s", "--server", help="redis URL (default: start one)")
    ap.add_argument("-n", type=int, default=10000)
    ap.add_argument("--mode", choices=["names", "sem"], default="names")
    args = ap.parse_args()
    proc = d = None
    url = args.server
    if url is None:
        url, proc, d = start_server()
    try:
        r1, r2 = asyncio.run(main_async(args, url))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
            shutil.rmtree(d, ignore_errors=True)
    print("waiters %d (%s): queued in %.2f s; threads (python) %s, "
          "(os) %s" % (args.n, args.mode, r1["queued_s"], r1["threads_py"],
                       r1["threads_os"]))
    print("RSS %d -> %d KiB: %d bytes per waiting acquisition"
          % (r1["rss_kib"][0], r1["rss_kib"][1], r1["rss_per_waiter_b"]))
    print("tracemalloc: %d bytes of Python objects per waiting acquisition"
          % r2["py_alloc_per_waiter_b"])
    print("all served after the holder's release: %.2f s (%d served, "
          "errors: %s)" % (r1["all_served_s"], r1["served"],
                           r1["errors"] or "none"))
    print(json.dumps({"bench": "aio_waiters", "mode": args.mode,
                      "n": args.n, "pass1": r1, "pass2": r2,
                      "library": dlock.library_path()}))


if __name__ == "__main__":
    main()
