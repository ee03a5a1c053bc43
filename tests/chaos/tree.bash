# shellcheck shell=bash disable=SC2154 # seed, work, URLS...: run's
# tests/chaos/tree.bash - sourced by tests/chaos/run: the scenario
# dlock_run_tree, `dlock run` (the real CLI) with a process tree under
# SIGKILL of dlock, lost leases, SIGSTOP of dlock and forwarded signals.
#
# 4 worker loops run `dlock run -l 1 --on-lost term|kill --grace 0.25 KEY
# -- sh -c JOB` again and again on one key (odd workers term, even kill),
# each job a tree of 5 or 6 processes on three levels:
#
#   sh (COMMAND; writes "dlock-pid token" to the holder file)
#   ├── chaos_tree node root
#   ├── sh (subshell)
#   │   ├── chaos_tree node grand
#   │   └── chaos_tree node stubborn   (ignores SIGTERM and SIGINT; lives
#   │                                    1..2 s, past a lease, the others
#   │                                    0.2..1 s)
#   └── chaos_tree node child          (not in the "orphan" shape: there
#                                        COMMAND exits at once and leaves
#                                        the others to dlock, its subreaper)
#
# Every node logs its start and end with its token and pid and, at its
# start, looks through /proc for any live process of another hold (see
# tree.c: processes are told apart by CHAOS_TREE, CHAOS_WID and
# DLOCK_FENCING_TOKEN in their environment). Each worker loop logs the exit
# status of every dlock and any process of its jobs still alive after it.
#
# The driver injects one fault per round, cycling through the five classes
# from a random start so that every class comes up in 5 rounds:
#   kill9  SIGKILL of the dlock that holds the lock: its guard ends the job
#          (SIGTERM, SIGKILL 0.25 s later; kill: SIGKILL at once), well
#          before the lease (1 s, renewed every third: at least ~2/3 s
#          left) runs out and the next holder can start. No overlap
#          allowed.
#   lost   the lock key deleted (atomically with reading its token): the
#          running dlock learns it at its next renewal (a third of the
#          lease) or at the release, and sends its policy to the job; a
#          waiter may get the lock in between. Overlaps with such a hold
#          are what the promise allows: counted apart, not failed. Its job
#          must still be gone when its dlock exits.
#   term, int  SIGTERM / SIGINT to the holding dlock: passed on to the whole
#          group; the stubborn node ignores it and keeps the job, and so
#          the lock, until it ends. No overlap allowed.
#   stop   SIGSTOP of the holding dlock for lease+0.3..2·lease+0.3 s, then
#          SIGCONT: nothing renews the lease and nothing acts for dlock (its
#          guard sees no EOF: dlock is not dead), so its job runs on while
#          the next holder starts. Not a promise of process control (a
#          paused holder is covered by fencing, see holder_sigstop):
#          counted apart, not failed. After SIGCONT dlock finds the lease
#          lost and ends what is left of the job.
#
# Checked (chaos_tree check): no process of one hold alive while another
# hold's job runs, but for the two excused classes; tokens increasing in
# the order the jobs started; no process of a job alive after its dlock
# exited (but for a SIGKILLed dlock, whose guard does the killing); and, by
# the driver, nothing of any job left once the workers are done, and no
# lock key outliving its lease.
#
# CHAOS_DLOCK=PATH in the environment runs another dlock binary (e.g. one
# built before `dlock run` ran its COMMAND as a job) to see what the checker
# says about it.

tree_lease=1 tree_lease_ms=1000
# CHAOS_TREE_GRACE=S: another --grace (one above 2/3 of the lease shows
# the limit of the guard: see docs/reliability.md).
tree_grace=${CHAOS_TREE_GRACE:-0.25}
tree_hold_ms=1000 # a node lives 1/5..all of it; the stubborn one 1..2 times
tree_faults=(kill9 lost term stop int)

# The job (COMMAND's script): $1 holder file, $2 chaos_tree, $3 log,
# $4 max hold ms, $5 shape (wait | orphan).
# shellcheck disable=SC2016
tree_job='printf "%s %s\n" "$PPID" "$DLOCK_FENCING_TOKEN" >"$1.$$" &&
mv -f "$1.$$" "$1"
"$2" node "$3" root $(($4 / 5)) "$4" &
( "$2" node "$3" grand $(($4 / 5)) "$4" &
"$2" node "$3" stubborn "$4" $(($4 * 2)) stubborn & wait ) &
[ "$5" = orphan ] && exit 0
"$2" node "$3" child $(($4 / 5)) "$4"
wait'

# tree_worker I KEY LOG END: dlock run in a loop until SECONDS reaches END.
tree_worker() {
    local i=$1 key=$2 log=$3 end=$4 policy='term' shape rc dp
    [ $((i % 2)) = 1 ] || policy='kill'
    RANDOM=$((seed + i))
    export CHAOS_WID=$i CHAOS_TREE=$TREE_MARK DLOCK_SERVERS=$URLS
    unset DLOCK_FENCING_TOKEN
    while [ $SECONDS -lt "$end" ]; do
        shape='wait'
        [ $((RANDOM % 3)) != 0 ] || shape='orphan'
        # A background command of a shell without job control starts
        # with SIGINT ignored, and so would dlock and its job: not what a
        # terminal gives them.
        env --default-signal=INT,QUIT "$DL" run -w 3 -l "$tree_lease" \
            --on-lost "$policy" --grace "$tree_grace" "$key" -- \
            sh -c "$tree_job" sh "$work/treeholder" "$TB" "$log" \
            "$tree_hold_ms" "$shape" 2>>"$work/$key.w$i.stderr" &
        dp=$!
        echo "$dp" >"$work/tree.w$i.dpid"
        wait "$dp"
        rc=$?
        "$TB" after "$log" "$i" "$rc"
    done
    rm -f "$work/tree.w$i.dpid"
}

# tree_holder [fresh]: sets HD (the holding dlock's pid) and HT (its
# token) from the holder file, a dlock still running and not the one hit
# last; with "fresh", not the current one either but the next, whose job
# has just started. Waits up to 3 s for one. Returns 1 when there was none.
tree_holder() {
    local k
    if [ "${1:-}" = fresh ]; then
        read -r TREE_LAST _ <"$work/treeholder" 2>/dev/null
    fi
    for ((k = 0; k < 60; k++)); do
        HD='' HT=''
        read -r HD HT <"$work/treeholder" 2>/dev/null
        if [ -n "$HD" ] && [ "$HD" != "$TREE_LAST" ] &&
            kill -0 "$HD" 2>/dev/null; then
            TREE_LAST=$HD
            return 0
        fi
        sleep 0.05
    done
    return 1
}

# Delete the lock key and print the token of the hold it was, atomically
# (nothing printed when the lock was free). The string layout keeps the
# token in the lock's value ("<owner> <count> <token>..."); the hash
# layout's last grant is the fence hash's n (without fence retention the
# string layout has no fence hash: reading only n left the victim unknown
# and its overlap with the next holder unexcused).
tree_del_lua="local v = redis.pcall('GET', KEYS[1])
local n
if type(v) == 'string' then n = string.match(v, '^%S+ %d+ (%d+)') end
if not n then n = redis.call('HGET', KEYS[2], 'n') end
if redis.call('DEL', KEYS[1]) == 1 then return n end
return ''"

# tree_owner: the owner holding the lock now, "none" when it is free, or
# nothing when the server did not answer.
tree_owner() {
    rcli "${PORTS[0]}" EVAL "if redis.call('TYPE', KEYS[1]).ok == 'string' then
return string.match(redis.call('GET', KEYS[1]), '^(%S+)') end
return redis.call('HKEYS', KEYS[1])[1] or 'none'" 1 "dlock:{$TREE_KEY}"
}

# f_tree ROUND LOG: the round's fault (see the top of the file).
f_tree() {
    local c=${tree_faults[($1 + TREE_OFF) % ${#tree_faults[@]}]} log=$2 t k own p st
    sleep "$(rand_ms 100 600)"
    TREE_DONE+=("$c")
    case $c in
    kill9)
        # Early in a job: without its guard, the job would outlive the
        # lease.
        tree_holder fresh || return 0
        own=$(tree_owner)
        kill -KILL "$HD" 2>/dev/null || return 0
        "$TB" log "$log" K "$HT"
        # The moment another holder could start: the key of that hold
        # gone (expired) or someone else's. Whatever of its job is alive
        # then broke the promise, whether or not a waiter was quick enough
        # to overlap it (bounded: the lease, and a few seconds for a
        # loaded machine). No answer from the server is no news.
        [ -n "$own" ] && [ "$own" != none ] || return 0
        for ((k = 0; k < 250; k++)); do
            t=$(tree_owner)
            [ -z "$t" ] || [ "$t" = "$own" ] || break
            sleep 0.02
        done
        [ $k -lt 250 ] || return 0
        tree_scan | while read -r p t st; do
            [ "$t" != "$HT" ] || "$TB" log "$log" A "$t" "$p" "$st"
        done
        ;;
    term | int)
        tree_holder || return 0
        "$TB" log "$log" G "$HT" "${c^^}"
        kill "-${c^^}" "$HD" 2>/dev/null
        ;;
    stop)
        # Early in a job: its processes may well outlive the lease.
        tree_holder fresh || return 0
        kill -STOP "$HD" 2>/dev/null || return 0
        "$TB" log "$log" P "$HT"
        pids+=("$HD") # cleanup continues it, should the run be stopped
        sleep "$(rand_ms $((tree_lease_ms + 300)) $((tree_lease_ms * 2 + 300)))"
        kill -CONT "$HD" 2>/dev/null
        ;;
    lost)
        for ((k = 0; k < 5; k++)); do
            # Early in a job, so that its dlock learns it at a renewal
            # while the job runs, not at the release.
            tree_holder fresh || return 0
            t=$(rcli "${PORTS[0]}" EVAL "$tree_del_lua" 2 \
                "dlock:{$TREE_KEY}" "dlock:{$TREE_KEY}:f")
            if [ -n "$t" ]; then
                "$TB" log "$log" L "$t"
                return 0
            fi
            sleep 0.05
        done
        ;;
    esac
    return 0
}

# tree_scan: the live processes of this run's jobs, "pid token state".
tree_scan() {
    "$TB" scan "$TREE_MARK"
}

# dlock_run_tree_scenario NAME: see the top of the file.
dlock_run_tree_scenario() {
    local name=$1 r v=0 hung=0 left=0 i p deadline log end note=''
    want "$name" || return 0
    local DL=${CHAOS_DLOCK:-$bdir/cli/dlock} TB=$bdir/chaos_tree
    # left_locked's bound is this scenario's lease.
    local lease=$tree_lease_ms WSTRAT=notify TRANSPORT=tcp
    if [ ! -x "$DL" ]; then
        report "$name" 0 1 "(no dlock binary at $DL)"
        return
    fi
    start_servers 1 || {
        report "$name" 0 1 "(server did not start)"
        return
    }
    TREE_KEY=$name TREE_MARK=$name-$$-$RANDOM TREE_LAST='' TREE_DONE=()
    TREE_OFF=$((RANDOM % ${#tree_faults[@]}))
    log=$work/$name.log
    : >"$log"
    rm -f "$work/treeholder"
    end=$((SECONDS + secs))
    WPIDS=()
    for ((i = 1; i <= 4; i++)); do
        tree_worker "$i" "$name" "$log" "$end" 2>>"$work/$name.loop.stderr" &
        WPIDS+=($!)
        pids+=($!)
    done
    sleep 0.5
    for ((r = 1; r <= rounds; r++)); do
        f_tree "$r" "$log"
        sleep "$(rand_ms 100 $((secs * 1000 / rounds / 2)))"
    done
    # Each loop ends after its last dlock: -w 3, a job of at most
    # tree_hold_ms, the grace period.
    wait_workers || hung=$?
    # Guards of SIGKILLed dlocks end their jobs within the grace period;
    # whatever runs after a few seconds more is left behind.
    deadline=$((SECONDS + 5))
    while [ -n "$(tree_scan)" ] && [ $SECONDS -lt $deadline ]; do
        sleep 0.1
    done
    while read -r p t _; do
        echo "   VIOLATION left running: process $p of hold $t"
        left=$((left + 1))
        kill -CONT "$p" 2>/dev/null
        kill -KILL "$p" 2>/dev/null
    done < <(tree_scan)
    LOGS=("$log")
    local out
    out=$("$TB" check "$log")
    VIOL=$(sed -n 's/.*violations=\([0-9]*\).*/\1/p' <<<"$out" | tail -n1)
    [ -n "$VIOL" ] || VIOL=1
    STATS=$(grep '^stats' <<<"$out")
    grep VIOLATION <<<"$out" | head -n 5 | sed 's/^/   /'
    sed 's/^/   /' <<<"$STATS"
    echo "   faults: ${TREE_DONE[*]}"
    v=$((VIOL + hung + left))
    left_locked "$name" "${PORTS[0]}" || v=$((v + $?))
    [ "$(stat_of sections)" != 0 ] || {
        echo "   VIOLATION no job ran"
        v=$((v + 1))
    }
    LOGS+=("$work"/"$name".w*.stderr)
    keep_logs "$name" "$v"
    note="(excused: overlaps_lost=$(stat_of overlaps_lost) overlaps_paused=$(stat_of overlaps_paused))"
    [ $hung = 0 ] || note+=" hung=$hung"
    report "$name" "$rounds" "$v" "$note"
    stop_servers
}

# short_tree CMD...: in --quick, 5 rounds (one of each fault class) in
# 12 s; otherwise the mode's rounds and seconds.
short_tree() {
    if [ "$mode" = quick ]; then
        local secs=12 rounds=5
        "$@"
    else
        "$@"
    fi
}
