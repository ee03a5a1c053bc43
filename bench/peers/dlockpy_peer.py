#!/usr/bin/python3
"""dlockpy_peer.py - the dlock Python binding measured like redis-py's Lock.

Run by bench/run with Debian's /usr/bin/python3, DLOCK_LIBRARY set to the
Release build's libdlock.so and bindings/python on the path; the same
workloads and JSON line as redispy_peer.py (whose harness it reuses), so
that the two run on the same server in the same run and compare directly
(issue 32's targets: W1 >= 1.2x redis-py's cycles/s, W3 >= 2x its
acquisitions/s with fairness >= 0.9):

  dlockpy_peer.py w1 -s URL [-n CYCLES]
      One client: `with lock:` (a dlock.Lock, 10 s lease, waiting up to
      10 s) CYCLES times, each cycle timed.
  dlockpy_peer.py w2 -s URL [-p PROCS] [-t SECONDS]
      PROCS forked processes on one key, each with its own dlock.Client
      (made after the fork, as the library requires), looping: `with
      lock:` GET counter, SET counter+1 (redis-py connection), until the
      deadline. Lost updates = acquisitions - final counter.

Exit status as redispy_peer.py's: 0 done, 1 could not run, 3 lost updates.
"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "bindings", "python"))

import dlock  # noqa: E402
import redispy_peer as rp  # noqa: E402


def dlock_w1_cycle(a, key):
    """One W1 cycle through the binding: a callable, True when done."""
    c = dlock.Client(a.server, env=False)
    lock = c.lock(key, lease=rp.LEASE_S, wait=rp.WAIT_S)

    def cycle():
        try:
            with lock:
                pass
        except dlock.DlockError:
            return False
        return True
    return cycle


def dlock_w2_worker(a, key, counter, ready_w, go_r, out_w):
    """One forked worker; reports "acq errors finish_ns" on out_w."""
    c = dlock.Client(a.server, env=False)
    rc = rp.connect(a.server)
    lock = c.lock(key, lease=rp.LEASE_S, wait=rp.WAIT_S)
    rc.ping()
    acq = errors = 0
    os.write(ready_w, b"r")
    os.read(go_r, 1)  # EOF when the parent closes its end: go
    end = time.monotonic() + a.seconds
    while time.monotonic() < end:
        try:
            with lock:
                v = rc.get(counter)
                rc.set(counter, int(v or 0) + 1)
                acq += 1
        except dlock.DlockError:
            errors += 1
    os.write(out_w, ("%d %d %d\n" % (acq, errors,
                                     time.monotonic_ns())).encode())
    c.close()
    os._exit(0)


def main():
    a = rp.parser().parse_args()
    a.sleep = 0  # not used by dlock (kept for the shared JSON line)
    if a.mode == "w1":
        return rp.run_w1(a, dlock_w1_cycle, "dlock-py", "fair")
    return rp.run_w2(a, dlock_w2_worker, "dlock-py", "fair")


if __name__ == "__main__":
    sys.exit(main())
