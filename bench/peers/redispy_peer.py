#!/usr/bin/python3
"""redispy_peer.py - redis-py's Lock measured like dlock_bench, one JSON line.

Run by bench/run with Debian's /usr/bin/python3 and python3-redis (the
python3 on PATH may be another interpreter without it):

  redispy_peer.py w1 -s URL [-n CYCLES]
      One client: lock.acquire() + lock.release() CYCLES times, each cycle
      timed (warm-up cycles untimed); cycles/s = 1 / mean cycle.
  redispy_peer.py w2 -s URL [-p PROCS] [-t SECONDS]
      PROCS forked processes on one key, each looping: acquire (blocking,
      up to 10 s), GET counter, SET counter+1 (own connection), release,
      until the deadline. Lost updates = acquisitions - final counter.

The lock is redis.Redis(...).lock(key, timeout=10, sleep=SLEEP,
blocking_timeout=10): SET NX PX to take it, polled every SLEEP seconds
while taken (redis-py's default 0.1; --sleep changes it), released by a
compare-and-delete script (EVALSHA). Redis CPU (INFO cpu) and Redis
commands (INFO commandstats, script internals counted, INFO excluded) are
deltas around the timed part, as in dlock_bench. The output line has
dlock_bench's keys (plus "peer"), so bench/aggregate.py reads both alike.
Exit status: 0 when the run completed, 1 when it could not run, 3 when
updates were lost.
"""
import argparse
import json
import os
import sys
import time

import redis

LEASE_S = 10
WAIT_S = 10


def connect(url):
    return redis.Redis.from_url(url, socket_timeout=30)


def redis_stats(url):
    """(CPU µs, commands) of the server at url, INFO calls excluded."""
    c = connect(url)
    cpu = c.info("cpu")
    calls = 0
    for name, v in c.info("commandstats").items():
        if name != "cmdstat_info" and isinstance(v, dict):
            calls += int(v.get("calls", 0))
    c.close()
    return (float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])) * 1e6, \
        calls


def pct(v, q):
    if not v:
        return 0
    return v[min(len(v) - 1, int(q * len(v)))]


def redispy_w1_cycle(a, key):
    """One W1 cycle with redis-py's Lock: a callable, True when done."""
    r = connect(a.server)
    lock = r.lock(key, timeout=LEASE_S, sleep=a.sleep,
                  blocking_timeout=WAIT_S)

    def cycle():
        if not lock.acquire():
            return False
        lock.release()
        return True
    return cycle


def run_w1(a, make_cycle=redispy_w1_cycle, peer="redis-py",
           strategy="redis-py"):
    """W1 with the cycle make_cycle(a, key) gives (bench/peers/
    dlockpy_peer.py passes the dlock binding's)."""
    key = "bench:py:w1:%d" % os.getpid()
    one = make_cycle(a, key)
    errors = 0

    def cycle():
        nonlocal errors
        if not one():
            errors += 1

    for _ in range(a.cycles // 20 + 10):
        cycle()
    lat = []
    cpu0, calls0 = redis_stats(a.server)
    for _ in range(a.cycles):
        t0 = time.monotonic_ns()
        cycle()
        lat.append(time.monotonic_ns() - t0)
    cpu1, calls1 = redis_stats(a.server)
    total = sum(lat)
    n = len(lat)
    lat.sort()
    print(json.dumps({
        "mode": "w1", "peer": peer, "strategy": strategy,
        "nodes": 1, "floor": False, "paired": False, "cycles": n,
        "cycles_per_s": round(n * 1e9 / total, 1),
        "p50_us": round(pct(lat, 0.5) / 1e3, 1),
        "p99_us": round(pct(lat, 0.99) / 1e3, 1),
        "mean_us": round(total / n / 1e3, 1),
        "redis_cpu_us_per_cycle": round((cpu1 - cpu0) / n, 1),
        "redis_commands_per_cycle": round((calls1 - calls0) / n, 2),
        "sleep_s": a.sleep, "errors": errors}))
    return 0


def w2_worker(a, key, counter, ready_w, go_r, out_w):
    """One forked worker; reports "acq errors finish_ns" on out_w."""
    r = connect(a.server)
    rc = connect(a.server)
    lock = r.lock(key, timeout=LEASE_S, sleep=a.sleep,
                  blocking_timeout=WAIT_S)
    r.ping()
    rc.ping()
    acq = errors = 0
    os.write(ready_w, b"r")
    os.read(go_r, 1)  # EOF when the parent closes its end: go
    end = time.monotonic() + a.seconds
    while time.monotonic() < end:
        if not lock.acquire():
            errors += 1
            continue
        v = rc.get(counter)
        rc.set(counter, int(v or 0) + 1)
        try:
            lock.release()
        except redis.exceptions.LockError:
            errors += 1
        acq += 1
    os.write(out_w, ("%d %d %d\n" % (acq, errors,
                                     time.monotonic_ns())).encode())
    os._exit(0)


def run_w2(a, worker=w2_worker, peer="redis-py", strategy="redis-py"):
    """W2 with PROCS forked processes, each running worker(a, key,
    counter, ready_w, go_r, out_w) (bench/peers/dlockpy_peer.py passes
    the dlock binding's)."""
    key = "bench:py:w2:%d" % os.getpid()
    counter = "bench:py:counter:%d" % os.getpid()
    rc = connect(a.server)
    rc.delete(counter, key)
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    out_r, out_w = os.pipe()
    pids = []
    sys.stdout.flush()
    for _ in range(a.procs):
        pid = os.fork()
        if pid == 0:
            os.close(go_w)
            worker(a, key, counter, ready_w, go_r, out_w)
        pids.append(pid)
    os.close(ready_w)
    os.close(out_w)
    os.close(go_r)
    got = 0
    while got < a.procs:
        b = os.read(ready_r, a.procs)
        if not b:
            break
        got += len(b)
    cpu0, calls0 = redis_stats(a.server)
    t0 = time.monotonic_ns()
    os.close(go_w)
    data = b""
    while True:
        b = os.read(out_r, 65536)
        if not b:
            break
        data += b
    for pid in pids:
        os.waitpid(pid, 0)
    cpu1, calls1 = redis_stats(a.server)
    final = int(rc.get(counter) or 0)
    rc.delete(counter)
    per = [tuple(int(x) for x in ln.split()) for ln in
           data.decode().splitlines() if ln.strip()]
    acqs = [p[0] for p in per]
    acq = sum(acqs)
    errors = sum(p[1] for p in per)
    t1 = max([p[2] for p in per] or [time.monotonic_ns()])
    secs = (t1 - t0) / 1e9
    d = acq or 1
    print(json.dumps({
        "mode": "w2", "peer": peer, "strategy": strategy,
        "nodes": 1, "floor": False, "procs": a.procs,
        "seconds": round(secs, 3), "acquisitions": acq,
        "acq_per_s": round(acq / secs, 1),
        "redis_cpu_us_per_acq": round((cpu1 - cpu0) / d, 2),
        "redis_commands_per_acq": round((calls1 - calls0) / d, 2),
        "fairness_min_over_max": round(min(acqs) / max(acqs), 3)
        if acqs and max(acqs) else 0.0,
        "workers_reported": len(per),
        "lost_updates": acq - final, "errors": errors, "hung": 0,
        "sleep_s": a.sleep}))
    return 3 if acq != final else 0


def parser():
    """The command line (dlockpy_peer.py takes the same)."""
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["w1", "w2"])
    p.add_argument("-s", dest="server", required=True)
    p.add_argument("-n", dest="cycles", type=int, default=10000)
    p.add_argument("-p", dest="procs", type=int, default=8)
    p.add_argument("-t", dest="seconds", type=float, default=5)
    p.add_argument("--sleep", type=float, default=0.1)
    return p


def main():
    a = parser().parse_args()
    return run_w1(a) if a.mode == "w1" else run_w2(a)


if __name__ == "__main__":
    sys.exit(main())
