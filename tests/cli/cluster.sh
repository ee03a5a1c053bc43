#!/usr/bin/env bash
# cluster.sh - the tool on a Redis Cluster (6 nodes, 3 masters + 3
# replicas, tests/fixtures/topology.sh): `dlock run -s redis+cluster://...`
# runs a command under a lock held on the master of its key's slot; 6
# concurrent workers doing read-modify-write increments on 3 keys lose no
# update; DLOCK_SERVERS may hold a cluster URL (its commas are seeds, not
# a Redlock list); `dlock status` reads a lock through the cluster; a
# waiter is woken by the release (sharded pub/sub) long before the
# holder's lease. Bad input and states: a malformed cluster URL, a seed
# that is not in cluster mode and a redis:// URL naming a cluster node
# each exit 64 with a message saying what to write instead.
. "$(dirname "$0")/common.bash"
. "$DLOCK_SRC/tests/fixtures/topology.sh"

trap 'topo_cluster_stop; cleanup' EXIT

topo_cluster_start || {
    echo "FATAL: cluster did not start" >&2
    exit 1
}
P=("${TOPO_CLUSTER_PORTS[@]}")
CURL="redis+cluster://127.0.0.1:${P[5]},127.0.0.1:${P[0]}"
unset DLOCK_SERVERS

# ---- run, and where the lock lives
key_port() { topo_cluster_key_port "$1"; }
expect_status 0 "dlock run through the cluster" \
    "$DLOCK_BIN" run -s "$CURL" cl-a -- sh -c \
    'redis-cli -p "$1" EXISTS "dlock:{cl-a}" >"$2/held"' \
    sh "$(key_port 'dlock:{cl-a}')" "$T"
check "the lock was on the master of its slot while the command ran" \
    [ "$(cat "$T/held")" = 1 ]
check "and is gone after" key_gone "$(key_port 'dlock:{cl-a}')" 'dlock:{cl-a}'
expect_status 7 "the child's exit status comes through" \
    "$DLOCK_BIN" run -s "$CURL" cl-a -- sh -c 'exit 7'

# ---- mutual exclusion across processes and slots
incr='n=$(cat "$1/$2"); sleep 0.002; echo $((n + 1)) >"$1/$2"'
worker() {
    local i k
    for ((i = 0; i < 30; i++)); do
        k=cl-k$((i % 3))
        "$DLOCK_BIN" run -s "$CURL" -w 120 "$k" -- sh -c "$incr" sh "$T" "$k" ||
            echo "worker $1 round $i: status $?" >>"$T/errors"
    done
}
for k in cl-k0 cl-k1 cl-k2; do echo 0 >"$T/$k"; done
pids=()
for w in 1 2 3 4 5 6; do
    spawn_bg worker "$w"
    pids+=("$BG")
done
for p in "${pids[@]}"; do
    wait_pid "$p" 240 || fail "worker $p did not finish in 240 s"
done
check "no dlock run failed" test ! -s "$T/errors"
[ ! -s "$T/errors" ] || head -5 "$T/errors" >&2
for k in cl-k0 cl-k1 cl-k2; do
    check "$k counted every increment (is $(cat "$T/$k"))" \
        [ "$(cat "$T/$k")" = 60 ]
done
slots=$(for k in cl-k0 cl-k1 cl-k2; do topo_cluster_keyslot "dlock:{$k}"; done |
    sort -u | wc -l)
check "the keys are in different slots" [ "$slots" = 3 ]

# ---- DLOCK_SERVERS, status
expect_status 0 "DLOCK_SERVERS with a cluster URL (commas are seeds)" \
    env DLOCK_SERVERS=" $CURL " "$DLOCK_BIN" run -v cl-env -- true
check "verbose says it is a cluster" file_has "$T/err" "Redis Cluster"
check "one server, not a Redlock of two" file_has "$T/err" "server 1 of 1"

"$DLOCK_BIN" acquire -s "$CURL" -l 30 cl-st >"$T/owner" 2>"$T/acq.err" ||
    fail "dlock acquire: $(cat "$T/acq.err")"
expect_status 0 "dlock status through the cluster" \
    "$DLOCK_BIN" status -s "$CURL" cl-st
check "status shows the holder" file_has "$T/out" "$(cut -d' ' -f1 "$T/owner")"
check "status describes the 3 masters, each with its replica" \
    test "$(grep -c 'role master; replicas 1' "$T/out")" = 3
check "status warns of a cluster without WAIT or a lock-delay" \
    file_has "$T/out" "without wait_replicas or a lock-delay"

# ---- dlock list: a lock on every master, whichever node is the seed
# (the node set's one node is the first seed, which holds only its own
# slots' locks).
ls_names=() ls_ports=""
for i in $(seq 1 100); do
    p=$(key_port "dlock:{cl-ls$i}")
    case " $ls_ports " in *" $p "*) continue ;; esac
    ls_ports="$ls_ports $p"
    ls_names+=("cl-ls$i")
    [ "${#ls_names[@]}" = 3 ] && break
done
check "three names on three masters" [ "${#ls_names[@]}" = 3 ]
for k in "${ls_names[@]}"; do
    "$DLOCK_BIN" acquire -s "$CURL" -l 60 "$k" >/dev/null 2>"$T/acq.err" ||
        fail "dlock acquire $k: $(cat "$T/acq.err")"
done
expect_status 0 "dlock list through the cluster" \
    "$DLOCK_BIN" list -s "$CURL" 'cl-ls*'
for k in "${ls_names[@]}"; do
    check "list shows $k (on 127.0.0.1:$(key_port "dlock:{$k}"))" \
        grep -q "^$k  held by" "$T/out"
done
expect_status 0 "dlock list --json through the cluster" \
    "$DLOCK_BIN" list --json -s "$CURL" 'cl-ls*'
check "one JSON line per lock" test "$(grep -c '"kind":"lock"' "$T/out")" = 3

# ---- waking by sharded pub/sub: the holder's lease is 60 s, the wait
# at most 20 s: only the release message can let the waiter in.
spawn_bg "$DLOCK_BIN" run -s "$CURL" -l 60 cl-w -- sleep 1.5
holder=$BG
wait_until 10 [ "$(rcli "$(key_port 'dlock:{cl-w}')" EXISTS 'dlock:{cl-w}')" = 1 ] ||
    fail "the holder did not take cl-w"
expect_status 0 "a waiter gets the lock when the holder exits" \
    "$DLOCK_BIN" run -s "$CURL" -w 20 cl-w -- true
wait_pid "$holder" 30

# ---- issue 29 item 13: a failed extend --wait-replicas gives its
# extension back (the master of the slot keeps the lease it had).
"$DLOCK_BIN" acquire -s "$CURL" -l 60 cl-ext >"$T/eowner" 2>"$T/acq.err" ||
    fail "dlock acquire cl-ext: $(cat "$T/acq.err")"
em=$(key_port 'dlock:{cl-ext}')
er=$(topo_cluster_replica_port "$em")
erpid=''
for i in "${!TOPO_CLUSTER_PORTS[@]}"; do
    [ "${TOPO_CLUSTER_PORTS[$i]}" = "$er" ] &&
        erpid=$(cat "${TOPO_CLUSTER_DIRS[$i]}/redis.pid")
done
check "found the replica of cl-ext's master" [ -n "$erpid" ]
kill -STOP "$erpid"
# (The master itself as the seed: the stopped replica may be a seed of
# $CURL, and a seed that does not answer delays the slot map.)
expect_status 69 "extend --wait-replicas 1 with the slot's replica stopped" \
    "$DLOCK_BIN" extend -s "redis+cluster://127.0.0.1:$em" --wait-replicas 1 \
    --wait-replicas-timeout 0.3 -l 900 --owner "$(cut -d' ' -f1 "$T/eowner")" \
    cl-ext
cp "$T/err" "$T/ext.err"
kill -CONT "$erpid"
check "extend says too few replicas" file_has "$T/ext.err" "too few replicas"
file_has "$T/ext.err" "too few replicas" || sed 's/^/  stderr: /' "$T/ext.err" >&2
ettl=$(rcli "$em" PTTL 'dlock:{cl-ext}')
check "the extension was given back (PTTL $ettl ms, at most 60 s)" \
    test "$ettl" -gt 0 -a "$ettl" -le 60000

# ---- bad input and bad states
expect_status 64 "a malformed cluster URL" \
    "$DLOCK_BIN" run -s "redis+cluster://127.0.0.1:1,,x" k -- true
check "it says what is wrong" file_has "$T/err" "empty seed"
expect_status 64 "a cluster URL beside another server" \
    "$DLOCK_BIN" run -s "$CURL" -s "redis://127.0.0.1:1" k -- true
check "it says so" file_has "$T/err" "must be the only server"

# Issue 29 item 15: a name beginning with '}' has no hash tag in
# <prefix>:{NAME} (Redis hashes "{}" as no tag, the whole key), so its
# keys would fall in different slots: refused in a cluster, with a
# message saying why (before: 69, CROSSSLOT); a '}' further in is fine.
expect_status 64 "a name beginning with '}' in a cluster" \
    "$DLOCK_BIN" run -s "$CURL" -n '}x' -- true
check "it says why" file_has "$T/err" "hash tag"
expect_status 0 "a name with '}' further in" \
    "$DLOCK_BIN" run -s "$CURL" -n 'a}x' -- true

start_redis
expect_status 0 "a name beginning with '}' on one server" \
    "$DLOCK_BIN" run -s "redis://127.0.0.1:$REDIS_PORT" -n '}x' -- true
expect_status 64 "a seed that is not in cluster mode" \
    "$DLOCK_BIN" run -s "redis+cluster://127.0.0.1:$REDIS_PORT" k -- true
check "it says to use redis://" file_has "$T/err" "not in cluster mode"

# A name whose slot is not served by the master we name.
m=$(key_port 'dlock:{cl-a}')
for i in $(seq 1 50); do
    [ "$(key_port "dlock:{cl-p$i}")" != "$m" ] && break
done
expect_status 64 "redis:// naming a cluster node" \
    "$DLOCK_BIN" run -s "redis://127.0.0.1:$m" "cl-p$i" -- true
check "it says to use redis+cluster://" file_has "$T/err" \
    "use redis+cluster://"

finish
