/*
 * dlock.c - the `dlock` command-line tool: flock(1) across machines.
 *
 * `dlock run KEY -- COMMAND` holds the Redis lock KEY while COMMAND runs
 * (run.c); `dlock acquire`, `release` and `extend` let a shell script hold a
 * lock across several commands; `dlock status` shows what the servers know
 * about a lock (commands.c). This file is the top of the tool: it parses
 * the command line and the environment, makes the dlock_client (and for
 * --once-per a second one for the done-markers) and hands it to the
 * subcommand. Calls run downward: dlock.c -> run.c, commands.c ->
 * signals.c -> report.c, util.c. It uses include/dlock.h only.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

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

/* Print the --help text on stdout. */
static void print_usage(void)
{
    for (size_t i = 0; i < sizeof usage_text / sizeof usage_text[0]; i++)
        fputs(usage_text[i], stdout);
}

enum {
    OPT_USER = 256,
    OPT_CACERT,
    OPT_CERT,
    OPT_KEY,
    OPT_INSECURE,
    OPT_PREFIX,
    OPT_ON_LOST,
    OPT_GRACE,
    OPT_JSON,
    OPT_EXPORT,
    OPT_OWNER,
    OPT_TIMEOUT,
    OPT_ONCE_PER,
    OPT_SLOT,
    OPT_MIN_HOLD,
    OPT_MAX_HOLD,
    OPT_DONE_CODE,
    OPT_LABEL,
    OPT_METRICS_FILE,
    OPT_LIMIT,
    OPT_SHARED,
    OPT_PREFER_READERS,
    OPT_VALUE,
    OPT_READY_FILE,
    OPT_WATCH
};

static const struct option long_options[] = {
    {"server", required_argument, NULL, 's'},
    {"user", required_argument, NULL, OPT_USER},
    {"cacert", required_argument, NULL, OPT_CACERT},
    {"cert", required_argument, NULL, OPT_CERT},
    {"key", required_argument, NULL, OPT_KEY},
    {"insecure", no_argument, NULL, OPT_INSECURE},
    {"prefix", required_argument, NULL, OPT_PREFIX},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"wait-replicas", required_argument, NULL, CLI_OPT_WAIT_REPLICAS},
    {"wait-replicas-timeout", required_argument, NULL,
     CLI_OPT_WAIT_REPLICAS_TIMEOUT},
    {"lock-delay", required_argument, NULL, CLI_OPT_LOCK_DELAY},
    {"verbose", no_argument, NULL, 'v'},
    {"wait", required_argument, NULL, 'w'},
    {"nonblock", no_argument, NULL, 'n'},
    {"lease", required_argument, NULL, 'l'},
    {"conflict-exit-code", required_argument, NULL, 'E'},
    {"on-lost", required_argument, NULL, OPT_ON_LOST},
    {"grace", required_argument, NULL, OPT_GRACE},
    {"lost-exit-code", required_argument, NULL, 'L'},
    {"once-per", required_argument, NULL, OPT_ONCE_PER},
    {"slot", required_argument, NULL, OPT_SLOT},
    {"min-hold", required_argument, NULL, OPT_MIN_HOLD},
    {"max-hold", required_argument, NULL, OPT_MAX_HOLD},
    {"done-exit-code", required_argument, NULL, OPT_DONE_CODE},
    {"export", no_argument, NULL, OPT_EXPORT},
    {"owner", required_argument, NULL, OPT_OWNER},
    {"json", no_argument, NULL, OPT_JSON},
    {"label", required_argument, NULL, OPT_LABEL},
    {"metrics-file", required_argument, NULL, OPT_METRICS_FILE},
    {"limit", required_argument, NULL, OPT_LIMIT},
    {"shared", no_argument, NULL, OPT_SHARED},
    {"prefer-readers", no_argument, NULL, OPT_PREFER_READERS},
    {"value", required_argument, NULL, OPT_VALUE},
    {"ready-file", required_argument, NULL, OPT_READY_FILE},
    {"watch", no_argument, NULL, OPT_WATCH},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0}};

/* The subcommands by name. */
struct cmd_def {
    const char *name;
    enum cli_cmd cmd;
};

static const char common_opts[] = "svhV";

/* Does CMD accept option OPT (a short letter or an OPT_* id)? */
static int accepts(enum cli_cmd cmd, int opt)
{
    if (opt < 256)
        if (strchr(common_opts, opt) != NULL)
            return 1;
    switch (opt) {
    case OPT_USER:
    case OPT_CACERT:
    case OPT_CERT:
    case OPT_KEY:
    case OPT_INSECURE:
    case OPT_PREFIX:
    case OPT_TIMEOUT:
    case CLI_OPT_WAIT_REPLICAS:
    case CLI_OPT_WAIT_REPLICAS_TIMEOUT:
    case CLI_OPT_LOCK_DELAY:
        return 1;
    case 'w':
    case 'n':
    case 'E':
        return cmd == CMD_RUN || cmd == CMD_ACQUIRE || cmd == CMD_ELECT;
    case 'l':
        return cmd == CMD_RUN || cmd == CMD_ACQUIRE || cmd == CMD_EXTEND ||
               cmd == CMD_ELECT;
    case 'L':
        return cmd == CMD_RUN || cmd == CMD_RELEASE || cmd == CMD_EXTEND ||
               cmd == CMD_CHECK || cmd == CMD_ELECT;
    case OPT_ON_LOST:
    case OPT_GRACE:
        return cmd == CMD_RUN || cmd == CMD_ELECT;
    case OPT_VALUE:
    case OPT_READY_FILE:
        return cmd == CMD_ELECT;
    case OPT_WATCH:
        return cmd == CMD_LEADER;
    case OPT_ONCE_PER:
    case OPT_SLOT:
    case OPT_MIN_HOLD:
    case OPT_MAX_HOLD:
    case OPT_DONE_CODE:
    case OPT_METRICS_FILE:
        return cmd == CMD_RUN;
    case OPT_EXPORT:
        return cmd == CMD_ACQUIRE;
    case OPT_LABEL:
        return cmd == CMD_RUN || cmd == CMD_ACQUIRE;
    case OPT_OWNER:
        return cmd == CMD_RELEASE || cmd == CMD_EXTEND;
    case OPT_JSON:
        return cmd == CMD_STATUS || cmd == CMD_LIST || cmd == CMD_LEADER;
    case OPT_LIMIT:
    case OPT_SHARED:
    case OPT_PREFER_READERS:
        return cmd == CMD_RUN || cmd == CMD_ACQUIRE;
    default:
        return 0;
    }
}

/* Report a usage error and return the status for it. */
static int usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "dlock%s%s: ", cmd ? " " : "", cmd ? cmd : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nTry 'dlock --help'.\n", stderr);
    return CLI_EX_USAGE;
}

/* Append a copy of URL to the server list and mask its password in argv.
 * Returns 0, or -1 when out of memory. */
static int add_server(struct cli *o, char *url)
{
    char **grown = realloc(o->servers, (o->nservers + 1) * sizeof *grown);

    if (grown == NULL)
        return -1;
    o->servers = grown;
    o->servers[o->nservers] = strdup(url);
    if (o->servers[o->nservers] == NULL)
        return -1;
    o->nservers++;
    return 0;
}

/* 1 when S (blanks first ignored) is a redis+cluster:// or
 * rediss+cluster:// URL. */
static int is_cluster_url(const char *s)
{
    s += strspn(s, " \t");
    return strncasecmp(s, "redis+cluster://", 16) == 0 ||
           strncasecmp(s, "rediss+cluster://", 17) == 0;
}

/*
 * Fill the server list from DLOCK_SERVERS (comma-separated, blanks around
 * entries ignored) or, when it is not set, the default. Set but naming no
 * server ("", ",", " ") is a mistake, not a request for localhost. Returns
 * 0, or an exit status after printing why.
 */
static int default_servers(struct cli *o)
{
    const char *env = getenv("DLOCK_SERVERS");
    char *copy, *save = NULL, *tok;
    int rc = 0;

    if (env == NULL) {
        o->servers_from = "default";
        rc = add_server(o, (char *)CLI_DEFAULT_SERVER);
    } else if (strspn(env, " \t,") == strlen(env)) {
        return usage_error(o->cmd_name,
                           "DLOCK_SERVERS is set but names no server "
                           "(unset it for %s, or give -s URL)",
                           CLI_DEFAULT_SERVER);
    } else if (is_cluster_url(env)) {
        /* A cluster's seeds are one URL: its commas are not a list. */
        copy = strdup(env + strspn(env, " \t"));
        if (copy == NULL)
            goto oom;
        copy[strcspn(copy, " \t")] = '\0';
        rc = add_server(o, copy);
        free(copy);
        o->servers_from = "DLOCK_SERVERS";
    } else {
        copy = strdup(env);
        if (copy == NULL)
            goto oom;
        for (tok = strtok_r(copy, ",", &save); tok && rc == 0;
             tok = strtok_r(NULL, ",", &save)) {
            char *end;

            tok += strspn(tok, " \t");
            end = tok + strlen(tok);
            while (end > tok && (end[-1] == ' ' || end[-1] == '\t'))
                *--end = '\0';
            if (*tok != '\0')
                rc = add_server(o, tok);
        }
        free(copy);
        o->servers_from = "DLOCK_SERVERS";
    }
    if (rc == 0)
        return 0;
oom:
    cli_err("out of memory");
    return CLI_EX_OSERR;
}

/* Name an option for messages: "-w" or "--grace". */
static void option_name(int opt, char *buf, size_t len)
{
    if (opt > 0 && opt < 256) {
        snprintf(buf, len, "-%c", opt);
        return;
    }
    for (const struct option *lo = long_options; lo->name; lo++)
        if (lo->val == opt) {
            snprintf(buf, len, "--%s", lo->name);
            return;
        }
    snprintf(buf, len, "?");
}

/*
 * `dlock run A B... -- COMMAND`: when a "--" follows KEY after more words,
 * those words are KEYs too (o->keys[0..nkeys-1]); "run KEY COMMAND" and
 * "run KEY -- COMMAND" keep one KEY. Each KEY is checked as KEY is, and
 * no KEY may be given twice. Returns 0 or CLI_EX_USAGE after printing
 * why.
 */
static int more_keys(struct cli *o, int argc, char **argv)
{
    int end = optind + 1;

    while (end < argc && strcmp(argv[end], "--") != 0)
        end++;
    if (end >= argc || end == optind + 1)
        return 0;
    if (end - optind > DLOCK_MULTI_MAX)
        return usage_error(o->cmd_name, "more than %d KEYs", DLOCK_MULTI_MAX);
    for (int i = optind + 1; i < end; i++) {
        if (argv[i][0] == '-')
            return usage_error(o->cmd_name,
                               "'%s' after KEY: options go before KEY "
                               "(use -- before a COMMAND starting with -)",
                               argv[i]);
        if (*argv[i] == '\0')
            return usage_error(o->cmd_name, "KEY must not be empty");
        if (strlen(argv[i]) > 512)
            return usage_error(o->cmd_name, "KEY is longer than 512 bytes");
        for (int j = optind; j < i; j++)
            if (strcmp(argv[i], argv[j]) == 0)
                return usage_error(o->cmd_name, "KEY '%s' is given twice",
                                   argv[i]);
    }
    o->nkeys = (size_t)(end - optind);
    if (o->once_per_ms > 0)
        return usage_error(o->cmd_name,
                           "--once-per takes one KEY (the done-marker is "
                           "named after it)");
    if (o->limit > 0 || o->shared)
        return usage_error(o->cmd_name,
                           "--limit and --shared take one KEY (several keys "
                           "are exclusive locks, taken all or nothing)");
    return 0;
}

/*
 * Parse argv for subcommand O->cmd (argv[0] is the subcommand's name).
 * run stops at KEY like flock(1) ("+"): options go before KEY, and what
 * follows KEY (after an optional "--") is COMMAND. The other subcommands
 * take options anywhere. Returns 0, CLI_EX_USAGE after printing the
 * problem, or -1 for "--help/--version printed: exit 0".
 */
static int parse_args(struct cli *o, int argc, char **argv)
{
    const char *shorts = o->cmd == CMD_RUN || o->cmd == CMD_ELECT
                             ? "+:s:vw:nl:E:L:hV"
                             : ":s:vw:nl:E:L:hV";
    const char *why;
    char name[32];
    int opt, positional;

    opterr = 0;
    optind = 1;
    while ((opt = getopt_long(argc, argv, shorts, long_options, NULL)) != -1) {
        if (opt == '?') {
            if (optopt > 0 && optopt < 256)
                return usage_error(o->cmd_name, "unknown option '-%c'", optopt);
            return usage_error(o->cmd_name, "unknown option '%s'",
                               argv[optind - 1]);
        }
        if (opt == ':') {
            option_name(optopt, name, sizeof name);
            return usage_error(o->cmd_name, "option '%s' needs a value", name);
        }
        if (!accepts(o->cmd, opt)) {
            option_name(opt, name, sizeof name);
            return usage_error(o->cmd_name, "option '%s' does not apply to %s",
                               name, o->cmd_name);
        }
        switch (opt) {
        case 's':
            if (add_server(o, optarg) < 0) {
                cli_err("out of memory");
                return CLI_EX_OSERR;
            }
            cli_mask_password(optarg);
            o->servers_from = "--server";
            break;
        case OPT_USER:
            o->user = optarg;
            break;
        case OPT_CACERT:
            o->cacert = optarg;
            break;
        case OPT_CERT:
            o->tls_cert = optarg;
            break;
        case OPT_KEY:
            o->tls_key = optarg;
            break;
        case OPT_INSECURE:
            o->insecure = 1;
            break;
        case OPT_PREFIX:
            o->prefix = optarg;
            break;
        case OPT_TIMEOUT:
            if (cli_parse_seconds(optarg, &o->timeout_ms, &why) < 0)
                return usage_error(o->cmd_name, "--timeout '%s': %s", optarg,
                                   why);
            if (o->timeout_ms <= 0)
                return usage_error(
                    o->cmd_name, "--timeout '%s': must be more than 0", optarg);
            break;
        case CLI_OPT_WAIT_REPLICAS:
        case CLI_OPT_WAIT_REPLICAS_TIMEOUT:
        case CLI_OPT_LOCK_DELAY:
            if (cli_durability_opt(o, opt, optarg, &why) < 0) {
                option_name(opt, name, sizeof name);
                return usage_error(o->cmd_name, "%s '%s': %s", name, optarg,
                                   why);
            }
            break;
        case 'v':
            o->verbose = 1;
            break;
        case 'w':
            if (cli_parse_seconds(optarg, &o->wait_ms, &why) < 0)
                return usage_error(o->cmd_name, "--wait '%s': %s", optarg, why);
            break;
        case 'n':
            o->wait_ms = 0;
            break;
        case 'l':
            if (cli_parse_seconds(optarg, &o->lease_ms, &why) < 0)
                return usage_error(o->cmd_name, "--lease '%s': %s", optarg,
                                   why);
            if (o->lease_ms <= 0)
                return usage_error(o->cmd_name,
                                   "--lease '%s': must be more than 0", optarg);
            if (o->lease_ms < CLI_MIN_LEASE_MS)
                return usage_error(o->cmd_name,
                                   "--lease '%s': below the minimum of %.1f "
                                   "s (the lease must outlast a round trip "
                                   "and the clock drift allowance, and be "
                                   "renewed every third of it)",
                                   optarg, CLI_MIN_LEASE_MS / 1000.0);
            break;
        case OPT_GRACE:
            if (cli_parse_seconds(optarg, &o->grace_ms, &why) < 0)
                return usage_error(o->cmd_name, "--grace '%s': %s", optarg,
                                   why);
            break;
        case 'E':
            if (cli_parse_code(optarg, &o->conflict_code) < 0)
                return usage_error(o->cmd_name,
                                   "--conflict-exit-code '%s': not a status "
                                   "from 0 to 255",
                                   optarg);
            break;
        case 'L':
            if (cli_parse_code(optarg, &o->lost_code) < 0)
                return usage_error(o->cmd_name,
                                   "--lost-exit-code '%s': not a status "
                                   "from 0 to 255",
                                   optarg);
            break;
        case OPT_ON_LOST:
            if (strcmp(optarg, "term") == 0)
                o->on_lost = ON_LOST_TERM;
            else if (strcmp(optarg, "kill") == 0)
                o->on_lost = ON_LOST_KILL;
            else if (strcmp(optarg, "ignore") == 0)
                o->on_lost = ON_LOST_IGNORE;
            else
                return usage_error(o->cmd_name,
                                   "--on-lost '%s': not term, kill or ignore",
                                   optarg);
            break;
        case OPT_ONCE_PER:
            if (cli_parse_seconds(optarg, &o->once_per_ms, &why) < 0)
                return usage_error(o->cmd_name, "--once-per '%s': %s", optarg,
                                   why);
            if (o->once_per_ms < CLI_MIN_ONCE_PER_MS)
                return usage_error(o->cmd_name,
                                   "--once-per '%s': must be at least 1 s "
                                   "(a slot must be far longer than the "
                                   "clock skew between the machines)",
                                   optarg);
            break;
        case OPT_SLOT:
            why = cli_check_slot_name(optarg);
            if (why != NULL)
                return usage_error(o->cmd_name, "--slot '%s': %s", optarg, why);
            o->slot = optarg;
            break;
        case OPT_MIN_HOLD:
        case OPT_MAX_HOLD: {
            int64_t *ms =
                opt == OPT_MIN_HOLD ? &o->min_hold_ms : &o->max_hold_ms;

            option_name(opt, name, sizeof name);
            if (cli_parse_seconds(optarg, ms, &why) < 0)
                return usage_error(o->cmd_name, "%s '%s': %s", name, optarg,
                                   why);
            if (*ms <= 0)
                return usage_error(o->cmd_name, "%s '%s': must be more than 0",
                                   name, optarg);
            break;
        }
        case OPT_DONE_CODE:
            if (cli_parse_code(optarg, &o->done_code) < 0)
                return usage_error(o->cmd_name,
                                   "--done-exit-code '%s': not a status "
                                   "from 0 to 255",
                                   optarg);
            break;
        case OPT_EXPORT:
            o->export_env = 1;
            break;
        case OPT_OWNER:
            o->owner = optarg;
            break;
        case OPT_JSON:
            o->json = 1;
            break;
        case OPT_METRICS_FILE:
            if (*optarg == '\0')
                return usage_error(o->cmd_name, "--metrics-file is empty");
            o->metrics_file = optarg;
            break;
        case OPT_LABEL:
            if (strlen(optarg) >= DLOCK_LABEL_MAX)
                return usage_error(o->cmd_name,
                                   "--label is longer than %d bytes",
                                   DLOCK_LABEL_MAX - 1);
            o->label = optarg;
            break;
        case OPT_LIMIT:
            if (cli_parse_limit(optarg, &o->limit) < 0)
                return usage_error(o->cmd_name,
                                   "--limit '%s': not a number from 1 to %d",
                                   optarg, DLOCK_SEM_LIMIT_MAX);
            break;
        case OPT_SHARED:
            o->shared = 1;
            break;
        case OPT_PREFER_READERS:
            o->prefer_readers = 1;
            break;
        case OPT_VALUE:
            if (strlen(optarg) > DLOCK_VALUE_MAX)
                return usage_error(o->cmd_name,
                                   "--value is longer than %d bytes",
                                   DLOCK_VALUE_MAX);
            o->value = optarg;
            break;
        case OPT_READY_FILE:
            if (*optarg == '\0')
                return usage_error(o->cmd_name,
                                   "--ready-file must not be empty");
            o->ready_file = optarg;
            break;
        case OPT_WATCH:
            o->watch = 1;
            break;
        case 'h':
            print_usage();
            return -1;
        case 'V':
            printf("dlock %s (libdlock %s)\n", DLOCK_VERSION, dlock_version());
            return -1;
        }
    }

    positional = argc - optind;
    if (o->cmd == CMD_LIST && positional == 0)
        o->key = "*"; /* every lock */
    else if (positional < 1)
        return usage_error(o->cmd_name, "missing KEY");
    else
        o->key = argv[optind];
    if (*o->key == '\0')
        return usage_error(o->cmd_name, "KEY must not be empty");
    if (strlen(o->key) > 512)
        return usage_error(o->cmd_name, "KEY is longer than 512 bytes");
    o->keys = argv + optind;
    o->nkeys = 1;
    if (o->cmd == CMD_RUN) {
        int rc = more_keys(o, argc, argv);

        if (rc != 0)
            return rc;
    }
    if (o->cmd == CMD_RUN || o->cmd == CMD_ELECT) {
        char **cmd = argv + optind + o->nkeys;

        if (*cmd != NULL && strcmp(*cmd, "--") == 0)
            cmd++;
        if (*cmd == NULL)
            return usage_error(o->cmd_name, "missing COMMAND after KEY");
        if ((*cmd)[0] == '-' && cmd == argv + optind + o->nkeys)
            return usage_error(o->cmd_name,
                               "'%s' after KEY: options go before KEY "
                               "(use -- before a COMMAND starting with -)",
                               *cmd);
        o->command = cmd;
    } else if (o->cmd == CMD_CHECK) {
        const char *tok =
            positional > 1 ? argv[optind + 1] : getenv("DLOCK_FENCING_TOKEN");
        if (positional > 2)
            return usage_error(o->cmd_name, "unexpected argument '%s'",
                               argv[optind + 2]);
        if (tok == NULL)
            return usage_error(o->cmd_name, "missing TOKEN (give it or set "
                                            "DLOCK_FENCING_TOKEN)");
        if (cli_parse_token(tok, &o->token) < 0)
            return usage_error(o->cmd_name,
                               "TOKEN '%s': not a fencing token (1 to 2^53)",
                               tok);
    } else if (o->cmd == CMD_LIMIT) {
        if (positional != 2)
            return usage_error(o->cmd_name, "expected KEY N");
        if (cli_parse_limit(argv[optind + 1], &o->limit) < 0)
            return usage_error(o->cmd_name, "N '%s': not a number from 1 to %d",
                               argv[optind + 1], DLOCK_SEM_LIMIT_MAX);
    } else if (positional > 1) {
        return usage_error(o->cmd_name, "unexpected argument '%s'",
                           argv[optind + 1]);
    }
    if (o->slot != NULL && o->once_per_ms == 0)
        return usage_error(o->cmd_name,
                           "--slot needs --once-per SECONDS: how long the "
                           "slot's done-marker must last (at least until "
                           "no machine starts a run for that slot any more)");
    if (o->slot != NULL && strlen(o->key) + 1 + strlen(o->slot) > 512)
        return usage_error(o->cmd_name,
                           "KEY and --slot together are longer than 511 "
                           "bytes (the done-marker is named KEY:SLOT)");
    if (o->slot == NULL && o->once_per_ms > 0 && strlen(o->key) > 480)
        return usage_error(o->cmd_name,
                           "KEY is longer than 480 bytes: too long for "
                           "--once-per (the done-marker is named KEY:SLOT)");
    if (o->done_code != CLI_DEFAULT_DONE_CODE && o->once_per_ms == 0)
        return usage_error(o->cmd_name,
                           "--done-exit-code applies only with --once-per");
    if (o->min_hold_ms > 0 && o->max_hold_ms > 0 &&
        o->min_hold_ms > o->max_hold_ms)
        return usage_error(o->cmd_name,
                           "--min-hold is longer than --max-hold: the lock "
                           "cannot be held at least %.3f s and at most %.3f s",
                           o->min_hold_ms / 1000.0, o->max_hold_ms / 1000.0);
    if (o->shared && o->limit > 0)
        return usage_error(o->cmd_name,
                           "--limit and --shared: a name is a semaphore or "
                           "a read-write lock, not both");
    if (o->prefer_readers && !o->shared)
        return usage_error(o->cmd_name, "--prefer-readers needs --shared");
    if (o->cmd == CMD_EXTEND || o->cmd == CMD_RELEASE) {
        if (o->owner == NULL)
            o->owner = getenv("DLOCK_OWNER");
        if (o->owner == NULL || *o->owner == '\0')
            return usage_error(o->cmd_name,
                               "no owner: give --owner or set DLOCK_OWNER");
    }
    if (o->nservers == 0)
        return default_servers(o);
    return 0;
}

/* Take an environment variable only when it is set and not empty. */
static const char *env_nonempty(const char *name)
{
    const char *v = getenv(name);

    return v != NULL && *v != '\0' ? v : NULL;
}

/*
 * Create the client from the options and the environment (DLOCK_USER,
 * DLOCK_PASSWORD, DLOCK_CACERT, DLOCK_TLS_CERT, DLOCK_TLS_KEY,
 * DLOCK_PREFIX, DLOCK_TIMEOUT). With MARKS set, the client for the
 * done-markers of --once-per instead: the same servers and credentials,
 * the key prefix followed by CLI_DONE_PREFIX_SUFFIX, so that its keys
 * ("dlock:done:{...}") cannot be those of any lock under the prefix
 * (always "dlock:{..."). Returns 0 with *out set, or an exit status after
 * printing why.
 */
static int make_client(const struct cli *o, int marks, dlock_client **out)
{
    dlock_options opts;
    char err[256] = "";
    char shown[512];
    char *done_prefix = NULL;
    char label[DLOCK_LABEL_MAX];
    const char *env;
    int64_t timeout_ms;
    int rc;

    dlock_options_init(&opts);
    opts.servers = (const char *const *)o->servers;
    opts.nservers = o->nservers;
    opts.username = o->user != NULL ? o->user : env_nonempty("DLOCK_USER");
    opts.password = env_nonempty("DLOCK_PASSWORD");
    if (o->prefix != NULL)
        opts.key_prefix = o->prefix;
    else if (env_nonempty("DLOCK_PREFIX") != NULL)
        opts.key_prefix = env_nonempty("DLOCK_PREFIX");
    opts.tls_ca_file =
        o->cacert != NULL ? o->cacert : env_nonempty("DLOCK_CACERT");
    opts.tls_cert_file =
        o->tls_cert != NULL ? o->tls_cert : env_nonempty("DLOCK_TLS_CERT");
    opts.tls_key_file =
        o->tls_key != NULL ? o->tls_key : env_nonempty("DLOCK_TLS_KEY");
    opts.tls_insecure = o->insecure;
    timeout_ms = o->timeout_ms;
    if (timeout_ms == 0 && (env = env_nonempty("DLOCK_TIMEOUT")) != NULL) {
        const char *why = NULL;
        if (cli_parse_seconds(env, &timeout_ms, &why) < 0 || timeout_ms <= 0)
            return usage_error(o->cmd_name, "DLOCK_TIMEOUT '%s': %s", env,
                               why != NULL ? why : "must be more than 0");
    }
    if (timeout_ms > 0)
        opts.connect_timeout_ms = opts.command_timeout_ms = timeout_ms;
    {
        const char *bad = NULL, *why = NULL;
        if (cli_durability_apply((struct cli *)o, &opts, &bad, &why) < 0)
            return usage_error(o->cmd_name, "%s '%s': %s", bad, getenv(bad),
                               why);
    }
    if (marks) {
        if (asprintf(&done_prefix, "%s" CLI_DONE_PREFIX_SUFFIX,
                     opts.key_prefix) < 0) {
            cli_err("out of memory");
            return CLI_EX_OSERR;
        }
        opts.key_prefix = done_prefix;
    }
    /* Holder info: who holds the lock, for status and list. extend
     * records none but renews the info of the hold it extends. */
    if (!marks &&
        (o->cmd == CMD_RUN || o->cmd == CMD_ACQUIRE || o->cmd == CMD_EXTEND)) {
        opts.holder_info = 1;
        cli_holder_label(o, label, sizeof label, &opts.holder_pid);
        opts.holder_label = label;
    }

    if (o->verbose && !marks) {
        for (size_t i = 0; i < o->nservers; i++) {
            cli_redact_url(o->servers[i], shown, sizeof shown);
            cli_verbose(o, "server %zu of %zu: %s (from %s)", i + 1,
                        o->nservers, shown, o->servers_from);
        }
        if (o->nservers > 1)
            cli_verbose(o, "Redlock over %zu servers: quorum %zu", o->nservers,
                        o->nservers / 2 + 1);
        else if (is_cluster_url(o->servers[0]))
            cli_verbose(o, "Redis Cluster: each lock on the master of its "
                           "key's slot, found from the seed nodes");
    }

    rc = dlock_client_new(out, &opts, err, sizeof err);
    free(done_prefix);
    if (rc != DLOCK_OK) {
        cli_err("%s%s%s%s", marks ? "the client for the done-markers: " : "",
                dlock_strerror(rc), *err ? ": " : "", err);
        switch (rc) {
        case DLOCK_EINVAL:
            return CLI_EX_USAGE;
        case DLOCK_ETLS:
            return CLI_EX_CONFIG;
        case DLOCK_ENOMEM:
            return CLI_EX_OSERR;
        default:
            return CLI_EX_UNAVAILABLE;
        }
    }
    if (o->insecure && !marks)
        cli_err("warning: --insecure: TLS certificates are not checked");
    return 0;
}

static const struct cmd_def commands[] = {
    {"run", CMD_RUN},       {"acquire", CMD_ACQUIRE}, {"release", CMD_RELEASE},
    {"extend", CMD_EXTEND}, {"status", CMD_STATUS},   {"check", CMD_CHECK},
    {"list", CMD_LIST},     {"limit", CMD_LIMIT},     {"elect", CMD_ELECT},
    {"leader", CMD_LEADER}, {NULL, CMD_RUN}};

int main(int argc, char **argv)
{
    struct cli o;
    const struct cmd_def *d;
    dlock_client *client = NULL, *marks = NULL;
    int rc;

    memset(&o, 0, sizeof o);
    o.wait_ms = -1;
    o.lease_ms = CLI_DEFAULT_LEASE_MS;
    o.grace_ms = CLI_DEFAULT_GRACE_MS;
    o.conflict_code = CLI_DEFAULT_CONFLICT_CODE;
    o.lost_code = CLI_DEFAULT_LOST_CODE;
    o.on_lost = ON_LOST_TERM;
    cli_durability_init(&o);
    o.done_code = CLI_DEFAULT_DONE_CODE;

    if (argc < 2)
        return usage_error(NULL, "missing command (run, acquire, release, "
                                 "extend, status, list, check, limit, elect or "
                                 "leader)");
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "help") == 0) {
        print_usage();
        return 0;
    }
    if (strcmp(argv[1], "-V") == 0 || strcmp(argv[1], "--version") == 0) {
        printf("dlock %s (libdlock %s)\n", DLOCK_VERSION, dlock_version());
        return 0;
    }
    for (d = commands; d->name != NULL; d++)
        if (strcmp(argv[1], d->name) == 0)
            break;
    if (d->name == NULL)
        return usage_error(NULL, "unknown command '%s'", argv[1]);
    o.cmd = d->cmd;
    o.cmd_name = d->name;

    rc = parse_args(&o, argc - 1, argv + 1);
    if (rc != 0) {
        rc = rc < 0 ? 0 : rc;
        goto out;
    }

    /* Before the client exists, so that its threads start with our
     * signals blocked. */
    if (cli_signals_setup() < 0) {
        cli_err("setting up signals: %s", strerror(errno));
        rc = CLI_EX_OSERR;
        goto out;
    }
    rc = make_client(&o, 0, &client);
    if (rc != 0)
        goto out;
    if (o.cmd == CMD_RUN && o.once_per_ms > 0) {
        rc = make_client(&o, 1, &marks);
        if (rc != 0) {
            dlock_client_free(client);
            goto out;
        }
    }

    switch (o.cmd) {
    case CMD_RUN:
        rc = cli_run(&o, client, marks);
        if (o.metrics_file != NULL)
            cli_metrics_write(&o, client, rc);
        break;
    case CMD_ACQUIRE:
        rc = cli_cmd_acquire(&o, client);
        break;
    case CMD_RELEASE:
        rc = cli_cmd_release(&o, client);
        break;
    case CMD_EXTEND:
        rc = cli_cmd_extend(&o, client);
        break;
    case CMD_STATUS:
        rc = cli_cmd_status(&o, client);
        break;
    case CMD_CHECK:
        rc = cli_cmd_check(&o, client);
        break;
    case CMD_LIST:
        rc = cli_cmd_list(&o, client);
        break;
    case CMD_LIMIT:
        rc = cli_cmd_limit(&o, client);
        break;
    case CMD_ELECT:
        rc = cli_elect(&o, client);
        break;
    case CMD_LEADER:
        rc = cli_leader(&o, client);
        break;
    }
    dlock_client_free(marks);
    dlock_client_free(client);
out:
    for (size_t i = 0; i < o.nservers; i++)
        free(o.servers[i]);
    free(o.servers);
    return rc;
}
