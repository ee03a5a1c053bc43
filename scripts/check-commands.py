#!/usr/bin/env python3
"""check-commands.py - every command our scripts call is installed by
scripts/deps.sh or is part of a minimal Debian 12.

A fresh Debian 12 (debootstrap --variant=minbase) has the packages of
priority "required" (and the Essential ones), plus apt. Everything else a
test, the demo or a benchmark runs must come from scripts/deps.sh's list
(or from a package that one of those depends on). A command this machine
happens to have for another reason (`col` from bsdextrautils, say) works
here and fails there; this check finds it here.

How: the shell scripts of the repository (scripts/, tests/, bench/, .ci/)
are read line by line; the first word of every simple command (after |,
&&, ||, ;, $(, `, if/then/do/..., and behind wrappers such as timeout,
nice, env, taskset, setarch, `ip netns exec`, `command -v`) is a
candidate. Candidates that are shell builtins, keywords or functions
defined in the scripts are skipped; the rest are looked up in the
standard PATH (/usr/local/sbin ... /bin, not a user's shims). A word
that is not an executable there is not judged (config lines in here-docs,
words in messages). An executable is judged by the Debian package that
owns it: it passes when that package is required/Essential, or in the
dependency closure of deps.sh's list; it fails otherwise, and so does an
executable no package owns (installed by hand). git is taken as given:
the repository was cloned with it. C programs exec only
bash and redis-server (tests/harness/harness.c), both covered here.

Exit 0 when every command passes; otherwise each offender is printed with
file:line and the package that owns it, and the exit status is 1.
"""
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Words that put another command after them (with how many of their own
# arguments to skip when they are not options).
WRAPPERS = {
    "timeout": 1, "nice": 0, "env": 0, "exec": 0, "sudo": 0, "nohup": 0,
    "taskset": 1, "setarch": 1, "stdbuf": 0, "xargs": 0, "time": 0,
    "command": 0, "builtin": 0, "unshare": 0, "chrt": 1, "ionice": 0,
}
SEPARATORS = re.compile(r"\|\||&&|;;|[|;&`]|\$\(|\(|\)|\{|\}")
KEYWORDS = {"if", "then", "else", "elif", "fi", "do", "done", "while",
            "until", "for", "in", "case", "esac", "function", "select",
            "!", "[[", "]]", "{", "}", "time", "coproc"}


def shell_files():
    out = []
    for top in ("scripts", "tests", "bench", ".ci", "examples"):
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            if "node_modules" in d or "/build" in d:
                continue
            for f in files:
                p = os.path.join(d, f)
                if f.endswith((".sh", ".bash")):
                    out.append(p)
                    continue
                try:
                    with open(p, "rb") as fh:
                        first = fh.readline()
                except OSError:
                    continue
                if first.startswith(b"#!") and (b"bash" in first or
                                                b"/sh" in first):
                    out.append(p)
    return sorted(out)


def strip_comment(line):
    # A '#' that starts a word starts a comment (good enough: ${#x} and
    # $# are not at a word start).
    m = re.search(r"(^|\s)#", line)
    return line[:m.start()] if m else line


def first_words(segment):
    """The command words of one simple command, wrappers unwrapped."""
    words = segment.split()
    found = []
    i = 0
    while i < len(words):
        w = words[i]
        if w in ("for", "select", "case"):
            break  # a loop variable or a case word follows, no command
        if w in KEYWORDS or re.match(r"^[A-Za-z_][A-Za-z0-9_]*(\[.*\])?\+?=",
                                     w) or w.startswith(("<", ">", "2>")):
            i += 1
            continue
        if w == "ip" and words[i + 1:i + 3] == ["netns", "exec"]:
            found.append(w)
            i += 4  # ip netns exec NS CMD
            continue
        found.append(w)
        if w in WRAPPERS:
            i += 1
            while i < len(words) and words[i].startswith("-"):
                i += 1
                if w in ("nice", "ionice", "taskset") and i < len(words) \
                        and re.match(r"^[0-9,-]+$", words[i]):
                    i += 1
            i += WRAPPERS[w]
            continue
        break
    return found


def candidates(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    funcs = set(re.findall(r"^\s*(?:function\s+)?([A-Za-z_][\w-]*)\s*\(\)",
                           text, re.M))
    funcs |= set(re.findall(r"^\s*function\s+([A-Za-z_][\w-]*)", text,
                            re.M))
    found = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = strip_comment(raw)
        for seg in SEPARATORS.split(line):
            for w in first_words(seg):
                w = w.strip("\"'")
                if re.match(r"^[a-z][a-z0-9._+-]*$", w):
                    found.append((w, n))
    return funcs, found


def builtins():
    out = subprocess.run(["bash", "-c", "compgen -b; compgen -k"],
                         capture_output=True, text=True).stdout
    return set(out.split())


def deps_closure():
    pkgs = subprocess.run(["bash", os.path.join(ROOT, "scripts/deps.sh"),
                           "--list"], capture_output=True, text=True,
                          check=True).stdout.split()
    out = subprocess.run(
        ["apt-cache", "depends", "--recurse", "--no-recommends",
         "--no-suggests", "--no-conflicts", "--no-breaks", "--no-replaces",
         "--no-enhances"] + pkgs, capture_output=True, text=True).stdout
    closure = set(pkgs)
    for line in out.splitlines():
        line = line.strip()
        if not line:
            continue
        if ":" in line and not line.startswith("<"):
            line = line.split(":", 1)[1].strip()
            if line.startswith("<"):
                continue
        closure.add(line.split(":")[0])
    return pkgs, closure


def owner(path):
    # With merged /usr, dpkg knows /bin/sleep where the PATH finds
    # /usr/bin/sleep (and the other way round).
    tries = []
    for p in (path, os.path.realpath(path)):
        tries += [p, p[4:] if p.startswith("/usr/") else "/usr" + p]
    for p in tries:
        r = subprocess.run(["dpkg-query", "-S", p], capture_output=True,
                           text=True)
        for line in r.stdout.splitlines():
            # "pkg[:arch][, pkg2]: /path"; skip "diversion by dash ..."
            if r.returncode == 0 and not line.startswith("diversion "):
                return line.split(": ", 1)[0].split(",")[0].split(":")[0]
    return None


def in_minbase(pkg):
    r = subprocess.run(["dpkg-query", "-W", "-f=${Priority} ${Essential}",
                        pkg], capture_output=True, text=True)
    pri, _, ess = r.stdout.partition(" ")
    return pri == "required" or ess == "yes"


def main():
    if not shutil.which("dpkg-query") or not shutil.which("apt-cache"):
        print("check-commands: needs dpkg-query and apt-cache (Debian)")
        return 1
    # git fetched the repository: a machine running these scripts has it.
    skip = builtins() | {"git"}
    pkgs, closure = deps_closure()
    verdict = {}
    bad = []
    nfiles = ncmds = 0
    for path in shell_files():
        nfiles += 1
        funcs, found = candidates(path)
        rel = os.path.relpath(path, ROOT)
        for word, line in found:
            if word in skip or word in funcs:
                continue
            if word not in verdict:
                exe = shutil.which(word, path=STD_PATH)
                if exe is None:
                    verdict[word] = None  # not a command here: not judged
                else:
                    pkg = owner(exe)
                    if pkg is None:
                        verdict[word] = (False, "no package owns " + exe)
                    elif pkg in closure:
                        verdict[word] = (True, pkg + " (deps.sh)")
                    elif in_minbase(pkg):
                        verdict[word] = (True, pkg + " (minimal Debian)")
                    else:
                        verdict[word] = (False, "from package " + pkg +
                                         ", which is neither in deps.sh's"
                                         " list nor in a minimal Debian")
                    ncmds += 1
            v = verdict[word]
            if v is not None and not v[0]:
                bad.append("%s:%d: %s: %s" % (rel, line, word, v[1]))
    for word in sorted(w for w, v in verdict.items() if v):
        print("ok: %-16s %s" % (word, verdict[word][1]))
    for b in bad:
        print("FAIL: " + b)
    print("%d scripts, %d commands, %d calls not covered by deps.sh "
          "(%d packages listed)" % (nfiles, ncmds, len(bad), len(pkgs)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
