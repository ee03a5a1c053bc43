# shellcheck shell=bash disable=SC2154,SC2034 # seed, work, URLS...: run's; LOGS, WSTRAT...: for run's functions
# tests/chaos/prims.bash - sourced by tests/chaos/run: the scenarios of the
# primitives built on the lock, with their checker (tests/chaos/prims.c,
# built as chaos_prims):
#
#   sem_chaos     5 workers take permits of a semaphore of limit 3 (lease
#                 800 ms, holds up to 300 ms) and write their permit's
#                 token to a fenced resource
#   rw_chaos      3 readers (dlock_rw_acquire_shared) read and 2 writers
#                 (dlock_lock_acquire_ex, writer preference) add one to a
#                 fenced counter
#   multi_chaos   4 workers each take ROUNDS random subsets of the locks
#                 {a,b,c,d}, named in a random order, with
#                 dlock_lock_acquire_all (wait 10 s, watchdog), and add
#                 one to each key's fenced counter
#   elect_chaos   4 campaigners (dlock_campaign, lease 800 ms); a leader
#                 writes "wid:epoch:n" with its epoch to a fenced log every
#                 20..150 ms for a term of 0.3..2.5 s, then resigns; an
#                 observer follows dlock_leader_wait
#
# These four wait with the library's default strategy (fair since issue
# 18); notify_sem_chaos, notify_rw_chaos, notify_multi_chaos and
# notify_elect_chaos are the same with DLOCK_WAIT_NOTIFY (CHAOS_STRATEGY
# in the workers' environment).
#
# One server with appendfsync always. Per round one fault, cycling through
# the six classes from a random start (6 rounds cover each once):
#   kill9      SIGKILL of a worker inside (a replacement starts)
#   flush      SCRIPT FLUSH
#   stop       SIGSTOP of a worker inside (rw: a writer when one is) for
#              lease+0.3..2·lease+0.3 s, then SIGCONT
#   sleep      DEBUG SLEEP 0.1..1.5 s
#   redis      kill -9 of redis-server and a restart (AOF always)
#   clientkill CLIENT KILL TYPE normal and TYPE pubsub
# The checker (chaos_prims check, see prims.c) then proves, from the
# workers' logs: no more holders inside with valid leases than allowed at
# any instant, distinct tokens increasing in the order the grants surely
# had, no stale fenced write accepted, the counters consistent, the
# primitive's liveness (the limit reached; two readers inside at once;
# every worker's rounds done; a new leader within lease + 1.5 s of a
# leader's kill or pause, and never no leader for lease + 4 s); and the
# driver that no hold outlives its lease once the workers are gone.

# The order matters for elect: after a leader's kill or pause comes a
# fault that wakes no waiter (SCRIPT FLUSH, DEBUG SLEEP), so that a new
# leader within the bound is the library's doing (a follower sleeps at
# most the leader's lease left), not that of a reconnect after CLIENT
# KILL or a restart, which wakes every waiter.
prim_faults=(kill9 flush stop sleep redis clientkill)
prim_takeover_ms=1500 # elect: a new leader within lease + this
prim_gap_ms=4000      # elect: never no leader for longer than lease + this

# prim_start KIND WID ROLE SECS: one worker of the current scenario.
prim_start() {
    local kind=$1 wid=$2 role=$3 s=$4 log=$work/$PNAME.w$2.log extra=()
    PLOGS+=("$log")
    case $kind in
    sem) extra=("$PLIMIT") ;;
    rw) extra=("$role") ;;
    multi) extra=("$PROUNDS") ;;
    esac
    "$PB" "$kind" "$URLS" "$PNAME" "$wid" "$log" "$s" "$lease" "$PHOLD" \
        "$PIN" "${extra[@]}" 2>>"$work/$PNAME.stderr" &
    WPIDS+=($!)
    pids+=($!)
    PROLE[wid]=$role
}

# prim_victim [PREFER]: sets VPID and VWID to a worker inside, waiting
# up to 2 s for one; of kind PREFER if one comes within the first second.
# Returns 1 when none.
prim_victim() {
    local k f c
    for ((k = 0; k < 40; k++)); do
        c=("$PIN"/in.?.*)
        [ -z "${1:-}" ] || [ $k -ge 20 ] || c=("$PIN"/in."$1".*)
        if [ -e "${c[0]}" ]; then
            f=${c[RANDOM % ${#c[@]}]}
            VPID=$(cat "$f" 2>/dev/null) VWID=${f##*.}
            # A worker killed inside leaves its file behind.
            [ -n "$VPID" ] && kill -0 "$VPID" 2>/dev/null && return 0
            rm -f "$f"
        fi
        sleep 0.05
    done
    return 1
}

# f_prim ROUND: the round's fault.
f_prim() {
    local cls=${prim_faults[($1 + PRIM_OFF) % ${#prim_faults[@]}]} b
    PRIM_DONE+=("$cls")
    sleep "$(rand_ms 50 300)"
    case $cls in
    kill9)
        prim_victim || {
            echo "   (kill9: nobody inside)"
            return 0
        }
        # (The shell's "Killed" notice, when it reaps the victim, goes
        # with the redirection.)
        {
            "$PB" sig KILL "$VPID" "$PFAULTS"
            b=$?
            wait "$VPID"
        } 2>/dev/null
        [ "$b" = 0 ] || {
            echo "   (kill9: $VPID gone)"
            return 0
        }
        # A replacement keeps the contention up.
        PNEXT=$((PNEXT + 1))
        prim_start "$PKIND" "$PNEXT" "${PROLE[$VWID]:--}" $((secs / 2 + 1))
        ;;
    stop)
        prim_victim w || {
            echo "   (stop: nobody inside)"
            return 0
        }
        "$PB" sig STOP "$VPID" "$PFAULTS" || {
            echo "   (stop: $VPID gone)"
            return 0
        }
        b=$lease
        sleep "$(rand_ms $((b + 300)) $((b * 2 + 300)))"
        "$PB" sig CONT "$VPID" "$PFAULTS"
        ;;
    redis)
        tests/fixtures/redis.sh restart "${DIRS[0]}" >/dev/null 2>&1
        ;;
    sleep)
        rcli "${PORTS[0]}" DEBUG SLEEP "$(rand_ms 100 1500)" >/dev/null &
        pids+=($!)
        sleep "$(rand_ms 100 500)"
        ;;
    clientkill)
        rcli "${PORTS[0]}" CLIENT KILL TYPE normal >/dev/null
        rcli "${PORTS[0]}" CLIENT KILL TYPE pubsub >/dev/null
        ;;
    flush)
        rcli "${PORTS[0]}" SCRIPT FLUSH >/dev/null
        ;;
    esac
    return 0
}

# prim_left KEYS...: once the workers are gone no hold may outlive a
# lease: a lock key's PTTL, and every deadline (server ms) in a
# semaphore's or the readers' zset, at most the lease ahead. Prints a
# VIOLATION per key; returns how many.
prim_left() {
    local k t n=0 now max
    for k in "$@"; do
        case $(rcli "${PORTS[0]}" TYPE "$k") in
        zset)
            now=$(rcli "${PORTS[0]}" EVAL "local t = redis.call('TIME') return t[1] * 1000 + math.floor(t[2] / 1000)" 0)
            max=$(rcli "${PORTS[0]}" EVAL "local r = redis.call('ZRANGEBYSCORE', KEYS[1], '(1000000', '+inf', 'WITHSCORES') return r[#r] or '0'" 1 "$k")
            if [ -n "$now" ] && [ -n "$max" ] && [ "${max%.*}" -gt $((now + lease)) ]; then
                echo "   VIOLATION $k: a holder's deadline $((${max%.*} - now)) ms ahead (lease $lease ms)"
                n=$((n + 1))
            fi
            ;;
        hash)
            t=$(rcli "${PORTS[0]}" PTTL "$k")
            if [ -n "$t" ] && { [ "$t" = -1 ] || [ "$t" -gt "$PBOUND" ]; }; then
                echo "   VIOLATION $k left with PTTL $t (bound $PBOUND ms)"
                n=$((n + 1))
            fi
            ;;
        esac
    done
    return $n
}

# prim_scenario KIND NAME [STRATEGY]: see the top of the file. The
# workers wait by STRATEGY (notify, spin, fair; default: the library's,
# fair).
prim_scenario() {
    local PKIND=$1 PNAME=$2 r v hung=0 out i note='' counters=() keys=() opid=''
    want "$PNAME" || return 0
    local CHAOS_STRATEGY=${3:-}
    export CHAOS_STRATEGY
    local PB=$bdir/chaos_prims WSTRAT=${3:-fair} TRANSPORT=tcp
    local PIN=$work/$PNAME.in PFAULTS=$work/$PNAME.faults PLOGS=() PROLE=()
    local PLIMIT=3 PROUNDS=0 PHOLD=300 PNEXT=4 PBOUND=$lease
    start_servers 1 --aof || {
        report "$PNAME" 0 1 "(server did not start)"
        return
    }
    mkdir -p "$PIN"
    : >"$PFAULTS"
    PRIM_OFF=$((RANDOM % ${#prim_faults[@]})) PRIM_DONE=()
    WPIDS=()
    case $PKIND in
    sem)
        for i in 1 2 3 4 5; do prim_start sem $i - "$secs"; done
        PNEXT=5 keys=("dlock:{$PNAME}")
        ;;
    rw)
        PHOLD=200
        for i in 1 2 3; do prim_start rw $i r "$secs"; done
        for i in 4 5; do prim_start rw $i w "$secs"; done
        # A waiting writer's mark keeps the hash up to a reader's lease
        # + 1 s (docs/design.md).
        PNEXT=5 PBOUND=$((lease + 1000))
        keys=("dlock:{$PNAME}" "dlock:{$PNAME}:r")
        ;;
    multi)
        PHOLD=100 PROUNDS=$((secs * 3))
        for i in 1 2 3 4; do prim_start multi $i - "$secs"; done
        keys=("dlock:{$PNAME-a}" "dlock:{$PNAME-b}" "dlock:{$PNAME-c}" "dlock:{$PNAME-d}")
        ;;
    elect)
        PHOLD=150
        for i in 1 2 3 4; do prim_start elect $i - "$secs"; done
        "$PB" observe "$URLS" "$PNAME" "$work/$PNAME.observer.log" \
            "$((secs + 20))" 2>>"$work/$PNAME.stderr" &
        opid=$!
        pids+=($!)
        PLOGS+=("$work/$PNAME.observer.log")
        keys=("dlock:{$PNAME}")
        ;;
    esac
    sleep 0.5
    for ((r = 1; r <= rounds; r++)); do
        f_prim "$r"
        sleep "$(rand_ms 100 $((secs * 1000 / rounds / 2)))"
    done
    wait_workers || hung=$?
    if [ -n "$opid" ]; then
        kill "$opid" 2>/dev/null
        wait "$opid" 2>/dev/null
    fi
    case $PKIND in
    rw)
        counters=("-=$(fenced_value "${PORTS[0]}" "chaos:{$PNAME}:counter")")
        ;;
    multi)
        for i in a b c d; do
            counters+=("$i=$(fenced_value "${PORTS[0]}" "chaos:{$PNAME-$i}:counter")")
        done
        ;;
    esac
    local lim=$PLIMIT
    if [ "$PKIND" = elect ]; then
        lim=$((lease + prim_takeover_ms))
        counters=("gap=$((lease + prim_gap_ms))")
    fi
    out=$("$PB" check "$PKIND" "$lease" "$lim" "$PROUNDS" "${counters[@]}" \
        -- "${PLOGS[@]}" "$PFAULTS")
    VIOL=$(sed -n 's/.*violations=\([0-9]*\).*/\1/p' <<<"$out" | tail -n1)
    [ -n "$VIOL" ] || VIOL=1
    STATS=$(grep '^stats' <<<"$out")
    grep VIOLATION <<<"$out" | head -n 5 | sed 's/^/   /'
    echo "   $STATS"
    echo "   faults: ${PRIM_DONE[*]}"
    v=$((VIOL + hung))
    prim_left "${keys[@]}" || v=$((v + $?))
    LOGS=("${PLOGS[@]}" "$PFAULTS")
    keep_logs "$PNAME" "$v"
    [ "$(stat_of sections)" != 0 ] || {
        echo "   VIOLATION nobody ever got in"
        v=$((v + 1))
    }
    # A paused holder's writes after its lease: what fencing is for.
    note+=" (late writes $(stat_of late_writes), rejected $(stat_of late_rejected))"
    [ $hung = 0 ] || note+=" hung=$hung"
    report "$PNAME" "$rounds" "$v" "$note"
    stop_servers
}

# short_prim CMD...: in --quick, 6 rounds (one of each fault class) in
# 10 s; otherwise the mode's rounds and seconds.
short_prim() {
    if [ "$mode" = quick ]; then
        local secs=10 rounds=6
        "$@"
    else
        "$@"
    fi
}
