#!/usr/bin/env bash
# libman.sh - docs/libdlock.3 is clean under `mandoc -Tlint` and stays in
# sync with include/dlock.h: every function declared with DLOCK_EXPORT is in
# NAME and has a .Fn prototype in the SYNOPSIS, every status code of
# DLOCK_STATUS_LIST is an item (.It Dv DLOCK_<NAME>) of RETURN VALUES, and
# every dlock_* function the page names with .Nm or .Fn exists in the
# header.
#
# Needs only DLOCK_SRC (the repository root), not the tool, so it does not
# source common.bash: `DLOCK_SRC=. bash tests/cli/libman.sh`.
set -u

: "${DLOCK_SRC:?DLOCK_SRC must be the repository root}"
man=$DLOCK_SRC/docs/libdlock.3
hdr=$DLOCK_SRC/include/dlock.h
lhdr=$DLOCK_SRC/include/dlock_loop.h
T=$(mktemp -d "${TMPDIR:-/tmp}/dlock-cli-libman-XXXXXX")
trap 'rm -rf "$T"' EXIT
failures=0
checks=0

fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

command -v mandoc >/dev/null || {
    echo "FATAL: mandoc is not installed" >&2
    exit 1
}
for f in "$man" "$hdr"; do
    [ -f "$f" ] || {
        echo "FATAL: $f is missing" >&2
        exit 1
    }
done

. "$DLOCK_SRC/tests/cli/manlint.bash"
man_lint "$man"

# Exported functions: "DLOCK_EXPORT <type> [*]name(" at the start of a line.
sed -n 's/^DLOCK_EXPORT .*[ *]\([a-z_][a-z0-9_]*\)(.*/\1/p' "$hdr" "$lhdr" |
    sort -u >"$T/funcs"
checks=$((checks + 1))
if [ "$(wc -l <"$T/funcs")" -ge 20 ]; then
    echo "ok: dlock.h exports $(wc -l <"$T/funcs") functions"
else
    fail "found only $(wc -l <"$T/funcs") DLOCK_EXPORT functions in dlock.h"
fi
# Each one is in NAME (.Nm) and has its prototype in SYNOPSIS (.Fn NAME
# with its arguments, or "void").
sed -n '/^\.Sh SYNOPSIS/,/^\.Sh DESCRIPTION/p' "$man" >"$T/synopsis"
while read -r fn; do
    checks=$((checks + 1))
    if grep -qE "^\.Fn $fn (\"|void\$)" "$T/synopsis" &&
        grep -qE "^\.Nm $fn( |\$)" "$man"; then
        echo "ok: $fn is documented"
    else
        fail "function $fn of dlock.h is not in docs/libdlock.3 (.Nm in NAME, .Fn prototype in SYNOPSIS)"
    fi
done <"$T/funcs"

# Functions the page shows must exist: no invented API.
grep -oE '^\.(Fn|Nm) dlock_[a-z0-9_]+' "$man" | awk '{print $2}' |
    sort -u >"$T/man-funcs"
while read -r fn; do
    checks=$((checks + 1))
    if grep -qx "$fn" "$T/funcs"; then
        echo "ok: $fn of the page is in dlock.h"
    else
        fail "docs/libdlock.3 names $fn, which dlock.h does not export"
    fi
done <"$T/man-funcs"

# Status codes: the X(NAME, value, "text") lines of DLOCK_STATUS_LIST.
sed -n '/^#define DLOCK_STATUS_LIST/,/^$/p' "$hdr" |
    sed -n 's/^ *X(\([A-Z_][A-Z0-9_]*\), *-\{0,1\}[0-9].*/\1/p' >"$T/codes"
checks=$((checks + 1))
if [ "$(wc -l <"$T/codes")" -ge 10 ]; then
    echo "ok: DLOCK_STATUS_LIST has $(wc -l <"$T/codes") codes"
else
    fail "found only $(wc -l <"$T/codes") codes in DLOCK_STATUS_LIST"
fi
while read -r code; do
    checks=$((checks + 1))
    # In RETURN VALUES as a list item (".It Dv DLOCK_NAME").
    if grep -qE "^\.It Dv DLOCK_$code\$" "$man"; then
        echo "ok: DLOCK_$code is documented"
    else
        fail "status DLOCK_$code is not an item (.It Dv) of docs/libdlock.3"
    fi
done <"$T/codes"

if [ "$failures" -gt 0 ]; then
    echo "$failures of $checks checks failed" >&2
    exit 1
fi
echo "all $checks checks passed"
