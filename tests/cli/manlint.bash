# manlint.bash - the man-page checks that judge our pages, not the machine:
# sourced by manpage.sh and libman.sh (not named *.sh, so CTest does not
# run it). Needs DLOCK_SRC, a scratch dir T, and the caller's fail() and
# checks counter.
#
# `mandoc -Tlint` remarks on every .Xr whose page the machine lacks
# ("referenced manual not found: Xr fork 2"), and without a mandoc.db
# (Debian uses man-db) on every one it has ("outdated mandoc.db lacks
# fork(2) entry"). Both depend on which manuals happen to be installed, so
# both are dropped, and every .Xr is judged by one rule instead: it names
# one of our pages in docs/, or a page listed in
# tests/cli/external-manpages.txt with the Debian 12 package that ships it.
# Where that package is installed (scripts/deps.sh installs all of them),
# the entry is checked against the package's own file list, so a wrong
# entry fails on any machine that has the package. A reference to a page
# that is in neither place fails everywhere.

MAN_EXTERNAL=$DLOCK_SRC/tests/cli/external-manpages.txt

# man_ref_ok NAME SECTION: the rule above. Prints why on failure.
man_ref_ok() {
    local name=$1 sec=$2 pkg files
    [ -f "$DLOCK_SRC/docs/$name.$sec" ] && return 0
    pkg=$(awk -v n="$name" -v s="$sec" \
        '$1 == n && $2 == s { print $3; exit }' "$MAN_EXTERNAL")
    if [ -z "$pkg" ]; then
        echo "$name($sec) is neither in docs/ nor in" \
            "tests/cli/external-manpages.txt"
        return 1
    fi
    # Not installed here: the list is trusted (and checked where it is).
    files=$(dpkg-query -L "$pkg" 2>/dev/null) || return 0
    if grep -qE "/man/man$sec/$name\.$sec(\.gz)?\$" <<<"$files"; then
        return 0
    fi
    echo "$name($sec): package $pkg is installed but does not ship it"
    return 1
}

# man_lint PAGE: mandoc -Tlint without the machine's remarks, then every
# .Xr of PAGE by man_ref_ok. Counts one check for each.
man_lint() {
    local page=$1 rel=${1#"$DLOCK_SRC"/} st name sec why bad=0
    mandoc -Tlint "$page" >"$T/lint" 2>&1
    st=$?
    grep -vE 'STYLE: referenced manual not found: Xr |outdated mandoc\.db lacks ' \
        "$T/lint" >"$T/lint.kept"
    checks=$((checks + 1))
    # Exit status 1 is STYLE, 2 WARNING: clean only when every remark was
    # one of the dropped ones.
    if [ "$st" -gt 2 ] || [ -s "$T/lint.kept" ]; then
        fail "mandoc -Tlint $rel (status $st):"
        cat "$T/lint.kept" >&2
    else
        echo "ok: mandoc -Tlint $rel is clean"
    fi
    checks=$((checks + 1))
    while read -r name sec; do
        if ! why=$(man_ref_ok "$name" "$sec"); then
            fail "$rel: .Xr $name $sec: $why"
            bad=1
        fi
    done < <(sed -n 's/^\.Xr \([^ ]*\) \([0-9][a-z]*\).*/\1 \2/p' "$page" |
        sort -u)
    [ "$bad" = 1 ] || echo "ok: every .Xr of $rel names a page that exists"
}

# man_text PAGE: the page as plain text. mandoc -Tascii marks bold and
# underline by overstriking (c BS c, _ BS c); dropping every "char BS"
# pair leaves the text (what `col -b` does, without needing col).
man_text() {
    mandoc -Tascii "$1" 2>/dev/null | sed 's/.\x08//g'
}
