#!/usr/bin/env bash
# topology.sh - the shell topology fixtures (tests/fixtures/topology.sh),
# not the tool: the Sentinel deployment fails over on request and after
# kill -9 of the master; the cluster serves keys from their owners, swaps
# roles on CLUSTER FAILOVER, answers ASK while a slot is half moved and
# MOVED once it has moved. The C twin is tested by topology_selftest.c.
. "$(dirname "$0")/common.bash"
. "$DLOCK_SRC/tests/fixtures/topology.sh"

trap 'topo_sentinel_stop; topo_cluster_stop; cleanup' EXIT

# differs A B: A is not empty and not B.
differs() {
    [ -n "$1" ] && [ "$1" != "$2" ]
}

# ---- Sentinel
t0=$SECONDS
topo_sentinel_start || {
    echo "FATAL: sentinel deployment did not start" >&2
    exit 1
}
echo "sentinel deployment up in $((SECONDS - t0)) s"
m0=$(topo_sentinel_master_port)
check "the first data node is the reported master" \
    [ "$m0" = "${TOPO_DATA_PORTS[0]}" ]
check "a write replicates to both replicas" \
    [ "$(rcli "$m0" SET topo:k v1)" = OK ]
check "WAIT sees both replicas" [ "$(rcli "$m0" WAIT 2 10000)" = 2 ]

m1=$(topo_sentinel_failover)
check "SENTINEL FAILOVER moves the master" differs "$m1" "$m0"
check "the new master answers ROLE master" \
    [ "$(rcli "$m1" ROLE | head -n1)" = master ]
check "the data is on the new master" [ "$(rcli "$m1" GET topo:k)" = v1 ]
check "the deployment settles" topo_sentinel_settle
check "the old master is a replica of the new one" \
    [ "$(rcli "$m0" ROLE | sed -n 3p)" = "$m1" ]

m2=$(topo_sentinel_kill_master)
check "kill -9 of the master: a replica is promoted" differs "$m2" "$m1"
check "the promoted one answers ROLE master" \
    [ "$(rcli "$m2" ROLE | head -n1)" = master ]
topo_sentinel_stop

# ---- Cluster
t0=$SECONDS
topo_cluster_start || {
    echo "FATAL: cluster did not start" >&2
    exit 1
}
echo "cluster up in $((SECONDS - t0)) s"
for p in "${TOPO_CLUSTER_PORTS[@]}"; do
    check "node $p: all 16384 slots ok" \
        [ "$(_topo_field "$p" "CLUSTER INFO" cluster_slots_ok)" = 16384 ]
done
check "the spec's example: foo is in slot 12182" \
    [ "$(topo_cluster_keyslot foo)" = 12182 ]
check "hash tags: {user1000}.following hashes user1000" \
    [ "$(topo_cluster_keyslot '{user1000}.following')" = \
    "$(topo_cluster_keyslot user1000)" ]
owner=$(topo_cluster_key_port foo)
check "foo has an owner" [ -n "$owner" ]
check "SET on the owner" [ "$(rcli "$owner" SET foo bar)" = OK ]
check "GET on the owner" [ "$(rcli "$owner" GET foo)" = bar ]

rep=$(topo_cluster_replica_port "$owner")
check "the owner has a replica" [ -n "$rep" ]
check "CLUSTER FAILOVER on the replica" topo_cluster_failover "$rep"
check "the replica now owns foo" [ "$(topo_cluster_key_port foo)" = "$rep" ]
check "the old master replicates from it" \
    [ "$(rcli "$owner" ROLE | sed -n 3p)" = "$rep" ]

to=''
for p in "${TOPO_CLUSTER_PORTS[@]}"; do
    if [ "$p" != "$rep" ] && [ "$(_topo_role "$p")" = master ]; then
        to=$p
        break
    fi
done
rcli "$rep" SET '{foo}2' two >/dev/null
check "migration begins" topo_cluster_migrate_begin 12182 "$to"
check "one key moved" topo_cluster_migrate_keys 1
gone=foo
[ "$(rcli "$rep" EXISTS foo)" = 0 ] || gone='{foo}2'
check "half moved: the source answers ASK for the moved key" \
    [ "$(rcli "$rep" GET "$gone")" = "ASK 12182 127.0.0.1:$to" ]
check "migration finishes" topo_cluster_migrate_finish
check "the target owns the slot" [ "$(topo_cluster_slot_port 12182)" = "$to" ]
check "the source answers MOVED" \
    [ "$(rcli "$rep" GET foo)" = "MOVED 12182 127.0.0.1:$to" ]
check "the target serves both keys" \
    [ "$(rcli "$to" GET foo)/$(rcli "$to" GET '{foo}2')" = bar/two ]
topo_cluster_stop

finish
