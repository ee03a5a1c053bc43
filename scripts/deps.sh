#!/usr/bin/env bash
# deps.sh [EXTRA_PACKAGE...] - install what a fresh Debian 12 machine lacks
# to build, test, benchmark and demo dlock.
#
# Idempotent and quiet: when every package is installed it prints nothing
# and touches nothing (no `apt-get update`). Otherwise it says which
# packages are missing, runs `apt-get update` once and installs them
# non-interactively. Works as root; as another user it uses sudo when
# sudo is there, and fails with a clear message when it is not.
#
# Extra package names on the command line are installed the same way
# (e.g. `scripts/deps.sh nftables iproute2` from a chaos script).
# `scripts/deps.sh --list` prints the package list, one a line, and
# installs nothing (scripts/check-commands.py reads it).
#
# redis-server: Debian's package starts a system service on port 6379 when
# it is installed. Our tests never use it (every test server runs on its
# own free loopback port in a temp dir, see tests/fixtures/redis.sh), and
# while installing we ask invoke-rc.d not to start services at all (a
# temporary /usr/sbin/policy-rc.d answering 101, unless one is already
# there), so a fresh machine does not get one either.
set -euo pipefail

packages=(
    build-essential cmake pkg-config
    libhiredis-dev libcmocka-dev libssl-dev libuv1-dev libevent-dev
    redis-server redis-tools openssl
    mandoc gnuplot-nox
    clang libclang-rt-14-dev valgrind clang-format
    procps util-linux coreutils python3
    manpages manpages-dev
    nftables iproute2
    file
    python3-pytest python3-pytest-asyncio python3-pip python3-setuptools
    python3-wheel
)
# bench/run's peers: redis-py's Lock (Debian's python3-redis, for
# /usr/bin/python3) and node-redlock, whose node_modules bench/run installs
# with `npm ci` from bench/peers/package-lock.json. node and npm come from
# Debian. The list is the same on every machine; what counts as already
# there is not only the package: a nodesource nodejs (also named nodejs)
# ships its own npm and conflicts with Debian's, so `npm` counts as there
# when the installed nodejs package provides the command (provided below).
# scripts/check-commands.py judges the same list: the npm command passes
# whether package npm or package nodejs owns it, both being listed.
packages+=(python3-redis nodejs npm)
if [ "${1:-}" = --list ]; then
    printf '%s\n' "${packages[@]}"
    exit 0
fi
packages+=("$@")

installed() {
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = \
        installed ]
}

# provided PKG: true when a listed package's command is already there
# from another listed package (only npm: a nodesource nodejs ships it).
provided() {
    [ "$1" = npm ] && installed nodejs &&
        { dpkg-query -S /usr/bin/npm /bin/npm 2>/dev/null || true; } |
        grep -q '^nodejs:'
}

missing=()
for p in "${packages[@]}"; do
    installed "$p" || provided "$p" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null; then
    echo "deps.sh: no apt-get: install by hand: ${missing[*]}" >&2
    exit 1
fi

sudo=()
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null; then
        sudo=(sudo -n)
    else
        echo "deps.sh: not root and no sudo: install ${missing[*]}" >&2
        exit 1
    fi
fi

echo "deps.sh: installing ${missing[*]}" >&2

policy=/usr/sbin/policy-rc.d
made_policy=0
cleanup() {
    if [ "$made_policy" = 1 ]; then
        "${sudo[@]}" rm -f "$policy"
    fi
}
trap cleanup EXIT
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# dlock scripts/deps.sh: no service starts\nexit 101\n' |
        "${sudo[@]}" tee "$policy" >/dev/null
    "${sudo[@]}" chmod 755 "$policy"
    made_policy=1
fi

export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
run() {
    if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive "$@" \
        >>"$log" 2>&1 </dev/null; then
        echo "deps.sh: failed: $*" >&2
        tail -n 30 "$log" >&2
        rm -f "$log"
        exit 1
    fi
}
run apt-get update -q
run apt-get install -y -q --no-install-recommends "${missing[@]}"
rm -f "$log"

still=()
for p in "${missing[@]}"; do
    installed "$p" || provided "$p" || still+=("$p")
done
if [ ${#still[@]} -ne 0 ]; then
    echo "deps.sh: still missing after install: ${still[*]}" >&2
    exit 1
fi
echo "deps.sh: done" >&2
