#!/usr/bin/env bash
# manpage.sh - docs/dlock.1 is clean under `mandoc -Tlint` and its
# cross-references exist (tests/cli/manlint.bash: judged by our pages and a
# list, not by the machine's installed manuals), it documents every option
# and command that `dlock --help` prints, and --help shows every option the
# man page documents.
. "$(dirname "$0")/common.bash"

man=$DLOCK_SRC/docs/dlock.1
command -v mandoc >/dev/null || {
    echo "FATAL: mandoc is not installed" >&2
    exit 1
}

. "$(dirname "$0")/manlint.bash"
man_lint "$man"

"$DLOCK_BIN" --help >"$T/help" || fail "dlock --help failed"
man_text "$man" >"$T/man.txt"
check "the man page renders" test -s "$T/man.txt"

# Options as --help lists them: "  -s, --server URL" and "      --json".
grep -oE '^ +(-[a-zA-Z], )?--[a-z][a-z-]*' "$T/help" |
    grep -oE -- '--?[a-zA-Z][a-z-]*' | sort -u >"$T/help-opts"
check "--help lists options" test "$(wc -l <"$T/help-opts")" -ge 20
while read -r opt; do
    checks=$((checks + 1))
    if grep -qE -- "(^|[^a-zA-Z-])$opt([^a-zA-Z-]|\$)" "$T/man.txt"; then
        echo "ok: $opt is in the man page"
    else
        fail "option $opt from --help is not in docs/dlock.1"
    fi
done <"$T/help-opts"

# Options the man page documents (".It Fl x" / ".It Fl \-long") are in
# --help.
sed -n 's/^\.It Fl \(\\-\)\{0,1\}\([a-zA-Z][a-z-]*\).*/\1\2/p' "$man" |
    sed 's/^\\-/--/; /^--/!s/^/-/' | sort -u >"$T/man-opts"
check "the man page documents options" test "$(wc -l <"$T/man-opts")" -ge 10
while read -r opt; do
    checks=$((checks + 1))
    if grep -qE -- "(^|[^a-zA-Z-])$opt([^a-zA-Z-]|\$)" "$T/help"; then
        echo "ok: $opt from the man page is in --help"
    else
        fail "option $opt of docs/dlock.1 is not in --help"
    fi
done <"$T/man-opts"

# Every subcommand, environment variable and exit status.
for cmd in run acquire release extend status; do
    check "--help shows '$cmd'" grep -q "dlock $cmd" "$T/help"
    check "the man page shows '$cmd'" grep -q "dlock $cmd" "$T/man.txt"
done
for var in DLOCK_SERVERS DLOCK_PASSWORD DLOCK_USER DLOCK_CACERT DLOCK_PREFIX \
    DLOCK_OWNER DLOCK_KEY DLOCK_FENCING_TOKEN; do
    check "the man page documents $var" grep -q "$var" "$T/man.txt"
done
for st in 64 69 75 126 127; do
    check "the man page documents exit status $st" \
        grep -qE "^ +$st([[:space:]]|\$)" "$T/man.txt"
done

finish
