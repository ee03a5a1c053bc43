#!/usr/bin/env bash
# topo_driver.sh sentinel|cluster - a Sentinel deployment or a Redis Cluster
# for the Python tests, made by tests/fixtures/topology.sh (the CLI tests'
# fixture: loopback, free ports, own temp dirs) and driven over stdin.
#
# Prints one line once the deployment is ready:
#   sentinel: "ready MASTER_PORT S1,S2,S3 D1,D2,D3" (sentinel ports, data
#             node ports)
#   cluster:  "ready P1,P2,P3,P4,P5,P6"
# or "fail WHY" and exits 1. Then reads one command a line and answers one
# line, "ok [VALUE]" or "fail":
#   master               the master's port (Sentinel)
#   failover             SENTINEL FAILOVER, waits for the new master; ok PORT
#   settle               waits until the deployment is settled again
#   key_port KEY         the port of KEY's slot owner (Cluster)
#   cluster_failover KEY CLUSTER FAILOVER on a replica of KEY's master;
#                        waits for the swap; ok NEW_MASTER_PORT
#   quit (or end of input) stops every server and exits.
# The servers are started with this shell as their owner (redis.sh --owner),
# so they are killed when it exits for any reason.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=/dev/null
. "$here/../../../tests/fixtures/topology.sh"

kind=${1:-}
join() {
    local IFS=,
    echo "$*"
}
case $kind in
sentinel)
    trap topo_sentinel_stop EXIT
    topo_sentinel_start 2>/dev/null || {
        echo "fail the sentinel deployment did not start"
        exit 1
    }
    echo "ready $(topo_sentinel_master_port)" \
        "$(join "${TOPO_SENTINEL_PORTS[@]}")" "$(join "${TOPO_DATA_PORTS[@]}")"
    ;;
cluster)
    trap topo_cluster_stop EXIT
    topo_cluster_start 2>/dev/null || {
        echo "fail the cluster did not start"
        exit 1
    }
    echo "ready $(join "${TOPO_CLUSTER_PORTS[@]}")"
    ;;
*)
    echo "fail usage: topo_driver.sh sentinel|cluster"
    exit 1
    ;;
esac

answer() {
    local out
    if out=$("$@" 2>/dev/null); then
        echo "ok $out"
    else
        echo "fail"
    fi
}

cluster_failover() {
    local m r
    m=$(topo_cluster_key_port "$1") || return 1
    r=$(topo_cluster_replica_port "$m") || return 1
    topo_cluster_failover "$r" >/dev/null || return 1
    echo "$r"
}

while read -r cmd arg; do
    case $cmd in
    master) answer topo_sentinel_master_port ;;
    failover) answer topo_sentinel_failover ;;
    settle)
        if [ "$kind" = sentinel ]; then
            answer topo_sentinel_settle
        else
            answer topo_cluster_wait_ok
        fi
        ;;
    key_port) answer topo_cluster_key_port "$arg" ;;
    cluster_failover) answer cluster_failover "$arg" ;;
    quit) break ;;
    *) echo "fail unknown command $cmd" ;;
    esac
done
