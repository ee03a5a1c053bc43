#!/usr/bin/env python3
# tests/chaos/queue_stats.py DIR - what the fair queue kept of waiters
# that had gone, counted from a scenario's MONITOR log (CHAOS_MONITOR=1
# CHAOS_KEEP=1 tests/chaos/run --only fair_...: DIR is the kept logs'
# directory, build/chaos/failed/SCENARIO-SEED) and its workers' logs.
#
# An owner id has gone once a release.lua at depth 1 (a release, or the
# give-back of an attempt) or a fair_leave.lua of it has run: the library
# never waits under that id again (docs/reliability.md, F6). Printed:
#   sections        critical sections the workers entered
#   longest_pause   the longest time nobody was inside (ms; a symptom,
#                   noisy, not a bound)
#   stale_entries   queue entries of gone owners: left in the queue by
#                   their give-back, or queued again by a late attempt
#   stale_ms        their time in the queue, in all and the longest
#   handoffs        handoffs published ('h TOKEN OWNER'), and of those
#                   to gone owners
#   max_handoffs    the most handoffs one owner id received
# Reads the newest MONITOR log of the scenario's server (its port is in
# redis.log).
import glob
import os
import re
import sys


def monitor_file(d):
    files = glob.glob(os.path.join(d, '*.monitor.*'))
    try:
        with open(os.path.join(d, 'redis.log'), errors='replace') as f:
            ports = re.findall(r'port=(\d+)', f.read())
        mine = [p for p in files if ports and p.endswith('.' + ports[-1])]
        if mine:
            return mine[0]
    except OSError:
        pass
    return max(files, key=os.path.getmtime)


def worker_stats(d):
    ev = []
    for f in glob.glob(os.path.join(d, '*.w*.log')):
        for line in open(f, errors='replace'):
            p = line.split()
            if p and p[0] == 'E':
                ev.append((int(p[3]), 1))
            elif p and p[0] == 'X':
                ev.append((int(p[4]), -1))
    ev.sort()
    inside, last, longest = 0, None, 0
    for t, k in ev:
        if k == 1 and inside == 0 and last is not None:
            longest = max(longest, t - last)
        inside += k
        if inside == 0:
            last = t
    return sum(1 for _, k in ev if k == 1), longest / 1e6


CALL = re.compile(r'"(?:EVALSHA|EVAL)" "(?:[^"\\]|\\.)*" "4" "[^"]*" "[^"]*" '
                  r'"[^"]*" "[^"]*" "([^"]*)"(?: "([^"]*)")?')


def queue_stats(path):
    gone, inq, stale = {}, {}, []
    hands, hands_gone, per = 0, 0, {}
    cur, first, popped, t = None, False, False, 0.0

    def out(o, t):
        s = inq.pop(o, None)
        if s is not None:
            stale.append(t - s)

    for line in open(path, errors='replace'):
        p = line.split(' ', 3)
        if len(p) < 4:
            continue
        t, src, rest = float(p[0]), p[2].rstrip(']'), p[3]
        if src != 'lua':
            # The script before ended: a gone owner still queued is stale
            # from its going on.
            if cur and cur[2] and cur[0] in inq and inq[cur[0]] is None:
                inq[cur[0]] = cur[3]
            m = CALL.match(rest)
            cur = [m.group(1), m.group(2), False, t] if m else None
            first, popped = True, False
            continue
        if cur is None:
            continue
        if first:
            first = False
            owner, words = cur[0], rest.split()
            release = (words[0] in ('"HGET"', '"HMGET"') and
                       not words[1].endswith(':f"') and cur[1] == '1')
            leave = words[0] == '"ZREM"'
            if (release or leave) and owner in rest:
                cur[2] = True
                gone.setdefault(owner, t)
        m = re.match(r'"ZADD" "[^"]*:q" "NX" "\d+" "([^"]+)"', rest)
        if m:
            o = m.group(1)
            if o not in inq:
                inq[o] = t if o in gone else None
            continue
        m = re.match(r'"ZREM" "[^"]*:q" "([^"]+)"', rest)
        if m:
            out(m.group(1), t)
            continue
        if rest.startswith('"ZPOPMIN"'):
            popped = True
            continue
        m = re.match(r'"ZSCORE" "[^"]*:qt" "([^"]+)"', rest)
        if m and popped:  # the owner ZPOPMIN took
            out(m.group(1), t)
            popped = False
            continue
        m = re.search(r'"PUBLISH" "[^"]*" "h \d+ ([^"]+)"', rest)
        if m:
            hands += 1
            per[m.group(1)] = per.get(m.group(1), 0) + 1
            hands_gone += m.group(1) in gone and gone[m.group(1)] < t
    stale += [t - s for s in inq.values() if s is not None]
    return stale, hands, hands_gone, max(per.values(), default=0)


def main():
    if len(sys.argv) != 2:
        print(__doc__ or 'usage: queue_stats.py DIR', file=sys.stderr)
        return 2
    d = sys.argv[1]
    sections, pause = worker_stats(d)
    stale, hands, hands_gone, most = queue_stats(monitor_file(d))
    print('sections=%d longest_pause=%.0f stale_entries=%d stale_ms=%.0f '
          'stale_longest_ms=%.0f handoffs=%d handoffs_to_gone=%d '
          'max_handoffs=%d' % (sections, pause, len(stale),
                               sum(stale) * 1000, max(stale, default=0) * 1000,
                               hands, hands_gone, most))
    return 0


if __name__ == '__main__':
    sys.exit(main())
