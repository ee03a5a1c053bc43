#!/usr/bin/env python3
"""bench/topology.py RAW OUT MACHINE QUICK ROUNDS - the table and the JSON
of bench/topology: for each comparison, per round the ratio of a side to
its reference side, the median of those ratios, the medians of the raw
figures, and met/MISSED against the target where there is one (never
asserted). RAW holds dlock_bench's JSON lines, each labelled
NAME_SIDE@ROUND by bench/topology."""

import json
import statistics
import sys

raw, out, machine, quick, nrounds = sys.argv[1:6]
runs = {}
for line in open(raw):
    line = line.strip()
    if line:
        d = json.loads(line)
        runs[d["label"]] = d

TARGET = 0.95
# name, metric, reference side, side, what, target (None: information)
COMPARISONS = [
    ("sent_w1", "cycles_per_s", "standalone", "sentinel",
     "Sentinel W1 cycles/s vs the master as redis://", TARGET),
    ("sent_w2", "acq_per_s", "standalone", "sentinel",
     "Sentinel W2 acq/s (8 procs, fair) vs redis://", TARGET),
    ("wait1r", "cycles_per_s", "nowait", "wait1",
     "W1 --wait-replicas 1, 1 replica, vs no WAIT", None),
    ("wait2r", "cycles_per_s", "nowait", "wait1",
     "W1 --wait-replicas 1, 2 replicas, vs no WAIT", None),
    ("wait2r", "cycles_per_s", "nowait", "wait2",
     "W1 --wait-replicas 2, 2 replicas, vs no WAIT", None),
    ("cl_w1", "cycles_per_s", "standalone", "cluster",
     "Cluster (3 masters) W1 cycles/s vs standalone", TARGET),
    ("cl_w2", "acq_per_s", "standalone", "cluster",
     "Cluster W2 acq/s (8 procs, fair) vs standalone", TARGET),
    ("cl_keys", "acq_per_s", "standalone", "cluster",
     "Cluster KEYS acq/s (8 procs) vs standalone", TARGET),
]


def rounds_of(name, ref, side, key):
    """Per round: (reference, side, side/reference)."""
    rows = []
    for r in range(1, int(nrounds) + 1):
        a = runs.get("%s_%s@%d" % (name, ref, r), {}).get(key)
        b = runs.get("%s_%s@%d" % (name, side, r), {}).get(key)
        if a and b:
            rows.append((a, b, b / a))
    return rows


def med(name, side, key):
    v = [runs[k].get(key) for k in runs
         if k.startswith("%s_%s@" % (name, side))
         and runs[k].get(key) is not None]
    return statistics.median(v) if v else None


res = {"machine": machine, "quick": quick == "1", "rounds": int(nrounds),
       "comparisons": []}
for name, key, ref, side, what, target in COMPARISONS:
    rows = rounds_of(name, ref, side, key)
    if not rows:
        continue
    ratio = statistics.median(x[2] for x in rows)
    c = {"name": name, "what": what, "metric": key, "reference": ref,
         "side": side, "reference_median": statistics.median(
             x[0] for x in rows),
         "side_median": statistics.median(x[1] for x in rows),
         "ratio_median": round(ratio, 3),
         "ratios": [round(x[2], 3) for x in rows], "target": target,
         "target_met": (ratio >= target) if target is not None else None}
    for k in ("p50_us", "p99_us", "redis_cpu_us_per_acq",
              "redis_cpu_us_per_cycle", "requests_per_acq",
              "handoff_p50_us", "fairness_min_over_max"):
        a, b = med(name, ref, k), med(name, side, k)
        if a is not None and b is not None:
            c[k] = {"reference": a, "side": b}
    if key == "cycles_per_s":
        # W1's cycles/s is 1 / mean cycle time, which a few stalls of a
        # loaded machine move; the median latency per round is steadier.
        p = rounds_of(name, ref, side, "p50_us")
        if p:
            # reference p50 / side p50: like cycles/s, above 1 is faster
            c["p50_ratio_median"] = round(statistics.median(
                x[0] / x[1] for x in p), 3)
            c["p50_ratios"] = [round(x[0] / x[1], 3) for x in p]
    if name == "cl_keys":
        c["per_master"] = [runs[k].get("per_master") for k in sorted(runs)
                           if k.startswith("cl_keys_cluster@")]
    res["comparisons"].append(c)
res["lost_updates"] = sum(d.get("lost_updates") or 0 for d in runs.values())
res["errors"] = sum(d.get("errors") or 0 for d in runs.values())
res["hung"] = sum(d.get("hung") or 0 for d in runs.values())
with open(out, "w") as f:
    json.dump(res, f, indent=2)
    f.write("\n")


def fmt(v, p=0):
    return "-" if v is None else ("%%.%df" % p) % v


table = [("comparison", "reference", "side", "ratio (median)", "rounds",
          "target")]
for c in res["comparisons"]:
    t = c["target"]
    table.append((c["what"], fmt(c["reference_median"]),
                  fmt(c["side_median"]), "%.3f" % c["ratio_median"],
                  " ".join("%.2f" % x for x in c["ratios"]),
                  "info" if t is None else
                  ("met" if c["target_met"] else "MISSED") +
                  " (>= %.2f)" % t))
w = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
print("bench/topology (%s mode; %s)" % ("quick" if quick == "1" else "full",
                                       machine))
print()
for r in table:
    print("  ".join(col.ljust(w[i]) for i, col in enumerate(r)).rstrip())
print()
for c in res["comparisons"]:
    if "p50_us" in c:
        print("%-48s p50 %s -> %s us (ratio by p50 %s; rounds %s), "
              "p99 %s -> %s us" % (
                  c["what"], fmt(c["p50_us"]["reference"], 1),
                  fmt(c["p50_us"]["side"], 1),
                  fmt(c.get("p50_ratio_median"), 3),
                  " ".join("%.2f" % x for x in c.get("p50_ratios", [])),
                  fmt(c["p99_us"]["reference"], 1),
                  fmt(c["p99_us"]["side"], 1)))
    if "redis_cpu_us_per_acq" in c:
        print("%-48s Redis CPU/acq %s -> %s us (all masters)" % (
            c["what"], fmt(c["redis_cpu_us_per_acq"]["reference"], 1),
            fmt(c["redis_cpu_us_per_acq"]["side"], 1)))
    if c.get("per_master"):
        print("%-48s acquisitions per master, by round: %s" % (
            "", " ".join("/".join(str(x) for x in pm)
                         for pm in c["per_master"] if pm)))
print()
print("lost updates: %d, failed acquires/releases: %d, hung workers: %d" % (
    res["lost_updates"], res["errors"], res["hung"]))
