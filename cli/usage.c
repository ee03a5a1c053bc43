/*
 * usage.c - the --help text and usage errors of the dlock tool.
 * Called by dlock.c and args.c; calls nothing of the tool's.
 */
#include <stdarg.h>
#include <stdio.h>

#include "cli.h"

/* The --help text, in pieces (C99 compilers need not take string literals
 * over 4095 bytes). */
static const char *const usage_text[] = {
    "Usage: dlock run [OPTIONS] KEY [--] COMMAND [ARG...]\n"
    "       dlock run [OPTIONS] KEY KEY... -- COMMAND [ARG...]\n"
    "       dlock elect [OPTIONS] NAME [--] COMMAND [ARG...]\n"
    "       dlock leader [OPTIONS] NAME [--json] [--watch]\n"
    "       dlock acquire [OPTIONS] KEY\n"
    "       dlock release [OPTIONS] KEY [--owner OWNER]\n"
    "       dlock extend [OPTIONS] KEY [--owner OWNER] [-l SECONDS]\n"
    "       dlock status [OPTIONS] KEY [--json]\n"
    "       dlock list [OPTIONS] [PATTERN] [--json]\n"
    "       dlock check [OPTIONS] KEY [TOKEN]\n"
    "       dlock limit [OPTIONS] KEY N\n"
    "       dlock --help | --version\n"
    "\n"
    "Hold the distributed lock KEY on Redis: flock(1) across machines.\n"
    "run renews the lease while COMMAND runs and releases the lock when it\n"
    "exits; acquire/release/extend hold a lock across several commands of\n"
    "a script (no renewal: the lease must cover the span).\n"
    "\n"
    "Server options (every command):\n"
    "  -s, --server URL       redis://[USER[:PASSWORD]@]HOST[:PORT][/DB],\n"
    "                         rediss://... (TLS) or unix:///PATH; repeat for\n"
    "                         Redlock; redis+cluster://HOST:PORT[,HOST:PORT]\n"
    "                         (or rediss+cluster://) for a Redis Cluster;\n"
    "                         redis+sentinel://[USER[:PASSWORD]@]HOST[:PORT]\n"
    "                         [,HOST[:PORT]...]/MASTER[?db=N] "
    "(rediss+sentinel\n"
    "                         for TLS) finds the master through Sentinel\n"
    "                         (default: $DLOCK_SERVERS, comma-separated,\n"
    "                         else redis://127.0.0.1:6379)\n"
    "      --user NAME        ACL user (default: $DLOCK_USER, else the URL's)\n"
    "      --cacert FILE      CA certificates for rediss:// (default:\n"
    "                         $DLOCK_CACERT, else the system's)\n"
    "      --cert FILE        TLS client certificate, PEM (default:\n"
    "                         $DLOCK_TLS_CERT)\n"
    "      --key FILE         its private key, PEM (default: $DLOCK_TLS_KEY)\n"
    "      --insecure         rediss:// without certificate checks (tests)\n"
    "      --prefix PREFIX    key prefix (default: $DLOCK_PREFIX, else dlock)\n"
    "      --timeout SECONDS  bound on each connect (name lookup, TLS, AUTH\n"
    "                         included) and each command to a server, and\n"
    "                         on each attempt to take the lock as a whole\n"
    "                         (default: $DLOCK_TIMEOUT, else 2)\n"
    "      --wait-replicas N  after every lock write wait until N replicas\n"
    "                         have it, else fail (default:\n"
    "                         $DLOCK_WAIT_REPLICAS, else 0: no wait)\n"
    "      --wait-replicas-timeout SECONDS\n"
    "                         how long to wait for them (default:\n"
    "                         $DLOCK_WAIT_REPLICAS_TIMEOUT, else 1)\n"
    "      --lock-delay SECONDS  refuse new grants this long after the\n"
    "                         master changed (default: $DLOCK_LOCK_DELAY,\n"
    "                         else 30 with Sentinel, 0 otherwise)\n"
    "  -v, --verbose          say on stderr what is happening and how long\n"
    "                         it took\n"
    "The password comes from the URL or from $DLOCK_PASSWORD; the\n"
    "sentinels' own from $DLOCK_SENTINEL_USER and $DLOCK_SENTINEL_PASSWORD.\n"
    "\n",
    "Locking options (run, acquire):\n"
    "  -w, --wait SECONDS     give up after SECONDS (fractions allowed;\n"
    "                         0 = --nonblock; default: wait forever)\n"
    "  -n, --nonblock         fail at once if the lock is held\n"
    "  -l, --lease SECONDS    lease length (default 30, at least 0.1); run\n"
    "                         renews it every third of it; extend sets it\n"
    "                         anew\n"
    "  -E, --conflict-exit-code N\n"
    "                         exit status when the lock is not obtained\n"
    "                         (default 1)\n"
    "      --limit N          a semaphore permit: at most N holders of KEY\n"
    "      --shared           a read lock: readers share KEY, writers wait\n"
    "      --prefer-readers   with --shared: enter while a writer waits\n"
    "\n",
    "run options:\n"
    "      --on-lost POLICY   what to do to COMMAND when the lease is lost:\n"
    "                         term (SIGTERM, then SIGKILL after --grace;\n"
    "                         default), kill (SIGKILL) or ignore\n"
    "      --grace SECONDS    time between SIGTERM and SIGKILL (default 5)\n"
    "  -L, --lost-exit-code N exit status when the lease was lost (default\n"
    "                         75; also release/extend when OWNER no longer\n"
    "                         holds KEY)\n"
    "      --min-hold SECONDS keep the lock at least SECONDS after COMMAND\n"
    "                         started, even when it ends sooner (SIGINT,\n"
    "                         SIGTERM, SIGHUP or SIGQUIT end the wait)\n"
    "      --max-hold SECONDS hold the lock at most SECONDS: then treat the\n"
    "                         lease as lost (--on-lost, the lost code)\n"
    "      --metrics-file PATH\n"
    "                         when run ends, write its counters and latency\n"
    "                         histograms there in Prometheus text format\n"
    "                         (temporary file, then rename)\n"
    "COMMAND gets DLOCK_KEY and DLOCK_FENCING_TOKEN in its environment.\n"
    "Several KEYs (then -- before COMMAND is required) are taken all or\n"
    "nothing, in one global order: no deadlock whatever order runs give\n"
    "them in; DLOCK_FENCING_TOKENS has every KEY's token, in KEY order.\n"
    "\n"
    "run once per time slot, for cron on several machines:\n"
    "      --once-per SECONDS slots of SECONDS (at least 1) cut from the\n"
    "                         Unix epoch by this machine's clock; after a\n"
    "                         run with status 0 a done-marker makes later\n"
    "                         runs of KEY in the same slot skip COMMAND\n"
    "      --slot NAME        the slot is NAME (e.g. $(date +%F)), not the\n"
    "                         clock's; --once-per then says how long its\n"
    "                         marker lasts (required)\n"
    "      --done-exit-code N exit status when the slot was done already\n"
    "                         and COMMAND was skipped (default 0)\n"
    "\n"
    "run and acquire options:\n"
    "      --label TEXT       what status and list show as the holder's\n"
    "                         command (default: COMMAND; acquire: the\n"
    "                         command line of its caller)\n"
    "elect: run COMMAND only while this process leads the election NAME\n"
    "(followers wait: -w, -n, -l, -E, --on-lost, --grace and -L as for run)\n"
    "      --value VALUE      what the leader shows others (e.g. host:port;\n"
    "                         COMMAND gets it as DLOCK_LEADER_VALUE, and\n"
    "                         its epoch as DLOCK_FENCING_TOKEN)\n"
    "      --ready-file PATH  a file that exists exactly while this\n"
    "                         process leads (for a readiness probe)\n"
    "leader: print who leads NAME (\"EPOCH VALUE\", or \"none\")\n"
    "      --watch            print a line now and on every change, until\n"
    "                         a signal (SIGINT, SIGTERM) stops it\n"
    "\n"
    "acquire options:\n"
    "      --export           print shell assignments of DLOCK_KEY,\n"
    "                         DLOCK_OWNER and DLOCK_FENCING_TOKEN for eval\n"
    "                         instead of \"OWNER TOKEN\"\n"
    "release and extend options:\n"
    "      --owner OWNER      the owner acquire printed (default:\n"
    "                         $DLOCK_OWNER)\n"
    "status, list and leader options:\n"
    "      --json             print a JSON object (list: one per line)\n"
    "list shows every held lock whose name matches PATTERN (a Redis glob,\n"
    "default *) with its holder. check exits 0 when TOKEN (default:\n"
    "$DLOCK_FENCING_TOKEN) is the fencing token of KEY's current hold, the\n"
    "lost code otherwise.\n"
    "\n"
    "  -h, --help             print this help and exit\n"
    "  -V, --version          print the version and exit\n"
    "\n"
    "Exit status: COMMAND's (128+N if killed by signal N); the conflict code\n"
    "when the lock was not obtained; the lost code when the lease was lost\n"
    "or --max-hold was reached; the done code when the slot was done;\n"
    "64 usage error; 69 no server or no quorum reachable (may pass; or not\n"
    "a master, or too few replicas acknowledged); 77\n"
    "refused by the server (credentials, ACL, read-only replica: retrying\n"
    "will not help); 126 COMMAND not executable; 127 COMMAND not found;\n"
    "128+N when signal N stopped the wait. See dlock(1).\n"};

/* See cli.h. */
void cli_print_usage(void)
{
    for (size_t i = 0; i < sizeof usage_text / sizeof usage_text[0]; i++)
        fputs(usage_text[i], stdout);
}

/* See cli.h. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "dlock%s%s: ", cmd ? " " : "", cmd ? cmd : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nTry 'dlock --help'.\n", stderr);
    return CLI_EX_USAGE;
}
