#!/usr/bin/env bash
# gateway.sh - the de-duplication gateway (examples/gateway, issue 30)
# against a real redis-server, with two gateway processes on it:
#  - wait mode: concurrent duplicates spread over both gateways, one
#    processing per key, every duplicate gets the same body; a later
#    request gets the stored body;
#  - a backend slower than the lease: the lease is renewed, the duplicate
#    on the other gateway still waits for the one processing;
#  - reject mode: one 200, the other concurrent duplicates 409;
#  - no Idempotency-Key: 400; malformed requests: 400 (or 501 for
#    Transfer-Encoding) and the connection closed, the gateway still up;
#    keep-alive with pipelined requests answered in order;
#  - the load generator over both gateways with 10 % duplicates: no key
#    processed twice (and, as a check of the checker, two gateways with
#    different prefixes, which do not act as one, are caught);
#  - (dlock) a gateway stalled past its lease while processing: its
#    result is not stored and not answered 200; the new holder's is.
# GATEWAY_IMPL (dlock or floor) picks the gateway's de-duplication:
# cli.gateway.dlock runs libdlock's event-loop API, cli.gateway.floor the
# raw-hiredis floor of the benchmark.
. "$(dirname "$0")/../common.bash"

: "${GATEWAY_BIN:?GATEWAY_BIN must be the path of dlock-gateway}"
: "${LOAD_BIN:?LOAD_BIN must be the path of dlock-gateway-load}"
IMPL=${GATEWAY_IMPL:-dlock}
CLIENT=(timeout -k 5 60 python3 "$(dirname "$0")/client.py")

start_redis

# gateway NAME ARGS...: start a gateway on a free port; its address in
# ADDR_<NAME>, its pid in PID_<NAME>, its stderr in $T/NAME.err.
gateway() {
    local name=$1 addr
    shift
    spawn_bg_err "$T/$name.err" "$GATEWAY_BIN" --impl "$IMPL" \
        --listen 127.0.0.1:0 -s "$REDIS_URL" "$@" >"$T/$name.out"
    printf -v "PID_$name" '%s' "$BG"
    wait_until 10 file_has "$T/$name.out" listening || {
        fail "gateway $name did not start: $(cat "$T/$name.err")"
        finish
    }
    addr=$(sed -n 's/^listening //p' "$T/$name.out")
    printf -v "ADDR_$name" '%s' "$addr"
}

# stop_gateway NAME: SIGTERM, it must exit 0; its processings count is
# added to PROCESSED.
PROCESSED=0
stop_gateway() {
    local pid_var=PID_$1 n
    kill -TERM "${!pid_var}"
    wait_pid "${!pid_var}" 30 || fail "gateway $1 did not stop"
    check "gateway $1 exits 0 on SIGTERM (status $WAIT_STATUS)" \
        test "$WAIT_STATUS" = 0
    n=$(sed -n 's/.*stopped; \([0-9]*\) processings.*/\1/p' "$T/$1.err")
    PROCESSED=$((PROCESSED + ${n:-0}))
}

# --- wait mode: 5 keys x 6 concurrent requests over two gateways --------
gateway a --backend-ms 300 --prefix w
gateway b --backend-ms 300 --prefix w
"${CLIENT[@]}" burst "$ADDR_a,$ADDR_b" 6 k1 k2 k3 k4 k5 >"$T/burst" ||
    fail "burst client failed"
check "30 responses" test "$(wc -l <"$T/burst")" = 30
check "all 200" test "$(grep -vc '^k[0-9] 200 ' "$T/burst")" = 0
for k in k1 k2 k3 k4 k5; do
    ids=$(grep "^$k 200 " "$T/burst" |
        sed 's/.*"processing_id":"\([^"]*\)".*/\1/' | sort -u | wc -l)
    check "$k processed once (distinct processing ids: $ids)" test "$ids" = 1
    bodies=$(grep "^$k " "$T/burst" | sort -u | wc -l)
    check "$k: every duplicate got the same body" test "$bodies" = 1
done
first=$(grep '^k1 ' "$T/burst" | head -n 1)
"${CLIENT[@]}" burst "$ADDR_b" 1 k1 >"$T/later"
check "a later request for k1 gets the stored body" \
    test "$(cat "$T/later")" = "$first"

# --- no key, malformed, pipelining --------------------------------------
"${CLIENT[@]}" raw "$ADDR_a" 'GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n' >"$T/r"
check "no Idempotency-Key: 400" test "$(head -n 1 "$T/r")" = 400
bad=(
    'GARBAGE\r\n\r\n'
    'GET / HTTP/1.1\r\nno colon here\r\n\r\n'
    'GET / HTTP/9.9\r\nIdempotency-Key: x\r\n\r\n'
    'GET / HTTP/1.1\r\nIdempotency-Key: a\r\nIdempotency-Key: b\r\n\r\n'
    'GET / HTTP/1.1\r\nIdempotency-Key: "q"\r\n\r\n'
    'GET / HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n'
    'GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n'
    'GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n'
    '\x00\x01\x02\xff\r\n\r\n'
    'GET / HTTP/1.1\r\n folded\r\n\r\n'
)
for req in "${bad[@]}"; do
    "${CLIENT[@]}" raw "$ADDR_a" "$req" >"$T/r"
    check "malformed '$req': 400 then closed ($(tr '\n' ' ' <"$T/r"))" \
        test "$(tr '\n' ' ' <"$T/r")" = "400 closed "
done
"${CLIENT[@]}" raw "$ADDR_a" 'POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nIdempotency-Key: c\r\n\r\n0\r\n\r\n' >"$T/r"
check "Transfer-Encoding: 501 then closed" \
    test "$(tr '\n' ' ' <"$T/r")" = "501 closed "
"${CLIENT[@]}" raw "$ADDR_a" 'GET /a HTTP/1.1\r\nIdempotency-Key: k1\r\n\r\nGET /b HTTP/1.1\r\n\r\nPOST /c HTTP/1.1\r\nIdempotency-Key: p1\r\nContent-Length: 5\r\n\r\nhelloGET /d HTTP/1.1\r\nIdempotency-Key: k1\r\nConnection: close\r\n\r\n' >"$T/r"
check "pipelined keep-alive requests answered in order" \
    test "$(tr '\n' ' ' <"$T/r")" = "200 400 200 200 closed "
check "gateway a still running after bad input" running "$PID_a"
check "gateway b still running" running "$PID_b"
"${CLIENT[@]}" burst "$ADDR_a" 1 after-bad >"$T/r"
check "gateway a still answers" grep -q '^after-bad 200 ' "$T/r"

# --- the load generator: 10 % duplicates over both gateways -------------
"$LOAD_BIN" -t "$ADDR_a" -t "$ADDR_b" -c 4 -k 200 -n 3000 --dup-pct 10 \
    --run L >"$T/load" 2>"$T/load.err"
st=$?
check "load: exit 0 (status $st: $(cat "$T/load.err"))" test "$st" = 0
check "load: 0 double processing" grep -q '"double_processed":0}' "$T/load"
check "load: every request answered 200" grep -q '"status_200":3000,' "$T/load"
loadkeys=$(sed 's/.*"keys_processed":\([0-9]*\).*/\1/' "$T/load")
stop_gateway a
stop_gateway b
# k1..k5, after-bad, p1 and the load's distinct keys: each processed once.
check "one processing per key over both gateways ($PROCESSED for \
$((7 + loadkeys)) keys)" test "$PROCESSED" = $((7 + loadkeys))

# --- the checker itself: two gateways that do NOT act as one (different
# prefixes) process duplicates twice, and the load generator must say so.
gateway x --backend-ms 50 --prefix x1
gateway y --backend-ms 50 --prefix x2
"$LOAD_BIN" -t "$ADDR_x" -t "$ADDR_y" -c 4 -k 200 -n 2000 --dup-pct 20 \
    --run X >"$T/loadx" 2>/dev/null
st=$?
check "checker: split gateways are caught (exit $st, $(sed \
's/.*"double_processed":\([0-9]*\).*/\1/' "$T/loadx") keys twice)" \
    test "$st" = 3
stop_gateway x
stop_gateway y

# --- a backend slower than the lease: renewed, still one processing -----
gateway c --backend-ms 1200 --lease-ms 300 --prefix s
gateway d --backend-ms 1200 --lease-ms 300 --prefix s
"${CLIENT[@]}" burst "$ADDR_c,$ADDR_d" 2 slow >"$T/slow"
ids=$(sed 's/.*"processing_id":"\([^"]*\)".*/\1/' "$T/slow" | sort -u |
    wc -l)
check "slow backend (4 x the lease): processed once (ids: $ids)" \
    test "$ids" = 1
check "slow backend: both answered 200" \
    test "$(grep -c '^slow 200 ' "$T/slow")" = 2
PROCESSED=0
stop_gateway c
stop_gateway d

# --- a lease lost while processing (dlock only: the floor has no fencing)
# Gateway g takes lost1 and is stopped (SIGSTOP) past its lease; gateway
# h then takes lost1 and processes it; g, resumed, finds its lease lost
# and must neither store its result nor answer it as done (503), so that
# the two clients never see two processings of one key as both done.
# Both layouts: the string layout (the default) stores with
# dlock_loop_fenced_set_release, the hash layout with a fenced read, set
# and release; and the hash layout's load run (one processing per key).
if [ "$IMPL" = dlock ]; then
    for layout in string hash; do
        gateway g --backend-ms 1500 --lease-ms 400 --prefix "l$layout" \
            --layout "$layout"
        gateway h --backend-ms 1500 --lease-ms 400 --prefix "l$layout" \
            --layout "$layout"
        "${CLIENT[@]}" burst "$ADDR_g" 1 lost1 >"$T/lost_g" &
        lost_g=$!
        # g holds it (not still waiting for its request) before it stalls.
        lost1_held() {
            [ "$(rcli "$REDIS_PORT" EXISTS "dlock:{l$layout:dedup:lost1}")" = 1 ]
        }
        wait_until 10 lost1_held || fail "$layout: gateway g did not take lost1"
        kill -STOP "$PID_g"
        sleep 0.8 # g's lease (400 ms) is over
        "${CLIENT[@]}" burst "$ADDR_h" 1 lost1 >"$T/lost_h" &
        lost_h=$!
        sleep 0.3
        kill -CONT "$PID_g"
        wait "$lost_g" "$lost_h"
        check "$layout: lease lost: the stalled gateway answers 503 ($(cut \
-c1-120 "$T/lost_g"))" grep -q '^lost1 503 ' "$T/lost_g"
        check "$layout: lease lost: the new holder answers 200 ($(cut \
-c1-120 "$T/lost_h"))" grep -q '^lost1 200 ' "$T/lost_h"
        "${CLIENT[@]}" burst "$ADDR_g" 1 lost1 >"$T/r"
        check "$layout: lease lost: the stored result is the new holder's" \
            test "$(cat "$T/r")" = "$(cat "$T/lost_h")"
        PROCESSED=0
        stop_gateway g
        stop_gateway h
    done
    gateway m --backend-ms 5 --prefix hl --layout hash
    gateway n --backend-ms 5 --prefix hl --layout hash
    "$LOAD_BIN" -t "$ADDR_m" -t "$ADDR_n" -c 4 -k 200 -n 2000 --dup-pct 10 \
        --run H >"$T/loadh" 2>"$T/loadh.err"
    st=$?
    check "hash layout load: exit 0 (status $st: $(cat "$T/loadh.err"))" \
        test "$st" = 0
    check "hash layout load: 0 double processing" \
        grep -q '"double_processed":0}' "$T/loadh"
    loadkeys=$(sed 's/.*"keys_processed":\([0-9]*\).*/\1/' "$T/loadh")
    PROCESSED=0
    stop_gateway m
    stop_gateway n
    check "hash layout: one processing per key ($PROCESSED for $loadkeys)" \
        test "$PROCESSED" = "$loadkeys"
    # Redlock (3 servers) with the default string layout: notify waits
    # (the string layout refuses fair ones there), the fenced set and the
    # release (the one-script store is for one server).
    url1=$REDIS_URL port1=$REDIS_PORT
    start_redis
    url2=$REDIS_URL
    start_redis
    url3=$REDIS_URL
    REDIS_URL=$url1 REDIS_PORT=$port1
    spawn_bg_err "$T/rl.err" "$GATEWAY_BIN" --impl dlock --listen \
        127.0.0.1:0 -s "$url1" -s "$url2" -s "$url3" --backend-ms 5 \
        --prefix rl >"$T/rl.out"
    PID_rl=$BG
    if wait_until 10 file_has "$T/rl.out" listening; then
        ADDR_rl=$(sed -n 's/^listening //p' "$T/rl.out")
        "$LOAD_BIN" -t "$ADDR_rl" -c 4 -k 100 -n 1000 --dup-pct 10 \
            --run RL >"$T/loadrl" 2>"$T/loadrl.err"
        st=$?
        check "Redlock: load exit 0 (status $st: $(cat "$T/loadrl.err"))" \
            test "$st" = 0
        check "Redlock: every request answered 200" \
            grep -q '"status_200":1000,' "$T/loadrl"
        PROCESSED=0
        stop_gateway rl
    else
        fail "Redlock gateway did not start: $(cat "$T/rl.err")"
    fi
fi

# --- reject mode ---------------------------------------------------------
gateway e --backend-ms 800 --mode reject --prefix r
gateway f --backend-ms 800 --mode reject --prefix r
"${CLIENT[@]}" burst "$ADDR_e,$ADDR_f" 4 r1 r2 >"$T/rej"
for k in r1 r2; do
    check "reject: $k one 200" test "$(grep -c "^$k 200 " "$T/rej")" = 1
    check "reject: $k three 409" test "$(grep -c "^$k 409 " "$T/rej")" = 3
done
"${CLIENT[@]}" burst "$ADDR_f" 1 r1 >"$T/r"
check "reject: a later request gets the stored body" \
    test "$(cat "$T/r")" = "$(grep '^r1 200 ' "$T/rej")"
PROCESSED=0
stop_gateway e
stop_gateway f
check "reject: 2 processings" test "$PROCESSED" = 2

finish
