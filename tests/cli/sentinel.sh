#!/usr/bin/env bash
# sentinel.sh - the tool on a Sentinel deployment (tests/fixtures/topology.sh:
# a master, 2 replicas, 3 sentinels): -s redis+sentinel://... takes the lock
# on the master; status reports the topology; a malformed URL and an
# unknown master name are usage errors (64), a redis:// URL at a replica is
# refused (69, nothing written there); --wait-replicas grants with the
# replicas up and fails (69, no lock left) with them stopped, and a failed
# extend --wait-replicas gives its extension back; a run -w rides out too
# few replicas and a master just killed (issue 29 item 19).
. "$(dirname "$0")/common.bash"
. "$DLOCK_SRC/tests/fixtures/topology.sh"

trap 'topo_sentinel_stop; cleanup' EXIT

topo_sentinel_start || {
    echo "FATAL: sentinel deployment did not start" >&2
    exit 1
}
m=$(topo_sentinel_master_port)
S="redis+sentinel://127.0.0.1:${TOPO_SENTINEL_PORTS[0]},127.0.0.1:${TOPO_SENTINEL_PORTS[1]},127.0.0.1:${TOPO_SENTINEL_PORTS[2]}/$TOPO_SENTINEL_NAME"
replica=''
for p in "${TOPO_DATA_PORTS[@]}"; do
    [ "$p" != "$m" ] && replica=$p
done

expect_status 0 "run through the sentinels" \
    "$DLOCK_BIN" run -s "$S" -n sk -- sh -c "redis-cli -p $m EXISTS 'dlock:{sk}'"
check "the lock was on the master while COMMAND ran" file_has "$T/out" 1
check "and is gone after" key_gone "$m" 'dlock:{sk}'

expect_status 0 "status through the sentinels" "$DLOCK_BIN" status -s "$S" sk
check "status names the master's role" file_has "$T/out" "role master"
check "status counts the replicas" file_has "$T/out" "replicas 2"
check "status shows min-replicas-to-write" \
    file_has "$T/out" "min-replicas-to-write 0"
check "status shows what each sentinel says" \
    file_has "$T/out" "sentinel 127.0.0.1:${TOPO_SENTINEL_PORTS[0]}: master"
check "status warns: replicas without --wait-replicas" \
    file_has "$T/out" "warning:  .*no wait_replicas"
expect_status 0 "status --json" "$DLOCK_BIN" status --json -s "$S" sk
check "the JSON has the topology" file_has "$T/out" '"topology":\["client: Sentinel'

expect_status 64 "a malformed sentinel URL" \
    "$DLOCK_BIN" run -s "redis+sentinel://127.0.0.1:0/x" -n sk -- true
check "says what is wrong" file_has "$T/err" "bad port"
expect_status 64 "an unknown master name" \
    "$DLOCK_BIN" run -s "redis+sentinel://127.0.0.1:${TOPO_SENTINEL_PORTS[0]}/nosuch" -n sk -- true
check "says no sentinel knows it" file_has "$T/err" "no sentinel knows a master"
# Issue 29 item 16: a redis+cluster:// seed that is a sentinel: a usage
# error saying what to write (before: 69 after ~2 s, "CLUSTER SHARDS: ERR
# unknown command").
expect_status 64 "a redis+cluster:// seed that is a sentinel" \
    "$DLOCK_BIN" run -s "redis+cluster://127.0.0.1:${TOPO_SENTINEL_PORTS[0]}" \
    -n sk -- true
check "says it is a sentinel and what to use" \
    file_has "$T/err" "is a Redis Sentinel.*redis+sentinel://"
expect_status 64 "--wait-replicas not a number" \
    "$DLOCK_BIN" run -s "$S" --wait-replicas x -n sk -- true

rcli "$replica" CONFIG SET replica-read-only no >/dev/null
expect_status 77 "a redis:// URL at a replica" \
    "$DLOCK_BIN" run -s "redis://127.0.0.1:$replica" -n rk -- true
check "says it is a replica" file_has "$T/err" "is a replica"
check "nothing written on the replica" key_gone "$replica" 'dlock:{rk}'
rcli "$replica" CONFIG SET replica-read-only yes >/dev/null

expect_status 0 "--wait-replicas 2 with both replicas up" \
    "$DLOCK_BIN" run -s "$S" --wait-replicas 2 -n wk -- true
pids=()
for i in "${!TOPO_DATA_PORTS[@]}"; do
    if [ "${TOPO_DATA_PORTS[$i]}" != "$m" ]; then
        pids+=("$(cat "${TOPO_DATA_DIRS[$i]}/redis.pid")")
    fi
done
"$DLOCK_BIN" acquire -s "$S" -l 60 ek >"$T/eowner" 2>"$T/acq.err" ||
    fail "dlock acquire ek: $(cat "$T/acq.err")"
kill -STOP "${pids[@]}"
expect_status 69 "DLOCK_WAIT_REPLICAS=2 with the replicas stopped" \
    env DLOCK_WAIT_REPLICAS=2 "$DLOCK_BIN" run -s "$S" --wait-replicas-timeout 0.3 -n wk -- true
check "says too few replicas acknowledged" file_has "$T/err" "given back"
# Issue 29 item 13: a failed extend --wait-replicas gives the extension
# back (the master keeps the lease it had, not the unreplicated one).
expect_status 69 "extend --wait-replicas 1 with the replicas stopped" \
    "$DLOCK_BIN" extend -s "$S" --wait-replicas 1 --wait-replicas-timeout 0.3 \
    -l 900 --owner "$(cut -d' ' -f1 "$T/eowner")" ek
kill -CONT "${pids[@]}"
check "extend says too few replicas" file_has "$T/err" "too few replicas"
ettl=$(rcli "$m" PTTL 'dlock:{ek}')
check "the extension was given back (PTTL $ettl ms, at most 60 s)" \
    test "$ettl" -gt 0 -a "$ettl" -le 60000
check "no lock left on the master" key_gone "$m" 'dlock:{wk}'

# Issue 29 item 19: a wait rides out too few replicas (each attempt's
# grant given back) and a master just killed, within -w. Before: 69 at once.
topo_sentinel_settle || fail "the deployment did not settle"
kill -STOP "${pids[@]}"
timeout -k 5 60 "$DLOCK_BIN" run -s "$S" --wait-replicas 2 \
    --wait-replicas-timeout 0.3 -w 30 wr -- true >"$T/wr.out" 2>"$T/wr.err" &
wr=$!
sleep 1.5
kill -CONT "${pids[@]}"
wait "$wr"
got=$?
check "--wait-replicas -w 30 waits until the replicas are back (got $got)" \
    test "$got" = 0
check "and said it tries again" file_has "$T/wr.err" "trying again"
for i in "${!TOPO_DATA_PORTS[@]}"; do
    [ "${TOPO_DATA_PORTS[$i]}" = "$m" ] || continue
    bash "$TOPO_FIXTURES/redis.sh" kill9 "${TOPO_DATA_DIRS[$i]}"
done
expect_status 0 "run -w 30 right after kill -9 of the master" \
    "$DLOCK_BIN" run -s "$S" -w 30 dk -- true
check "it said it tries again" file_has "$T/err" "trying again"
nm=$(topo_sentinel_wait_master "$m")
check "a replica was promoted ($nm, not $m)" test -n "$nm" -a "$nm" != "$m"

finish
