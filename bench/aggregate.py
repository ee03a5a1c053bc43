#!/usr/bin/env python3
"""aggregate.py RAW.jsonl RESULTS.json WORKDIR QUICK MACHINE

Part of bench/run: turns the JSON lines dlock_bench printed into
bench/results.json (the default strategy, fair, at the top level and
every strategy under by_strategy), prints the table and the met/missed
targets on stdout, and writes WORKDIR/handoff.gp, a gnuplot script for the
handoff latency CDFs (WORKDIR/handoff.png). Standard library only.
"""
import glob
import json
import statistics
import sys

STRATEGIES = ["spin", "notify", "fair"]
DEFAULT = "fair"


def ratio(a, b):
    """a / b rounded, None when either is missing or b is 0."""
    if a is None or b is None or b == 0:
        return None
    return round(a / b, 3)


def merge_rounds(lines):
    """One line for the rounds of a run: the median of every number (sums
    of lost updates, errors and acquisitions), and the rounds kept."""
    out = dict(lines[0])
    for k, v in lines[0].items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            vals = [d.get(k) for d in lines if d.get(k) is not None]
            if k in ("lost_updates", "errors", "acquisitions", "hung"):
                out[k] = sum(vals)
            else:
                out[k] = statistics.median(vals)
    out["rounds"] = lines
    return out


# The peers bench/run measures next to dlock: (name, label prefix).
PEERS = [("redis-py", "py"), ("node-redlock", "node")]
PEER_HEAD = {"redis-py": "redis-py Lock",
             "node-redlock": "node-redlock 5.0.0-beta.2"}


def round_ratios(rounds, lab, key="acq_per_s"):
    """Per-round ratios (of key) of LAB to LAB_floor, paired by round
    number (a round whose peer run failed has no line), and their median."""
    fl = {d["label"].split("@", 1)[1].split("_")[0]: d
          for d in rounds.get(lab + "_floor", [])}
    per = []
    for d in rounds.get(lab, []):
        f = fl.get(d["label"].split("@", 1)[1])
        x = ratio(d.get(key), f and f.get(key))
        if x is not None:
            per.append(x)
    return per, (round(statistics.median(per), 3) if per else None)


def peer_results(runs, rounds):
    """The peers' numbers, each next to its own floor run."""
    out = {}
    for name, pre in PEERS:
        w1lab = "py_w1" if pre == "py" else "node_w1_1"
        if w1lab not in runs and pre + "_w2" not in runs:
            continue
        e = {}
        w1, w1f = runs.get(w1lab, {}), runs.get(w1lab + "_floor", {})
        e["w1"] = {
            "cycles_per_s": w1.get("cycles_per_s"),
            "p50_us": w1.get("p50_us"),
            "p99_us": w1.get("p99_us"),
            "redis_cpu_us_per_cycle": w1.get("redis_cpu_us_per_cycle"),
            "redis_commands_per_cycle": w1.get("redis_commands_per_cycle"),
            "errors": w1.get("errors"),
            "floor_cycles_per_s": w1f.get("cycles_per_s"),
            "floor_redis_cpu_us_per_cycle": w1f.get("redis_cpu_us_per_cycle"),
            "ratio_to_floor": ratio(w1.get("cycles_per_s"),
                                    w1f.get("cycles_per_s")),
        }
        f2 = runs.get(pre + "_w2_floor", {})
        for w in ("w2", "w3"):
            d = runs.get(pre + "_" + w)
            if d is None:
                continue
            e[w] = {k: d.get(k) for k in (
                "procs", "acq_per_s", "redis_cpu_us_per_acq",
                "redis_commands_per_acq", "fairness_min_over_max",
                "lost_updates", "errors", "seconds")}
            e[w]["floor_acq_per_s"] = f2.get("acq_per_s")
            e[w]["ratio_to_floor"] = ratio(d.get("acq_per_s"),
                                           f2.get("acq_per_s"))
        if "w2" in e:
            per, med = round_ratios(rounds, pre + "_w2")
            if med is not None:
                e["w2"]["ratio_to_floor"] = med
                e["w2"]["ratio_rounds"] = per
        per, med = round_ratios(rounds, w1lab, "cycles_per_s")
        if med is not None:
            e["w1"]["ratio_to_floor"] = med
            e["w1"]["ratio_rounds"] = per
        if pre + "_w1_5" in runs:
            d, f = runs[pre + "_w1_5"], runs.get(pre + "_w1_5_floor", {})
            e["w1_5"] = {
                "cycles_per_s": d.get("cycles_per_s"),
                "p50_us": d.get("p50_us"),
                "redis_cpu_us_per_cycle": d.get("redis_cpu_us_per_cycle"),
                "redis_commands_per_cycle": d.get("redis_commands_per_cycle"),
                "errors": d.get("errors"),
                "raw_floor_cycles_per_s": f.get("cycles_per_s"),
                "ratio_to_raw_floor": ratio(d.get("cycles_per_s"),
                                            f.get("cycles_per_s")),
            }
            per, med = round_ratios(rounds, pre + "_w1_5", "cycles_per_s")
            if med is not None:
                e["w1_5"]["ratio_to_raw_floor"] = med
                e["w1_5"]["ratio_rounds"] = per
        if pre + "_w2_5" in runs:
            d = runs[pre + "_w2_5"]
            e["w2_5"] = {k: d.get(k) for k in (
                "procs", "acq_per_s", "redis_cpu_us_per_acq",
                "redis_commands_per_acq", "fairness_min_over_max",
                "lost_updates", "errors", "seconds")}
        out[name] = e
    return out


def num(v, p=0):
    """A table cell: thousands separators, '-' when missing."""
    if v is None:
        return "–"
    if p == 0:
        return "{:,}".format(int(round(v)))
    return ("%%.%df" % p) % v


def with_ratio(v, r, p=0):
    if v is None:
        return "–"
    return num(v, p) + ("" if r is None else " (%s)" % num(r, 2))


def side_by_side(by, peers):
    """The issue-18 table: floor, the peers, dlock fair (the default) and
    notify (the default before issue 18)."""
    dl = [s for s in (DEFAULT, "notify") if s in by]
    pn = [n for n, _ in PEERS]
    head = ["workload", "floor"] + \
        ["%s%s" % (PEER_HEAD[n], "" if n in peers else " (skipped)")
         for n in pn] + \
        ["dlock %s%s" % (s, " (default)" if s == DEFAULT else "")
         for s in dl]
    rows = [head]
    fl = by.get(DEFAULT, {}).get("floor", {})
    w4 = by.get(DEFAULT, {}).get("w4", {})
    P = lambda n, *ks: _dig(peers.get(n), *ks)  # noqa: E731

    def row(label, floor, peer_cell, dlock_cell):
        rows.append([label, floor] + [peer_cell(n) for n in pn] +
                    [dlock_cell(s) for s in dl])

    row("W1 uncontended, 1 server, cycles/s (x own floor)",
        num(fl.get("w1_cycles_per_s")),
        lambda n: with_ratio(P(n, "w1", "cycles_per_s"),
                             P(n, "w1", "ratio_to_floor")),
        lambda s: with_ratio(by[s]["w1"]["cycles_per_s"],
                             by[s]["w1"]["ratio_to_floor"]))
    row("W1 its floor's cycles/s (run before it; dlock's: paired)", "–",
        lambda n: num(P(n, "w1", "floor_cycles_per_s")),
        lambda s: num(by[s]["floor"].get("w1_cycles_per_s")))
    row("W1 Redis CPU µs / cycle",
        num(fl.get("w1_redis_cpu_us_per_cycle")),
        lambda n: num(P(n, "w1", "redis_cpu_us_per_cycle")),
        lambda s: num(by[s]["w1"].get("redis_cpu_us_per_cycle")))
    row("W1 Redis commands / cycle",
        num(fl.get("w1_redis_commands_per_cycle"), 1),
        lambda n: num(P(n, "w1", "redis_commands_per_cycle"), 1),
        lambda s: num(by[s]["w1"].get("redis_commands_per_cycle"), 1))
    row("W1 uncontended, 5 servers, cycles/s (x raw fan-out floor)",
        num(w4.get("raw_w1_cycles_per_s_5")),
        lambda n: with_ratio(P(n, "w1_5", "cycles_per_s"),
                             P(n, "w1_5", "ratio_to_raw_floor")),
        lambda s: with_ratio(by[s]["w4"].get("w1_cycles_per_s_5"),
                             ratio(by[s]["w4"].get("w1_cycles_per_s_5"),
                                   by[s]["w4"].get("raw_w1_cycles_per_s_5"))))
    row("W2/W3 its floor-cs acq/s (median of the floor runs before it)",
        "–", lambda n: num(P(n, "w2", "floor_acq_per_s")),
        lambda s: num(by[s]["floor"].get("w2_acq_per_s")))
    for w, procs in (("w2", 8), ("w3", 64)):
        W = w.upper()
        row("%s %d processes, acq/s (x floor-cs)" % (W, procs),
            with_ratio(fl.get("w2_acq_per_s"), 1.0),
            lambda n: with_ratio(P(n, w, "acq_per_s"),
                                 P(n, w, "ratio_to_floor")),
            lambda s: with_ratio(by[s][w]["acq_per_s"],
                                 by[s][w]["ratio_to_floor"]))
        row("%s Redis commands / acquisition (script internals counted)" % W,
            num(fl.get("w2_redis_commands_per_acq"), 1),
            lambda n: num(P(n, w, "redis_commands_per_acq"), 1),
            lambda s: num(by[s][w].get("redis_commands_per_acq"), 1))
        row("%s Redis CPU µs / acquisition" % W,
            num(fl.get("w2_redis_cpu_us_per_acq")),
            lambda n: num(P(n, w, "redis_cpu_us_per_acq")),
            lambda s: num(by[s][w].get("redis_cpu_us_per_acq")))
        row("%s client requests / acquisition" % W, "4",
            lambda n: "–",
            lambda s: num(by[s][w].get("requests_per_acq"), 2))
        row("%s fairness min/max per process" % W, "–",
            lambda n: num(P(n, w, "fairness_min_over_max"), 2),
            lambda s: num(by[s][w].get("fairness_min_over_max"), 2))
        row("%s timeouts (failed acquires)" % W, "–",
            lambda n: num(P(n, w, "errors")),
            lambda s: num(by[s][w].get("errors")))
    row("W2 5 servers, 8 processes, acq/s (fairness)",
        num(w4.get("raw_w2_acq_per_s_5")),
        lambda n: "–" if P(n, "w2_5", "acq_per_s") is None else
        "%s (%s)" % (num(P(n, "w2_5", "acq_per_s")),
                     num(P(n, "w2_5", "fairness_min_over_max"), 2)),
        lambda s: "–" if by[s]["w4"].get("w2_acq_per_s_5") is None else
        "%s (%s)" % (num(by[s]["w4"]["w2_acq_per_s_5"]),
                     num(by[s]["w4"].get("w2_fairness_5"), 2)))
    return rows


def _dig(d, *ks):
    for k in ks:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def issue18_targets(by, peers):
    """Issue 18's targets for the default strategy, met or missed."""
    out = []

    def t(name, value, ok):
        out.append({"target": name, "value": value,
                    "met": bool(ok) if value is not None else None})

    r = by.get(DEFAULT)
    if r is None:
        return out
    fl = r["floor"]
    v = r["w1"]["ratio_to_floor"]
    t("W1 %s >= 0.98x floor" % DEFAULT, v, v is not None and v >= 0.98)
    v = ratio(r["w1"].get("redis_cpu_us_per_cycle"),
              fl.get("w1_redis_cpu_us_per_cycle"))
    t("W1 Redis CPU/cycle <= 1.1x floor's", v, v is not None and v <= 1.1)
    for w in ("w2", "w3"):
        W = w.upper()
        x = r[w]
        v = x["ratio_to_floor"]
        t("%s %s >= 1.15x floor-cs" % (W, DEFAULT), v,
          v is not None and v >= 1.15)
        v = x["requests_per_acq"]
        t("%s <= 4.2 requests/acq" % W, v, v is not None and v <= 4.2)
        v = x.get("redis_commands_per_acq")
        t("%s <= 10 Redis commands/acq" % W, v, v is not None and v <= 10)
        cheap = [(_dig(peers, n, w, "redis_cpu_us_per_acq"), n)
                 for n in peers]
        cheap = [c for c in cheap if c[0] is not None]
        if cheap:
            c, n = min(cheap)
            v = ratio(x.get("redis_cpu_us_per_acq"), c)
            t("%s Redis CPU/acq <= cheapest peer's (%s, %.0f us)" % (W, n, c),
              v, v is not None and v <= 1.0)
        else:
            t("%s Redis CPU/acq <= cheapest peer's (no peer ran)" % W, None,
              None)
        v = x["fairness_min_over_max"]
        t("%s fairness >= 0.9" % W, v, v is not None and v >= 0.9)
        v = x["errors"]
        t("%s 0 timeouts" % W, v, v is not None and v == 0)
    v = ratio(r["w3"].get("redis_cpu_us_per_acq"),
              r["w2"].get("redis_cpu_us_per_acq"))
    t("W3 Redis CPU/acq <= 1.1x W2's", v, v is not None and v <= 1.1)
    v = ratio(r["w3"].get("redis_commands_per_acq"),
              r["w2"].get("redis_commands_per_acq"))
    t("W3 Redis commands/acq <= 1.1x W2's", v, v is not None and v <= 1.1)
    w4 = r.get("w4", {})
    v = ratio(w4.get("w1_cycles_per_s_5"),
              _dig(peers, "node-redlock", "w1_5", "cycles_per_s"))
    t("Redlock 5 servers: W1 >= 1.3x node-redlock's", v,
      v is not None and v >= 1.3)
    v = ratio(w4.get("w1_cycles_per_s_5"), w4.get("raw_w1_cycles_per_s_5"))
    t("Redlock 5 servers: W1 >= 0.9x raw fan-out floor", v,
      v is not None and v >= 0.9)
    v = ratio(w4.get("w2_acq_per_s_5"),
              _dig(peers, "node-redlock", "w2_5", "acq_per_s"))
    t("Redlock 5 servers: W2 8 procs >= 3x node-redlock's", v,
      v is not None and v >= 3)
    v = w4.get("w2_fairness_5")
    t("Redlock 5 servers: W2 fairness >= 0.9", v, v is not None and v >= 0.9)
    return out


def _round_of(d):
    """The round number of a LABEL@ROUND or LABEL@ROUND_floor line."""
    return d["label"].split("@", 1)[1].split("_")[0]


def _paired(rounds, lab, flab, key="acq_per_s"):
    """Per-round ratios of LAB to FLAB (paired by round number), and
    their median (None when no round has both)."""
    fl = {_round_of(d): d for d in rounds.get(flab, [])}
    per = []
    for d in rounds.get(lab, []):
        x = ratio(d.get(key), fl.get(_round_of(d), {}).get(key))
        if x is not None:
            per.append(x)
    return per, (round(statistics.median(per), 3) if per else None)


def python_binding(runs, rounds):
    """Issue 32: the dlock Python binding (bench/peers/dlockpy_peer.py,
    labels pyb_*) against redis-py's Lock (py_*), both on the same server
    in the same run; W1 and W2 in rounds, each binding run right after
    redis-py's of its round (the ratio is the median of the rounds'),
    W3 (64 processes, full mode) once each. Its targets, met or missed."""
    out, targets = {}, []
    for w, key in (("w1", "cycles_per_s"), ("w2", "acq_per_s"),
                   ("w3", "acq_per_s")):
        b, p = runs.get("pyb_" + w), runs.get("py_" + w)
        if b is None:
            continue
        e = {"binding_" + key: b.get(key),
             "redis_py_" + key: p and p.get(key),
             "ratio": ratio(b.get(key), p and p.get(key))}
        per, med = _paired(rounds, "pyb_" + w, "py_" + w, key)
        if med is not None:
            e["ratio"], e["ratio_rounds"] = med, per
        if w == "w1":
            e["binding_p50_us"] = b.get("p50_us")
            e["redis_py_p50_us"] = p and p.get("p50_us")
        else:
            e["procs"] = b.get("procs")
            e["binding_fairness"] = b.get("fairness_min_over_max")
            e["redis_py_fairness"] = p and p.get("fairness_min_over_max")
            e["lost_updates"] = b.get("lost_updates")
            e["errors"] = b.get("errors")
        out[w] = e

    def t(name, value, ok):
        targets.append({"target": name, "value": value,
                        "met": bool(ok) if value is not None else None})

    v = _dig(out, "w1", "ratio")
    t("Python W1 >= 1.2x redis-py Lock's cycles/s", v,
      v is not None and v >= 1.2)
    v = _dig(out, "w3", "ratio")
    t("Python W3 (64 procs) >= 2x redis-py Lock's acq/s", v,
      v is not None and v >= 2)
    v = _dig(out, "w3", "binding_fairness")
    t("Python W3 fairness >= 0.9", v, v is not None and v >= 0.9)
    return out, targets


SEM_KEYS = ("procs", "limit", "acq_per_s", "wait_p50_us", "wait_p99_us",
            "requests_per_acq", "redis_cpu_us_per_acq",
            "redis_commands_per_acq", "fairness_min_over_max", "timeouts",
            "errors")
RW_KEYS = ("readers", "writers", "prefer_readers", "acq_per_s",
           "reader_acq_per_s", "reader_wait_p50_us", "reader_wait_p99_us",
           "reader_fairness_min_over_max", "max_readers_inside",
           "writer_acquisitions", "writer_acq_per_s", "writer_waits",
           "writer_wait_p50_us", "writer_wait_p99_us", "writer_wait_max_us",
           "writer_timeouts", "writer_wait_ms", "requests_per_acq",
           "redis_cpu_us_per_acq", "redis_commands_per_acq", "violations",
           "errors", "seconds")


def prims_results(runs, rounds, w2_floor):
    """Issue 19: the semaphore and the read-write lock (bench/prims.c),
    each next to what it is compared with in the same run. W2_FLOOR is
    the default strategy's W2 floor acq/s (one raw process)."""
    out = {}
    if "sem_floor" in runs:
        fl = runs["sem_floor"]
        sem = {"floor": {k: fl.get(k) for k in SEM_KEYS}}
        for s in ("notify", "fair"):
            lines = rounds.get("sem_" + s, [])
            if not lines:
                continue
            d = runs["sem_" + s]
            e = {k: d.get(k) for k in SEM_KEYS}
            per, med = _paired(rounds, "sem_" + s, "sem_floor")
            e["ratio_to_floor"] = med
            e["ratio_rounds"] = per
            e["cpu_ratio_to_floor"] = ratio(d.get("redis_cpu_us_per_acq"),
                                            fl.get("redis_cpu_us_per_acq"))
            e["max_inside"] = max(x.get("max_inside", 0) for x in lines)
            e["max_inside_redis"] = max(x.get("max_inside_redis", 0)
                                        for x in lines)
            e["over_limit"] = any(x.get("over_limit") for x in lines)
            sem[s] = e
        out["sem"] = sem
    if "rw_read" in runs:
        rd, ex = runs["rw_read"], runs.get("rw_excl", {})
        per, med = _paired(rounds, "rw_read", "rw_excl")
        out["rw"] = {
            "exclusive": {k: ex.get(k) for k in (
                "procs", "acq_per_s", "requests_per_acq",
                "redis_cpu_us_per_acq", "redis_commands_per_acq",
                "fairness_min_over_max", "lost_updates", "errors")},
            "readers": {k: rd.get(k) for k in RW_KEYS},
            "ratio_readers_to_exclusive": med,
            "ratio_rounds": per,
            "readers_ratio_to_w2_floor": ratio(rd.get("acq_per_s"),
                                               w2_floor),
            "exclusive_ratio_to_w2_floor": ratio(ex.get("acq_per_s"),
                                                 w2_floor),
            "max_readers_inside": max(x.get("max_readers_inside", 0)
                                      for x in rounds.get("rw_read", [])),
            "violations": sum(x.get("violations", 0)
                              for x in rounds.get("rw_read", [])),
        }
    ww = {}
    for name, lab in (("writer_preference", "rww_writer_pref"),
                      ("prefer_readers", "rww_prefer_readers")):
        if lab in runs:
            ww[name] = {k: runs[lab].get(k) for k in RW_KEYS}
    if ww:
        out["writer_wait"] = ww
    checks = []
    for s in ("notify", "fair"):
        e = out.get("sem", {}).get(s)
        if e:
            v = max(e["max_inside"], e["max_inside_redis"])
            checks.append({"check": "semaphore %s: at most %s inside" % (
                s, e.get("limit")), "value": v, "met": not e["over_limit"]})
    viol = [d.get("violations", 0) for lab, d in runs.items()
            if d.get("mode") == "rw"]
    if viol:
        checks.append({"check": "read-write lock: no writer inside with "
                       "anyone else", "value": sum(viol),
                       "met": sum(viol) == 0})
    out["checks"] = checks
    return out


def print_prims(p):
    """The issue-19 part of the table."""
    def n(v, d=0):
        return num(v, d)

    sem = p.get("sem")
    if sem:
        fl = sem["floor"]
        print()
        print("semaphore (issue 19): %s processes on %s permits, critical "
              "section INCR + DECR of an inside counter; floor = %s raw "
              "processes, each alone on a SET NX lock of its own (always "
              "busy, never waiting):" % (
                  _dig(sem, "notify", "procs") or 16, fl.get("limit"),
                  fl.get("procs")))
        print("  %-6s %8s acq/s                 Redis CPU %4s us/acq "
              "%5s cmds/acq" % ("floor", n(fl.get("acq_per_s")),
                                n(fl.get("redis_cpu_us_per_acq")),
                                n(fl.get("redis_commands_per_acq"), 1)))
        for s in ("notify", "fair"):
            e = sem.get(s)
            if not e:
                continue
            print("  %-6s %8s acq/s (%s x floor)  Redis CPU %4s us/acq "
                  "(%s x) %5s cmds/acq  req/acq %s  wait p50 %s us p99 %s "
                  "us  fairness %s  max inside %s (Redis: %s)  timeouts %s"
                  % (s, n(e.get("acq_per_s")), n(e.get("ratio_to_floor"), 2),
                     n(e.get("redis_cpu_us_per_acq")),
                     n(e.get("cpu_ratio_to_floor"), 2),
                     n(e.get("redis_commands_per_acq"), 1),
                     n(e.get("requests_per_acq"), 2),
                     n(e.get("wait_p50_us")), n(e.get("wait_p99_us")),
                     n(e.get("fairness_min_over_max"), 2),
                     e.get("max_inside"), e.get("max_inside_redis"),
                     n(e.get("timeouts"))))
            if len(e.get("ratio_rounds") or []) > 1:
                print("         rounds: %s x floor" % " ".join(
                    n(x, 2) for x in e["ratio_rounds"]))
    rw = p.get("rw")
    if rw:
        ex, rd = rw["exclusive"], rw["readers"]
        print()
        print("read-write lock (issue 19), 8 processes on one key, notify:")
        print("  exclusive (W2: GET, SET)  %8s acq/s (%s x W2 floor)  Redis "
              "CPU %s us/acq  %s cmds/acq  fairness %s" % (
                  n(ex.get("acq_per_s")),
                  n(rw.get("exclusive_ratio_to_w2_floor"), 2),
                  n(ex.get("redis_cpu_us_per_acq")),
                  n(ex.get("redis_commands_per_acq"), 1),
                  n(ex.get("fairness_min_over_max"), 2)))
        print("  readers (GET, GET)        %8s acq/s (%s x exclusive, %s x "
              "W2 floor)  Redis CPU %s us/acq  %s cmds/acq  fairness %s  "
              "up to %s inside at once" % (
                  n(rd.get("acq_per_s")),
                  n(rw.get("ratio_readers_to_exclusive"), 2),
                  n(rw.get("readers_ratio_to_w2_floor"), 2),
                  n(rd.get("redis_cpu_us_per_acq")),
                  n(rd.get("redis_commands_per_acq"), 1),
                  n(rd.get("reader_fairness_min_over_max"), 2),
                  rw.get("max_readers_inside")))
        if len(rw.get("ratio_rounds") or []) > 1:
            print("  rounds: %s x exclusive" % " ".join(
                n(x, 2) for x in rw["ratio_rounds"]))
    ww = p.get("writer_wait")
    if ww:
        print()
        print("writer wait under 8 streaming readers (1 writer with W2's "
              "section, acquiring again at once, each wait bounded):")
        for name, e in ww.items():
            print("  %-17s writer: %s acquisitions (%s/s), wait p50 %s us, "
                  "p99 %s us, max %s us, %s of %s waits timed out (%s ms); "
                  "readers: %s acq/s, wait p50 %s us, p99 %s us" % (
                      name, n(e.get("writer_acquisitions")),
                      n(e.get("writer_acq_per_s")),
                      n(e.get("writer_wait_p50_us")),
                      n(e.get("writer_wait_p99_us")),
                      n(e.get("writer_wait_max_us")),
                      n(e.get("writer_timeouts")), n(e.get("writer_waits")),
                      n(e.get("writer_wait_ms")),
                      n(e.get("reader_acq_per_s")),
                      n(e.get("reader_wait_p50_us")),
                      n(e.get("reader_wait_p99_us"))))
    if p.get("checks"):
        print()
        print("checks (issue 19):")
        for c in p["checks"]:
            print("  %-6s %-50s %s" % ("met" if c["met"] else "FAILED",
                                       c["check"], c["value"]))


def gateway_results(lines):
    """Issue 30's gateway benchmark (bench/gateway.sh): per shape (k1000,
    k10000, dup) the dlock gateway's numbers, the floor's, and the median
    over the rounds of each round's dlock / floor ratio; targets as
    met/missed. None when the gateway did not run."""
    if not lines:
        return None, []
    by = {}
    for d in lines:
        base, rnd = d["label"].split("@", 1)
        impl, shape = base.split("_", 2)[1:]
        by.setdefault(shape, {}).setdefault(rnd, {})[impl] = d
    keys = ["throughput", "p50_us", "p99_us", "decision_p50_us",
            "decision_p99_us", "client_cpu_us_per_req",
            "redis_cpu_us_per_req", "conns_per_server", "double_processed",
            "dup_requests", "errors", "status_other"]
    out = {}
    for shape, rounds in by.items():
        per = {"ratio_to_floor": [], "p50_ratio_to_floor": [],
               "p99_ratio_to_floor": [], "client_cpu_ratio_to_floor": [],
               "redis_cpu_ratio_to_floor": []}
        src = {"ratio_to_floor": "throughput",
               "p50_ratio_to_floor": "decision_p50_us",
               "p99_ratio_to_floor": "decision_p99_us",
               "client_cpu_ratio_to_floor": "client_cpu_us_per_req",
               "redis_cpu_ratio_to_floor": "redis_cpu_us_per_req"}
        for rnd, pair in sorted(rounds.items()):
            if "floor" not in pair:
                continue
            # dlockhash: the hash layout's gateway, k1000 (the gateway's
            # default is the string layout; dlockstr: older runs').
            for impl, pre in (("dlock", ""), ("dlockstr", "string_"),
                              ("dlockhash", "hash_")):
                if impl not in pair:
                    continue
                for name, k in src.items():
                    x = ratio(pair[impl].get(k), pair["floor"].get(k))
                    if x is not None:
                        per.setdefault(pre + name, []).append(x)
        o = {}
        for name, vals in per.items():
            o[name] = round(statistics.median(vals), 3) if vals else None
            o[name + "_rounds"] = vals
        for impl in ("dlock", "dlockstr", "dlockhash", "floor"):
            ls = [p[impl] for p in rounds.values() if impl in p]
            if not ls:
                continue
            o[impl] = {}
            for k in keys:
                vals = [d.get(k) for d in ls if d.get(k) is not None]
                if not vals:
                    continue
                if k in ("double_processed", "dup_requests", "errors",
                         "status_other"):
                    o[impl][k] = sum(vals)
                else:
                    o[impl][k] = statistics.median(vals)
        o["rounds"] = len(rounds)
        out[shape] = o
    dup = out.get("dup", {})
    out["dup"] = dup
    dup["double_processed"] = _dig(dup, "dlock", "double_processed")
    targets = []

    def t(name, value, ok):
        targets.append({"target": name, "value": value,
                        "met": None if value is None else bool(ok)})

    v = _dig(out, "k1000", "ratio_to_floor")
    t("gateway k=1000 throughput >= 0.8 x floor", v, v and v >= 0.8)
    v = _dig(out, "k10000", "ratio_to_floor")
    t("gateway k=10000 throughput >= 0.7 x floor", v, v and v >= 0.7)
    v = _dig(out, "k10000", "p99_ratio_to_floor")
    t("gateway k=10000 decision p99 <= 3 x floor", v,
      v is not None and v <= 3)
    for shape in ("k1000", "k10000"):
        for what in ("client", "redis"):
            v = _dig(out, shape, what + "_cpu_ratio_to_floor")
            t("gateway %s %s CPU per request <= 1.5 x floor"
              % (shape, what), v, v is not None and v <= 1.5)
        v = _dig(out, shape, "dlock", "conns_per_server")
        t("gateway %s connections per server <= 2" % shape, v,
          v is not None and v <= 2)
    v = dup.get("double_processed")
    t("gateway 10 % duplicates: double processing == 0", v, v == 0)
    return out, targets


def main():
    raw_path, out_path, work, quick, machine = sys.argv[1:6]
    versions = sys.argv[6] if len(sys.argv) > 6 else ""
    runs = {}
    rounds = {}
    gw_lines = []
    with open(raw_path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            d = json.loads(line)
            if d.get("mode") == "gateway":
                gw_lines.append(d)
                continue
            lab = d["label"]
            if "@" in lab:
                # LABEL@ROUND or LABEL@ROUND_floor
                base, rest = lab.split("@", 1)
                key = base + ("_floor" if rest.endswith("_floor") else "")
                rounds.setdefault(key, []).append(d)
            else:
                runs[lab] = d
    for key, lines in rounds.items():
        runs[key] = merge_rounds(lines)

    def get(label, key):
        return runs.get(label, {}).get(key)

    by = {}
    for s in STRATEGIES:
        if "w1_" + s not in runs:
            continue
        w1_floor = runs.get("w1_%s_floor" % s, {})
        w2_floor = runs.get("w2_%s_floor" % s, {})
        r = {}
        r["floor"] = {
            "w1_cycles_per_s": w1_floor.get("cycles_per_s"),
            "w1_p50_us": w1_floor.get("p50_us"),
            "w1_p99_us": w1_floor.get("p99_us"),
            "w2_acq_per_s": w2_floor.get("acq_per_s"),
            "w2_redis_cpu_us_per_acq": w2_floor.get("redis_cpu_us_per_acq"),
            "w2_redis_commands_per_acq": w2_floor.get(
                "redis_commands_per_acq"),
            "w1_redis_cpu_us_per_cycle": w1_floor.get(
                "redis_cpu_us_per_cycle"),
            "w1_redis_commands_per_cycle": w1_floor.get(
                "redis_commands_per_cycle"),
        }
        r["w1"] = {
            "cycles_per_s": get("w1_" + s, "cycles_per_s"),
            "p50_us": get("w1_" + s, "p50_us"),
            "p99_us": get("w1_" + s, "p99_us"),
            "ratio_to_floor": ratio(get("w1_" + s, "cycles_per_s"),
                                    w1_floor.get("cycles_per_s")),
            "redis_cpu_us_per_cycle": get("w1_" + s,
                                          "redis_cpu_us_per_cycle"),
            "redis_commands_per_cycle": get("w1_" + s,
                                            "redis_commands_per_cycle"),
        }
        for w in ("w2", "w3"):
            lab = w + "_" + s
            r[w] = {
                "procs": get(lab, "procs"),
                "acq_per_s": get(lab, "acq_per_s"),
                "ratio_to_floor": ratio(get(lab, "acq_per_s"),
                                        w2_floor.get("acq_per_s")),
                "hold_mean_us": get(lab, "hold_mean_us"),
                "handoff_mean_us": get(lab, "handoff_mean_us"),
                "requests_per_acq": get(lab, "requests_per_acq"),
                "redis_cpu_us_per_acq": get(lab, "redis_cpu_us_per_acq"),
                "redis_commands_per_acq": get(lab, "redis_commands_per_acq"),
                "handoff_p50_us": get(lab, "handoff_p50_us"),
                "handoff_p99_us": get(lab, "handoff_p99_us"),
                "same_worker_reacquire": get(lab, "same_worker_reacquire"),
                "fairness_min_over_max": get(lab, "fairness_min_over_max"),
                "lost_updates": get(lab, "lost_updates"),
                "errors": get(lab, "errors"),
            }
        if "w4_w1_5_" + s in runs:
            r["w4"] = {
                "w1_p50_us_5": get("w4_w1_5_" + s, "p50_us"),
                "w1_p50_us_1": get("w4_w1_1_" + s, "p50_us"),
                "w1_latency_ratio_5_to_1": ratio(
                    get("w4_w1_5_" + s, "p50_us"),
                    get("w4_w1_1_" + s, "p50_us")),
                "w2_acq_per_s_5": get("w4_w2_5_" + s, "acq_per_s"),
                "w2_acq_per_s_1": get("w4_w2_1_" + s, "acq_per_s"),
                "w2_ratio_5_to_1": ratio(get("w4_w2_5_" + s, "acq_per_s"),
                                         get("w4_w2_1_" + s, "acq_per_s")),
                "lost_updates": (get("w4_w2_5_" + s, "lost_updates") or 0) +
                (get("w4_w2_1_" + s, "lost_updates") or 0),
                # The raw floors over the same servers (parallel fan-out,
                # waiting for every server), measured in the same process
                # as the W1 lines: the machine's share of the ratio.
                "raw_w1_p50_us_5": get("w4_w1_5_%s_floor" % s, "p50_us"),
                "raw_w1_p50_us_1": get("w4_w1_1_%s_floor" % s, "p50_us"),
                "raw_w1_latency_ratio_5_to_1": ratio(
                    get("w4_w1_5_%s_floor" % s, "p50_us"),
                    get("w4_w1_1_%s_floor" % s, "p50_us")),
                "w1_5_vs_raw_5": ratio(get("w4_w1_5_" + s, "p50_us"),
                                       get("w4_w1_5_%s_floor" % s, "p50_us")),
                "raw_w1_redis_cpu_us_per_cycle_5": get(
                    "w4_w1_5_%s_floor" % s, "redis_cpu_us_per_cycle"),
                "w1_redis_cpu_us_per_cycle_5": get(
                    "w4_w1_5_" + s, "redis_cpu_us_per_cycle"),
                "w1_redis_cpu_us_per_cycle_1": get(
                    "w4_w1_1_" + s, "redis_cpu_us_per_cycle"),
                "w1_cycles_per_s_5": get("w4_w1_5_" + s, "cycles_per_s"),
                "raw_w1_cycles_per_s_5": get("w4_w1_5_%s_floor" % s,
                                             "cycles_per_s"),
                "w2_fairness_5": get("w4_w2_5_" + s,
                                     "fairness_min_over_max"),
                "w2_errors_5": get("w4_w2_5_" + s, "errors"),
                "w2_redis_cpu_us_per_acq_5": get("w4_w2_5_" + s,
                                                 "redis_cpu_us_per_acq"),
                "raw_w2_acq_per_s_5": get("w4_w2_5_raw_floor", "acq_per_s"),
                "raw_w2_ratio_5_to_1": ratio(
                    get("w4_w2_5_raw_floor", "acq_per_s"),
                    get("w4_w2_1_raw_floor", "acq_per_s")),
            }
        else:
            r["w4"] = {"skipped": "not run (bench/run --only)"}
        # W2 in rounds: the ratio is the median of the rounds' ratios,
        # each round against the floor run right before it.
        dl, fl = rounds.get("w2_" + s, []), rounds.get("w2_%s_floor" % s, [])
        per = [ratio(a.get("acq_per_s"), b.get("acq_per_s"))
               for a, b in zip(dl, fl)]
        per = [x for x in per if x is not None]
        if per:
            r["w2"]["ratio_to_floor"] = round(statistics.median(per), 3)
            r["w2"]["ratio_rounds"] = per
        by[s] = r

    # Targets, met or missed, never asserted.
    targets = []

    def target(name, value, ok):
        targets.append({"target": name, "value": value,
                        "met": bool(ok) if value is not None else None})

    best = max((by[s]["w2"]["ratio_to_floor"] or 0) for s in by) if by \
        else None
    target("W2 best strategy >= 1.1x floor", best,
           best is not None and best >= 1.1)
    for s in by:
        r = by[s]
        v = r["w1"]["ratio_to_floor"]
        target("W1 %s >= 0.95x floor" % s, v, v is not None and v >= 0.95)
        v = r["w2"]["ratio_to_floor"]
        target("W2 %s >= 0.9x floor" % s, v, v is not None and v >= 0.9)
        v = r["w2"]["requests_per_acq"]
        target("W2 %s <= 4.5 requests/acq" % s, v,
               v is not None and v <= 4.5)
        a, b = r["w3"]["requests_per_acq"], r["w2"]["requests_per_acq"]
        v = ratio(a, b)
        target("W3 %s requests/acq <= 1.1x W2" % s, v,
               v is not None and v <= 1.1)
        v = ratio(r["w3"]["redis_cpu_us_per_acq"],
                  r["w2"]["redis_cpu_us_per_acq"])
        target("W3 %s Redis CPU/acq <= 1.1x W2" % s, v,
               v is not None and v <= 1.1)
        v = r["w2"]["fairness_min_over_max"]
        target("W2 %s fairness >= 0.9" % s, v, v is not None and v >= 0.9)
        if "w1_latency_ratio_5_to_1" in r["w4"]:
            v = r["w4"]["w1_latency_ratio_5_to_1"]
            target("W4 %s 5-node W1 latency <= 1.3x 1-node" % s, v,
                   v is not None and v <= 1.3)
            v = r["w4"]["w2_ratio_5_to_1"]
            target("W4 %s 5-node W2 >= 0.5x 1-node" % s, v,
                   v is not None and v >= 0.5)
            # Not a target: what the raw fan-out itself costs here. When
            # it alone is above 1.3, no Redlock can meet the one above on
            # this machine.
            v = r["w4"].get("raw_w1_latency_ratio_5_to_1")
            targets.append({"target": "W4 raw floor 5-node/1-node W1 "
                            "latency (machine, info)", "value": v,
                            "met": None})
    lost = sum(d.get("lost_updates", 0) for d in runs.values()
               if d.get("mode") == "w2")
    target("lost updates == 0", lost, lost == 0)

    peers = peer_results(runs, rounds)
    table = side_by_side(by, peers)
    targets18 = issue18_targets(by, peers)

    results = {}
    if DEFAULT in by:
        results.update(json.loads(json.dumps(by[DEFAULT])))
    results["default_strategy"] = DEFAULT
    if "w1_tls" in runs:
        results["w1_tls"] = {
            "cycles_per_s": get("w1_tls", "cycles_per_s"),
            "tcp_cycles_per_s": get("w1_tcp", "cycles_per_s"),
            "p50_us": get("w1_tls", "p50_us"),
            "ratio_to_tcp": ratio(get("w1_tls", "cycles_per_s"),
                                  get("w1_tcp", "cycles_per_s")),
        }
    results["by_strategy"] = by
    results["targets"] = targets
    results["peers"] = peers
    results["side_by_side"] = table
    prims = prims_results(runs, rounds,
                          _dig(by, DEFAULT, "floor", "w2_acq_per_s"))
    results["prims"] = prims
    results["holds"] = {
        "k%d" % d["holds"]: {k: v for k, v in d.items() if k != "label"}
        for d in runs.values() if d.get("mode") == "holds"}
    def w1_vs_floor(label):
        """A W1 row next to its paired floor (LABEL_floor), or None."""
        d, f = runs.get(label), runs.get(label + "_floor") or {}
        if not d:
            return None
        return {
            "cycles_per_s": d.get("cycles_per_s"),
            "ratio_to_floor": ratio(d.get("cycles_per_s"),
                                    f.get("cycles_per_s")),
            "redis_cpu_us_per_cycle": d.get("redis_cpu_us_per_cycle"),
            "redis_commands_per_cycle": d.get("redis_commands_per_cycle"),
            "floor_redis_cpu_us_per_cycle": f.get("redis_cpu_us_per_cycle"),
        }

    nr = w1_vs_floor("w1_noretention")
    if nr:
        results["w1_no_retention"] = nr
        v = nr["redis_commands_per_cycle"]
        target("W1 fair without fence retention <= 6 Redis commands/cycle",
               v, v is not None and v <= 6)
    # Issue 31: the string layout's W1, without and with fence retention,
    # each against its own paired floor.
    for lab in ("w1_string", "w1_string_retained"):
        sr = w1_vs_floor(lab)
        if not sr:
            continue
        results[lab] = sr
        if lab == "w1_string":
            v = sr["redis_commands_per_cycle"]
            target("W1 string layout without fence retention <= 6 Redis "
                   "commands/cycle", v, v is not None and v <= 6)
            r = sr["ratio_to_floor"]
            target("W1 string layout >= 0.92 x floor", r,
                   r is not None and r >= 0.92)
    # Keyed "none"/"default" for locks (as before), "<kind>_none" /
    # "<kind>_default" for permits and readers.
    results["memory"] = {
        (("" if d.get("kind", "lock") == "lock" else d["kind"] + "_") +
         ("none" if d["fence_retention_ms"] == 0 else "default")):
        {k: v for k, v in d.items() if k != "label"}
        for d in runs.values() if d.get("mode") == "memory"}
    for key, what in (("none", "names"), ("permit_none", "semaphores"),
                      ("reader_none", "read-write locks (a reader each)")):
        none = results["memory"].get(key)
        if none:
            target("memory: %d %s without fence retention, used_memory "
                   "back within 5 MB" % (none["names"], what),
                   none["delta_mb"], abs(none["delta_mb"]) <= 5.0)
    results["targets_issue18"] = targets18
    pyb, targets32 = python_binding(runs, rounds)
    if pyb:
        results["python_binding"] = pyb
        results["targets_issue32"] = targets32
    gateway, targets30 = gateway_results(gw_lines)
    if gateway:
        results["gateway"] = gateway
        results["targets_issue30_gateway"] = targets30
    results["peer_versions"] = versions
    results["all_lost_updates"] = lost
    results["mode"] = "quick" if quick == "1" else "full"
    results["machine"] = machine
    with open(out_path, "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")

    # The table.
    def fmt(v, p=2):
        if v is None:
            return "-"
        if isinstance(v, float):
            return ("%%.%df" % p) % v
        return str(v)

    print("dlock benchmark (%s mode; %s)" % (results["mode"], machine))
    print()
    for k, d in sorted(results["holds"].items()):
        print("holds %s: client CPU per acquire + release %s us with them "
              "held, %s / %s us with none (before / after): cost_ratio %s"
              % (k, fmt(d["cpu_us_per_cycle_held"]),
                 fmt(d["cpu_us_per_cycle_none"]),
                 fmt(d["cpu_us_per_cycle_after"]), fmt(d["cost_ratio"], 3)))
    if results["holds"]:
        print()
    if results.get("w1_no_retention"):
        d = results["w1_no_retention"]
        print("W1 fair without fence retention: %s cycles/s (%s x floor), "
              "Redis CPU %s us/cycle (floor %s), %s Redis commands/cycle"
              % (fmt(d["cycles_per_s"], 0), fmt(d["ratio_to_floor"]),
                 fmt(d["redis_cpu_us_per_cycle"], 1),
                 fmt(d["floor_redis_cpu_us_per_cycle"], 1),
                 fmt(d["redis_commands_per_cycle"], 1)))
        print()
    for k, d in sorted(results["memory"].items()):
        print("memory %s (fence retention %d ms): %d names acquired and "
              "released once: used_memory %+.2f MB, %s bytes per name, "
              "keys %d -> %d"
              % (k, d["fence_retention_ms"], d["names"], d["delta_mb"],
                 fmt(d["bytes_per_name"], 1), d["keys_before"],
                 d["keys_after"]))
    if results["memory"]:
        print()
    if gateway:
        print("gateway (issue 30; dlock-gateway vs the same HTTP server "
              "on raw hiredis async):")
        for shape in ("k1000", "k10000", "dup"):
            g = gateway.get(shape, {})
            dl, fl = g.get("dlock", {}), g.get("floor", {})
            print("  %-6s throughput %s vs %s req/s (x%s), decision p50 "
                  "%s vs %s us, p99 %s vs %s us (x%s), client CPU %s vs %s "
                  "us/req, Redis CPU %s vs %s us/req, %s conn/server, "
                  "double processed %s"
                  % (shape, fmt(dl.get("throughput"), 0),
                     fmt(fl.get("throughput"), 0),
                     fmt(g.get("ratio_to_floor"), 3),
                     fmt(dl.get("decision_p50_us"), 0),
                     fmt(fl.get("decision_p50_us"), 0),
                     fmt(dl.get("decision_p99_us"), 0),
                     fmt(fl.get("decision_p99_us"), 0),
                     fmt(g.get("p99_ratio_to_floor"), 3),
                     fmt(dl.get("client_cpu_us_per_req")),
                     fmt(fl.get("client_cpu_us_per_req")),
                     fmt(dl.get("redis_cpu_us_per_req")),
                     fmt(fl.get("redis_cpu_us_per_req")),
                     fmt(dl.get("conns_per_server")),
                     fmt(dl.get("double_processed"))))
        for tg in targets30:
            print("  %-55s %-8s %s" % (tg["target"], fmt(tg["value"], 3),
                  {True: "met", False: "MISSED", None: "-"}[tg["met"]]))
        print()
    print("floors (raw hiredis, one client): W1 paired with each strategy "
          "in one process; W2 (4 round trips/cycle) right before it:")
    for s in by:
        fl = by[s]["floor"]
        print("  before %-6s W1 %s cycles/s (p50 %s us, p99 %s us); "
              "W2 %s acq/s" % (s, fmt(fl["w1_cycles_per_s"], 0),
                               fmt(fl["w1_p50_us"], 1),
                               fmt(fl["w1_p99_us"], 1),
                               fmt(fl["w2_acq_per_s"], 0)))
    print()
    hdr = ("%-7s %9s %7s %7s %6s | %-3s %8s %6s %7s %8s %8s %9s %5s %4s | "
           "%5s %5s")
    print(hdr % ("strat", "W1 cyc/s", "p50us", "p99us", "x flr",
                 "W", "acq/s", "x flr", "req/acq", "cpu/acq", "ho p50",
                 "ho p99us", "fair", "lost", "W4lat", "W4thr"))
    for s in by:
        r = by[s]
        for i, w in enumerate(("w2", "w3")):
            x = r[w]
            if i == 0:
                left = (s, fmt(r["w1"]["cycles_per_s"], 0),
                        fmt(r["w1"]["p50_us"], 1), fmt(r["w1"]["p99_us"], 1),
                        fmt(r["w1"]["ratio_to_floor"]))
                w4 = (fmt(r["w4"].get("w1_latency_ratio_5_to_1")),
                      fmt(r["w4"].get("w2_ratio_5_to_1")))
            else:
                left = ("", "", "", "", "")
                w4 = ("", "")
            print(hdr % (left + (w.upper(), fmt(x["acq_per_s"], 0),
                                 fmt(x["ratio_to_floor"]),
                                 fmt(x["requests_per_acq"]),
                                 fmt(x["redis_cpu_us_per_acq"], 1),
                                 fmt(x["handoff_p50_us"], 0),
                                 fmt(x["handoff_p99_us"], 0),
                                 fmt(x["fairness_min_over_max"]),
                                 fmt(x["lost_updates"])) + w4))
    for s in by:
        rr = by[s]["w2"].get("ratio_rounds")
        if rr and len(rr) > 1:
            print("W2 %-6s rounds: %s x floor (median %s); mean hold %s us, "
                  "mean handoff %s us" % (
                      s, " ".join(fmt(x) for x in rr),
                      fmt(by[s]["w2"]["ratio_to_floor"]),
                      fmt(by[s]["w2"].get("hold_mean_us"), 0),
                      fmt(by[s]["w2"].get("handoff_mean_us"), 0)))
    for s in by:
        w4 = by[s]["w4"]
        if "raw_w1_latency_ratio_5_to_1" in w4:
            print("W4 %-6s raw fan-out floor: W1 p50 5-node %s us / 1-node "
                  "%s us = %s; dlock 5-node W1 p50 = %s x the raw 5-node "
                  "floor" % (s, fmt(w4["raw_w1_p50_us_5"], 0),
                             fmt(w4["raw_w1_p50_us_1"], 0),
                             fmt(w4["raw_w1_latency_ratio_5_to_1"]),
                             fmt(w4["w1_5_vs_raw_5"])))
            print("          Redis CPU per W1 cycle, 5 servers summed (one "
                  "CPU): raw %s us, dlock %s us (dlock 1-node: %s us)" % (
                      fmt(w4.get("raw_w1_redis_cpu_us_per_cycle_5"), 0),
                      fmt(w4.get("w1_redis_cpu_us_per_cycle_5"), 0),
                      fmt(w4.get("w1_redis_cpu_us_per_cycle_1"), 0)))
    if any("raw_w2_ratio_5_to_1" in by[s]["w4"] for s in by):
        v = next(by[s]["w4"]["raw_w2_ratio_5_to_1"] for s in by
                 if "raw_w2_ratio_5_to_1" in by[s]["w4"])
        print("W4 raw floor, one client doing W2's cycle: 5-node/1-node "
              "acq/s = %s" % fmt(v))
    if "w1_tls" in results:
        t = results["w1_tls"]
        print()
        print("W1 over TLS: %s cycles/s = %s x TCP (%s cycles/s)" % (
            fmt(t["cycles_per_s"], 0), fmt(t["ratio_to_tcp"]),
            fmt(t["tcp_cycles_per_s"], 0)))
    print()
    print("W2 = 8 processes, W3 = 64; x flr = ratio to the floor; ho = "
          "handoff latency; fair = min/max acquisitions per process;")
    print("W4lat = 5-node/1-node W1 p50 latency; W4thr = 5-node/1-node W2 "
          "acq/s")
    errs = ["%s: %d" % (k, d["errors"]) for k, d in sorted(runs.items())
            if d.get("errors")]
    if errs:
        print()
        print("failed acquires/releases (an acquire gives up after a 10 s "
              "wait): " + ", ".join(errs))
    print()
    print("targets:")
    for t in targets:
        state = ("info" if "info" in t["target"] else
                 {True: "met", False: "MISSED", None: "n/a"}[t["met"]])
        print("  %-6s %-42s %s" % (state, t["target"], fmt(t["value"], 3)))

    print_prims(prims)

    print()
    print("side by side (peers: %s; a peer's W1 and W2 run in rounds, each "
          "right after a floor run of its own, x = the median of the rounds' "
          "ratios; dlock's W1 is paired with its floor):" % (
              versions or "none"))
    print()
    for row in table:
        print("| " + " | ".join(row) + " |")
        if row is table[0]:
            print("|" + " --- |" * len(row))
    print()
    print("targets (issue 18):")
    for t in targets18:
        state = {True: "met", False: "MISSED", None: "n/a"}[t["met"]]
        print("  %-6s %-58s %s" % (state, t["target"], fmt(t["value"], 3)))

    if pyb:
        print()
        print("the Python binding vs redis-py's Lock (same server, same "
              "run; x = median of the rounds' ratios):")
        for w, e in sorted(pyb.items()):
            k = "cycles_per_s" if w == "w1" else "acq_per_s"
            print("  %s: binding %s, redis-py %s, x %s%s" % (
                w.upper(), num(e.get("binding_" + k)),
                num(e.get("redis_py_" + k)), fmt(e.get("ratio"), 2),
                "" if w == "w1" else ", fairness %s vs %s" % (
                    fmt(e.get("binding_fairness"), 3),
                    fmt(e.get("redis_py_fairness"), 3))))
        print("targets (issue 32):")
        for t in targets32:
            state = {True: "met", False: "MISSED", None: "n/a"}[t["met"]]
            print("  %-6s %-58s %s" % (state, t["target"],
                                        fmt(t["value"], 3)))

    # gnuplot: CDF of handoff latency per strategy, W2 and W3.
    series = []
    for w in ("w2", "w3"):
        for s in by:
            vals = []
            for path in glob.glob("%s/handoff_%s_%s.txt" % (work, w, s)) + \
                    glob.glob("%s/handoff_%s_%s@*.txt" % (work, w, s)):
                with open(path) as f:
                    vals += [float(x) for x in f if x.strip()]
            if not vals:
                continue
            vals.sort()
            n = len(vals)
            step = max(1, n // 2000)
            cdf = "%s/cdf_%s_%s.dat" % (work, w, s)
            with open(cdf, "w") as f:
                for i in range(0, n, step):
                    f.write("%g %g\n" % (max(vals[i], 0.5), (i + 1) / n))
                f.write("%g 1\n" % max(vals[-1], 0.5))
            series.append((cdf, "%s %s (%d procs, n=%d)" % (
                w.upper(), s, 8 if w == "w2" else 64, n),
                1 if w == "w2" else 2))
    with open(work + "/handoff.gp", "w") as f:
        f.write('set terminal png size 1000,600 noenhanced\n')
        f.write('set output "%s/handoff.png"\n' % work)
        f.write('set title "dlock handoff latency CDF (release returns in '
                'one process -> next acquire returns in another)"\n')
        f.write('set xlabel "handoff latency (us, log scale)"\n')
        f.write('set ylabel "fraction of handoffs"\n')
        f.write('set logscale x\nset grid\nset key bottom right\n')
        f.write('set yrange [0:1]\n')
        if series:
            f.write("plot " + ", ".join(
                '"%s" using 1:2 with lines dt %d lw 2 title "%s"' % (
                    p, dt, t) for p, t, dt in series) + "\n")
        else:
            f.write('set label "no handoffs measured" at graph 0.4,0.5\n'
                    'plot 2 notitle\n')


if __name__ == "__main__":
    main()
