/*
 * args.c - the dlock tool's command line and DLOCK_SERVERS: the options
 * each subcommand accepts, their values checked (a usage error names the
 * option and what is wrong), the KEYs, COMMAND, and the server list.
 * Called by dlock.c; calls durability.c, usage.c, report.c, util.c.
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"

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
    {"fence-retention", required_argument, NULL, CLI_OPT_FENCE_RETENTION},
    {"layout", required_argument, NULL, CLI_OPT_LAYOUT},
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
    case CLI_OPT_FENCE_RETENTION:
    case CLI_OPT_LAYOUT:
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
        return cli_usage_error(o->cmd_name, "more than %d KEYs",
                               DLOCK_MULTI_MAX);
    for (int i = optind + 1; i < end; i++) {
        if (argv[i][0] == '-')
            return cli_usage_error(o->cmd_name,
                                   "'%s' after KEY: options go before KEY "
                                   "(use -- before a COMMAND starting with -)",
                                   argv[i]);
        if (*argv[i] == '\0')
            return cli_usage_error(o->cmd_name, "KEY must not be empty");
        if (strlen(argv[i]) > 512)
            return cli_usage_error(o->cmd_name, "KEY is longer than 512 bytes");
        for (int j = optind; j < i; j++)
            if (strcmp(argv[i], argv[j]) == 0)
                return cli_usage_error(o->cmd_name, "KEY '%s' is given twice",
                                       argv[i]);
    }
    o->nkeys = (size_t)(end - optind);
    if (o->once_per_ms > 0)
        return cli_usage_error(o->cmd_name,
                               "--once-per takes one KEY (the done-marker is "
                               "named after it)");
    if (o->limit > 0 || o->shared)
        return cli_usage_error(
            o->cmd_name, "--limit and --shared take one KEY (several keys "
                         "are exclusive locks, taken all or nothing)");
    return 0;
}

/* What an option group answers for an option that is not its own. */
#define NOT_HERE 1

/* Options of the client: servers, credentials, TLS, key prefix, timeout,
 * durability, verbosity. Returns 0 when OPT was applied, NOT_HERE when
 * OPT is not one of these, else the exit status after printing the problem. */
static int client_option(struct cli *o, int opt)
{
    const char *why;
    char name[32];

    switch (opt) {
    case 's':
        if (cli_add_server(o, optarg) < 0) {
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
            return cli_usage_error(o->cmd_name, "--timeout '%s': %s", optarg,
                                   why);
        if (o->timeout_ms <= 0)
            return cli_usage_error(
                o->cmd_name, "--timeout '%s': must be more than 0", optarg);
        break;
    case CLI_OPT_WAIT_REPLICAS:
    case CLI_OPT_WAIT_REPLICAS_TIMEOUT:
    case CLI_OPT_LOCK_DELAY:
    case CLI_OPT_FENCE_RETENTION:
    case CLI_OPT_LAYOUT:
        if (cli_durability_opt(o, opt, optarg, &why) < 0) {
            option_name(opt, name, sizeof name);
            return cli_usage_error(o->cmd_name, "%s '%s': %s", name, optarg,
                                   why);
        }
        break;
    case 'v':
        o->verbose = 1;
        break;
    default:
        return NOT_HERE;
    }
    return 0;
}

/* Options of time: wait, lease, grace, the once-per slot, the hold's
 * bounds. Returns as client_option. */
static int timing_option(struct cli *o, int opt)
{
    const char *why;
    char name[32];

    switch (opt) {
    case 'w':
        if (cli_parse_seconds(optarg, &o->wait_ms, &why) < 0)
            return cli_usage_error(o->cmd_name, "--wait '%s': %s", optarg, why);
        break;
    case 'n':
        o->wait_ms = 0;
        break;
    case 'l':
        if (cli_parse_seconds(optarg, &o->lease_ms, &why) < 0)
            return cli_usage_error(o->cmd_name, "--lease '%s': %s", optarg,
                                   why);
        if (o->lease_ms <= 0)
            return cli_usage_error(o->cmd_name,
                                   "--lease '%s': must be more than 0", optarg);
        if (o->lease_ms < CLI_MIN_LEASE_MS)
            return cli_usage_error(o->cmd_name,
                                   "--lease '%s': below the minimum of %.1f "
                                   "s (the lease must outlast a round trip "
                                   "and the clock drift allowance, and be "
                                   "renewed every third of it)",
                                   optarg, CLI_MIN_LEASE_MS / 1000.0);
        break;
    case OPT_GRACE:
        if (cli_parse_seconds(optarg, &o->grace_ms, &why) < 0)
            return cli_usage_error(o->cmd_name, "--grace '%s': %s", optarg,
                                   why);
        break;
    case OPT_ONCE_PER:
        if (cli_parse_seconds(optarg, &o->once_per_ms, &why) < 0)
            return cli_usage_error(o->cmd_name, "--once-per '%s': %s", optarg,
                                   why);
        if (o->once_per_ms < CLI_MIN_ONCE_PER_MS)
            return cli_usage_error(o->cmd_name,
                                   "--once-per '%s': must be at least 1 s "
                                   "(a slot must be far longer than the "
                                   "clock skew between the machines)",
                                   optarg);
        break;
    case OPT_SLOT:
        why = cli_check_slot_name(optarg);
        if (why != NULL)
            return cli_usage_error(o->cmd_name, "--slot '%s': %s", optarg, why);
        o->slot = optarg;
        break;
    case OPT_MIN_HOLD:
    case OPT_MAX_HOLD: {
        int64_t *ms = opt == OPT_MIN_HOLD ? &o->min_hold_ms : &o->max_hold_ms;

        option_name(opt, name, sizeof name);
        if (cli_parse_seconds(optarg, ms, &why) < 0)
            return cli_usage_error(o->cmd_name, "%s '%s': %s", name, optarg,
                                   why);
        if (*ms <= 0)
            return cli_usage_error(o->cmd_name, "%s '%s': must be more than 0",
                                   name, optarg);
        break;
    }
    default:
        return NOT_HERE;
    }
    return 0;
}

/* Options of exit codes and of what a lost lock does to COMMAND.
 * Returns as client_option. */
static int exits_option(struct cli *o, int opt)
{
    switch (opt) {
    case 'E':
        if (cli_parse_code(optarg, &o->conflict_code) < 0)
            return cli_usage_error(o->cmd_name,
                                   "--conflict-exit-code '%s': not a status "
                                   "from 0 to 255",
                                   optarg);
        break;
    case 'L':
        if (cli_parse_code(optarg, &o->lost_code) < 0)
            return cli_usage_error(o->cmd_name,
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
            return cli_usage_error(o->cmd_name,
                                   "--on-lost '%s': not term, kill or ignore",
                                   optarg);
        break;
    case OPT_DONE_CODE:
        if (cli_parse_code(optarg, &o->done_code) < 0)
            return cli_usage_error(o->cmd_name,
                                   "--done-exit-code '%s': not a status "
                                   "from 0 to 255",
                                   optarg);
        break;
    default:
        return NOT_HERE;
    }
    return 0;
}

/* The other options (the kind of hold, output, owner, labels, files).
 * Also -h and -V: -1 after printing them. Returns as client_option. */
static int other_option(struct cli *o, int opt)
{
    switch (opt) {
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
            return cli_usage_error(o->cmd_name, "--metrics-file is empty");
        o->metrics_file = optarg;
        break;
    case OPT_LABEL:
        if (strlen(optarg) >= DLOCK_LABEL_MAX)
            return cli_usage_error(o->cmd_name,
                                   "--label is longer than %d bytes",
                                   DLOCK_LABEL_MAX - 1);
        o->label = optarg;
        break;
    case OPT_LIMIT:
        if (cli_parse_limit(optarg, &o->limit) < 0)
            return cli_usage_error(o->cmd_name,
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
            return cli_usage_error(o->cmd_name,
                                   "--value is longer than %d bytes",
                                   DLOCK_VALUE_MAX);
        o->value = optarg;
        break;
    case OPT_READY_FILE:
        if (*optarg == '\0')
            return cli_usage_error(o->cmd_name,
                                   "--ready-file must not be empty");
        o->ready_file = optarg;
        break;
    case OPT_WATCH:
        o->watch = 1;
        break;

    case 'h':
        cli_print_usage();
        return -1;
    case 'V':
        printf("dlock %s (libdlock %s)\n", DLOCK_VERSION, dlock_version());
        return -1;
    default:
        return NOT_HERE;
    }
    return 0;
}

/* KEY (or KEYs), then COMMAND (run, elect), TOKEN (check) or N (limit)
 * from argv[optind..]. 0, or the exit status after printing the problem. */
static int positionals(struct cli *o, int argc, char **argv)
{
    int positional;

    positional = argc - optind;
    if (o->cmd == CMD_LIST && positional == 0)
        o->key = "*"; /* every lock */
    else if (positional < 1)
        return cli_usage_error(o->cmd_name, "missing KEY");
    else
        o->key = argv[optind];
    if (*o->key == '\0')
        return cli_usage_error(o->cmd_name, "KEY must not be empty");
    if (strlen(o->key) > 512)
        return cli_usage_error(o->cmd_name, "KEY is longer than 512 bytes");
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
            return cli_usage_error(o->cmd_name, "missing COMMAND after KEY");
        if ((*cmd)[0] == '-' && cmd == argv + optind + o->nkeys)
            return cli_usage_error(o->cmd_name,
                                   "'%s' after KEY: options go before KEY "
                                   "(use -- before a COMMAND starting with -)",
                                   *cmd);
        o->command = cmd;
    } else if (o->cmd == CMD_CHECK) {
        const char *tok =
            positional > 1 ? argv[optind + 1] : getenv("DLOCK_FENCING_TOKEN");
        if (positional > 2)
            return cli_usage_error(o->cmd_name, "unexpected argument '%s'",
                                   argv[optind + 2]);
        if (tok == NULL)
            return cli_usage_error(o->cmd_name, "missing TOKEN (give it or set "
                                                "DLOCK_FENCING_TOKEN)");
        if (cli_parse_token(tok, &o->token) < 0)
            return cli_usage_error(
                o->cmd_name, "TOKEN '%s': not a fencing token (1 to 2^53)",
                tok);
    } else if (o->cmd == CMD_LIMIT) {
        if (positional != 2)
            return cli_usage_error(o->cmd_name, "expected KEY N");
        if (cli_parse_limit(argv[optind + 1], &o->limit) < 0)
            return cli_usage_error(o->cmd_name,
                                   "N '%s': not a number from 1 to %d",
                                   argv[optind + 1], DLOCK_SEM_LIMIT_MAX);
    } else if (positional > 1) {
        return cli_usage_error(o->cmd_name, "unexpected argument '%s'",
                               argv[optind + 1]);
    }
    return 0;
}

/* The options that go together or exclude each other, once all are read.
 * 0, or the exit status after printing the problem. */
static int combinations(struct cli *o)
{
    if (o->slot != NULL && o->once_per_ms == 0)
        return cli_usage_error(
            o->cmd_name, "--slot needs --once-per SECONDS: how long the "
                         "slot's done-marker must last (at least until "
                         "no machine starts a run for that slot any more)");
    if (o->slot != NULL && strlen(o->key) + 1 + strlen(o->slot) > 512)
        return cli_usage_error(o->cmd_name,
                               "KEY and --slot together are longer than 511 "
                               "bytes (the done-marker is named KEY:SLOT)");
    if (o->slot == NULL && o->once_per_ms > 0 && strlen(o->key) > 480)
        return cli_usage_error(
            o->cmd_name, "KEY is longer than 480 bytes: too long for "
                         "--once-per (the done-marker is named KEY:SLOT)");
    if (o->once_per_ms > 0 && (o->shared || o->limit > 0))
        /* Its promise (two runs cannot both find the slot not done and
         * both succeed) rests on holding KEY alone from the slot's check
         * to its marker; readers and permits are held by several. */
        return cli_usage_error(
            o->cmd_name,
            "--once-per needs the lock itself, not %s: only a "
            "run holding KEY alone can check the slot, run "
            "COMMAND and mark the slot done without another "
            "run doing the same",
            o->shared ? "--shared" : "--limit");
    if (o->done_code != CLI_DEFAULT_DONE_CODE && o->once_per_ms == 0)
        return cli_usage_error(o->cmd_name,
                               "--done-exit-code applies only with --once-per");
    if (o->min_hold_ms > 0 && o->max_hold_ms > 0 &&
        o->min_hold_ms > o->max_hold_ms)
        return cli_usage_error(
            o->cmd_name,
            "--min-hold is longer than --max-hold: the lock "
            "cannot be held at least %.3f s and at most %.3f s",
            o->min_hold_ms / 1000.0, o->max_hold_ms / 1000.0);
    if (o->shared && o->limit > 0)
        return cli_usage_error(o->cmd_name,
                               "--limit and --shared: a name is a semaphore or "
                               "a read-write lock, not both");
    if (o->prefer_readers && !o->shared)
        return cli_usage_error(o->cmd_name, "--prefer-readers needs --shared");
    if (o->cmd == CMD_EXTEND || o->cmd == CMD_RELEASE) {
        if (o->owner == NULL)
            o->owner = getenv("DLOCK_OWNER");
        if (o->owner == NULL || *o->owner == '\0')
            return cli_usage_error(o->cmd_name,
                                   "no owner: give --owner or set DLOCK_OWNER");
    }
    return 0;
}

/*
 * Parse argv for subcommand O->cmd (argv[0] is the subcommand's name).
 * run stops at KEY like flock(1) ("+"): options go before KEY, and what
 * follows KEY (after an optional "--") is COMMAND. The other subcommands
 * take options anywhere. Returns 0, CLI_EX_USAGE after printing the
 * problem, or -1 for "--help/--version printed: exit 0".
 */
int cli_parse_args(struct cli *o, int argc, char **argv)
{
    const char *shorts = o->cmd == CMD_RUN || o->cmd == CMD_ELECT
                             ? "+:s:vw:nl:E:L:hV"
                             : ":s:vw:nl:E:L:hV";
    char name[32];
    int opt, rc;

    opterr = 0;
    optind = 1;
    while ((opt = getopt_long(argc, argv, shorts, long_options, NULL)) != -1) {
        if (opt == '?') {
            if (optopt > 0 && optopt < 256)
                return cli_usage_error(o->cmd_name, "unknown option '-%c'",
                                       optopt);
            return cli_usage_error(o->cmd_name, "unknown option '%s'",
                                   argv[optind - 1]);
        }
        if (opt == ':') {
            option_name(optopt, name, sizeof name);
            return cli_usage_error(o->cmd_name, "option '%s' needs a value",
                                   name);
        }
        if (!accepts(o->cmd, opt)) {
            option_name(opt, name, sizeof name);
            return cli_usage_error(o->cmd_name,
                                   "option '%s' does not apply to %s", name,
                                   o->cmd_name);
        }
        rc = client_option(o, opt);
        if (rc == NOT_HERE)
            rc = timing_option(o, opt);
        if (rc == NOT_HERE)
            rc = exits_option(o, opt);
        if (rc == NOT_HERE)
            rc = other_option(o, opt);
        if (rc != 0)
            return rc;
    }

    rc = positionals(o, argc, argv);
    if (rc == 0)
        rc = combinations(o);
    if (rc != 0)
        return rc;
    if (o->nservers == 0)
        return cli_default_servers(o);
    return 0;
}
