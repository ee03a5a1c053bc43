#!/usr/bin/env python3
"""layers.py - src/'s structure as design.md's code map states it (issue 28).

    python3 layers.py SRC_DIR OBJECT...

OBJECT: the library's object files (CMake's $<TARGET_OBJECTS:dlock_obj>);
those under a .../src/<folder>/<file>.c.o path are read (a generated
source, such as the embedded scripts, is left out). Two views of who uses
whom:

* calls: file A uses file B when A's object has an undefined symbol that
  B's object alone defines (nm: the linker's own view, macros and inline
  functions included);
* includes: a file of SRC_DIR (.c or .h) writes #include "<folder>/...".

Checks, each failure printed with the names that make it:

1. No circle of calls between files anywhere in src/ (the files of a
   folder form layers: src/loop/'s are listed in loop_impl.h).
2. The tier folders only call and include downward: base < io < topo <
   engine, notify (peers: neither uses the other) < hold < api, loop
   (peers). A folder not in the list fails until it is placed.

Exit 0 when every check passes, 1 otherwise (2: bad usage).
"""
import collections
import os
import re
import subprocess
import sys

# The tiers, lowest first; folders on one rank are peers.
RANKS = [["base"], ["io"], ["topo"], ["engine", "notify"], ["hold"],
         ["api", "loop"]]
RANK = {f: i for i, fs in enumerate(RANKS) for f in fs}


def rel(path):
    """src/<folder>/<file>.c of an object file's or a source's path."""
    i = path.rfind("/src/")
    return path[i + 1:][:-2] if path.endswith(".c.o") else path[i + 1:]


def nm(args, objs):
    """(object, symbol name) for each line nm prints for objs with args."""
    out = subprocess.run(["nm", "-A"] + args + objs, capture_output=True,
                         text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        # "OBJECT:ADDRESS TYPE NAME" (an undefined symbol: no address)
        obj, _, rest = line.rpartition(".c.o:")
        if obj and rest.split():
            rows.append((obj + ".c.o", rest.split()[-1]))
    return rows


def call_edges(objs):
    """{file: {file it calls: [symbols]}} over the objects."""
    owner = collections.defaultdict(set)
    for o, s in nm(["--defined-only", "-g"], objs):
        owner[s].add(rel(o))
    edges = collections.defaultdict(lambda: collections.defaultdict(list))
    for o, s in nm(["-u"], objs):
        a = rel(o)
        if len(owner.get(s, ())) == 1:
            b = next(iter(owner[s]))
            if b != a:
                edges[a][b].append(s)
    return edges


def circles(edges):
    """The strongly connected components of more than one file."""
    index, low, stack, on, out = {}, {}, [], set(), []
    nodes = set(edges) | {b for a in edges for b in edges[a]}

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def include_edges(src):
    """{(file, folder it includes): [headers]} over SRC_DIR's files."""
    pat = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([^"]+)"')
    out = collections.defaultdict(list)
    for root, _, files in os.walk(src):
        for name in files:
            if not name.endswith((".c", ".h")):
                continue
            path = os.path.join(root, name)
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    m = pat.match(line)
                    if m:
                        out[(rel(path), m.group(1))].append(m.group(2))
    return out


def tier_fault(a, b):
    """Why folder a may not use folder b, or None when it may."""
    if a == b:
        return None
    for f in (a, b):
        if f not in RANK:
            return "%s is no tier (place it in layers.py's RANKS)" % f
    if RANK[b] < RANK[a]:
        return None
    return "%s may not use %s (%s)" % (
        a, b, "peers" if RANK[a] == RANK[b] else "a tier above it")


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().split("\n\n")[1].strip(), file=sys.stderr)
        return 2
    src = argv[1]
    objs = [o for o in argv[2:] if "/src/" in o and o.endswith(".c.o")]
    bad = 0
    edges = call_edges(objs)
    for comp in circles(edges):
        bad += 1
        print("circle of calls: %s" % ", ".join(comp))
        for a in comp:
            for b in sorted(edges[a]):
                if b in comp:
                    print("  %s -> %s: %s" % (
                        a, b, ", ".join(sorted(edges[a][b])[:6])))
    for a in sorted(edges):
        for b in sorted(edges[a]):
            why = tier_fault(a.split("/")[1], b.split("/")[1])
            if why:
                bad += 1
                print("call %s -> %s: %s (%s)" % (
                    a, b, why, ", ".join(sorted(edges[a][b])[:6])))
    for (a, folder), hs in sorted(include_edges(src).items()):
        why = tier_fault(a.split("/")[1], folder)
        if why:
            bad += 1
            print("include %s -> %s/: %s (%s)" % (a, folder, why,
                                                  ", ".join(hs)))
    nfiles = len({rel(o) for o in objs})
    print("layers: %d object files, %d file pairs that call, %d faults" % (
        nfiles, sum(len(v) for v in edges.values()), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
