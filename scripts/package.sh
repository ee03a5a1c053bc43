#!/usr/bin/env bash
# package.sh [OUTDIR] - build the Debian package and prove it installs.
#
# 1. Configures build/package (Release, prefix /usr), builds it and runs
#    `cpack -G DEB` (cmake/package.cmake): dlock_VERSION_ARCH.deb.
# 2. Checks its contents (`dpkg-deb -c`): the tool, the shared and static
#    library, dlock.h, libdlock.pc, dlock(1) and libdlock(3); and that its
#    Depends names the libraries the tool links (hiredis, libssl).
# 3. Installs it with `dpkg -i` into an empty root (`dpkg --root`, a fresh
#    dpkg database; dependencies are the host's, so --force-depends), then:
#    the installed tool runs (--version, and `dlock run` holding a lock on
#    a throwaway loopback redis-server), and a program compiled with
#    `pkg-config --cflags --libs libdlock` against the installed header and
#    library links and runs.
# The .deb is copied to OUTDIR when given. Exit 0 only when all holds.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd)
build=$root/build/package
out=${1:-}
T=$(mktemp -d "${TMPDIR:-/tmp}/dlock-package-XXXXXX")
server_dir=
cleanup() {
    [ -n "$server_dir" ] && bash tests/fixtures/redis.sh stop "$server_dir" \
        >/dev/null 2>&1
    rm -rf "$T"
}
trap cleanup EXIT

fail() {
    echo "package.sh: FAIL: $*" >&2
    exit 1
}

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX=/usr -DBUILD_TESTING=OFF >"$T/configure.log" 2>&1 ||
    {
        cat "$T/configure.log"
        fail "configure"
    }
cmake --build "$build" -j"${JOBS:-2}" >"$T/build.log" 2>&1 || {
    tail -n 40 "$T/build.log"
    fail "build"
}
rm -f "$build"/dlock_*.deb
(cd "$build" && cpack -G DEB >"$T/cpack.log" 2>&1) || {
    cat "$T/cpack.log"
    fail "cpack"
}
deb=$(ls "$build"/dlock_*.deb)
echo "package: $(basename "$deb")"

dpkg-deb -c "$deb" | awk '{print $NF}' >"$T/contents"
for want in '^\./usr/bin/dlock$' \
    '^\./usr/lib/.*/libdlock\.so\.0\.' \
    '^\./usr/lib/.*/libdlock\.a$' \
    '^\./usr/include/dlock\.h$' \
    '^\./usr/lib/.*/pkgconfig/libdlock\.pc$' \
    '^\./usr/share/man/man1/dlock\.1' \
    '^\./usr/share/man/man3/libdlock\.3'; do
    grep -qE "$want" "$T/contents" || fail "the package lacks $want"
done
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
for want in libhiredis libssl3 libc6; do
    grep -q "$want" <<<"$depends" || fail "Depends lacks $want"
done

# An empty root with only a dpkg database: dpkg -i unpacks there.
R=$T/root
mkdir -p "$R/var/lib/dpkg/info" "$R/var/lib/dpkg/updates"
: >"$R/var/lib/dpkg/status"
: >"$R/var/lib/dpkg/available"
dpkg --root="$R" --force-depends --force-script-chrootless \
    --log=/dev/null -i "$deb" >"$T/dpkg.log" 2>&1 || {
    cat "$T/dpkg.log"
    fail "dpkg -i into an empty root"
}
# (Output taken whole first: with pipefail, grep -q closing the pipe
# early could fail the writer with SIGPIPE, and the check with it.)
st=$(dpkg --root="$R" -s dlock)
grep -q '^Status: install ok installed' <<<"$st" ||
    fail "dpkg does not list dlock as installed in the root"

libdir=$(dirname "$(find "$R/usr/lib" -name 'libdlock.so.0' | head -n1)")
[ -n "$libdir" ] || fail "no libdlock.so.0 installed"
export LD_LIBRARY_PATH=$libdir
ver=$("$R/usr/bin/dlock" --version)
echo "installed: $ver"
# The installed tool resolves the installed library, not the build tree's.
libs=$(ldd "$R/usr/bin/dlock")
grep -q "$libdir/libdlock.so.0" <<<"$libs" ||
    fail "the installed dlock does not load the installed libdlock"

eval "$(bash tests/fixtures/redis.sh start)"
server_dir=$REDIS_DIR
"$R/usr/bin/dlock" run -s "$REDIS_URL" pkg-test -- \
    sh -c 'test -n "$DLOCK_FENCING_TOKEN"' ||
    fail "the installed dlock run did not run the command under the lock"

# A program built from the installed header and pkg-config file.
cat >"$T/app.c" <<'EOF'
#include <dlock.h>
#include <stdio.h>
int main(void) {
    dlock_options o;
    dlock_options_init(&o);
    printf("%s\n", dlock_version());
    return 0;
}
EOF
pcdir=$libdir/pkgconfig
flags=$(PKG_CONFIG_SYSROOT_DIR=$R PKG_CONFIG_PATH=$pcdir \
    pkg-config --cflags --libs libdlock) || fail "pkg-config libdlock"
# shellcheck disable=SC2086
cc -o "$T/app" "$T/app.c" $flags || fail "compile against the installed header"
"$T/app" >/dev/null || fail "a program linked to the installed library"
echo "package.sh: $(basename "$deb") installs, runs and links"
[ -n "$out" ] && cp "$deb" "$out"/
exit 0
