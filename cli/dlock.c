/*
 * dlock.c - the `dlock` command-line tool: flock(1) across machines.
 *
 * `dlock run KEY -- COMMAND` holds the Redis lock KEY while COMMAND runs
 * (run.c); `dlock acquire`, `release` and `extend` let a shell script hold a
 * lock across several commands; `dlock status` shows what the servers know
 * about a lock (commands.c). This file is the top of the tool: it has the
 * command line parsed (args.c), makes the dlock_client from the options
 * and the environment (and for --once-per a second one for the
 * done-markers) and hands it to the subcommand. Calls run downward (see
 * cli.h). It uses include/dlock.h only.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"

/* The subcommands by name. */
struct cmd_def {
    const char *name;
    enum cli_cmd cmd;
};

/* Take an environment variable only when it is set and not empty. */
static const char *env_nonempty(const char *name)
{
    const char *v = getenv(name);

    return v != NULL && *v != '\0' ? v : NULL;
}

/* --verbose: the servers the client is made for, and what they are. */
static void say_servers(const struct cli *o)
{
    char shown[512];
    for (size_t i = 0; i < o->nservers; i++) {
        cli_redact_url(o->servers[i], shown, sizeof shown);
        cli_verbose(o, "server %zu of %zu: %s (from %s)", i + 1, o->nservers,
                    shown, o->servers_from);
    }
    if (o->nservers > 1)
        cli_verbose(o, "Redlock over %zu servers: quorum %zu", o->nservers,
                    o->nservers / 2 + 1);
    else if (cli_is_cluster_url(o->servers[0]))
        cli_verbose(o, "Redis Cluster: each lock on the master of its "
                       "key's slot, found from the seed nodes");
}

/* The exit status of a dlock_client_new that failed with rc. */
static int new_failed(int rc)
{
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

/*
 * Fill opts (initialised) from the options and the environment: the
 * servers, credentials, key prefix, TLS files, timeout, durability.
 * Returns 0, or an exit status after printing why (a usage error).
 */
static int client_options(const struct cli *o, dlock_options *opts)
{
    const char *env;
    int64_t timeout_ms;

    opts->servers = (const char *const *)o->servers;
    opts->nservers = o->nservers;
    opts->username = o->user != NULL ? o->user : env_nonempty("DLOCK_USER");
    opts->password = env_nonempty("DLOCK_PASSWORD");
    if (o->prefix != NULL)
        opts->key_prefix = o->prefix;
    else if (env_nonempty("DLOCK_PREFIX") != NULL)
        opts->key_prefix = env_nonempty("DLOCK_PREFIX");
    opts->tls_ca_file =
        o->cacert != NULL ? o->cacert : env_nonempty("DLOCK_CACERT");
    opts->tls_cert_file =
        o->tls_cert != NULL ? o->tls_cert : env_nonempty("DLOCK_TLS_CERT");
    opts->tls_key_file =
        o->tls_key != NULL ? o->tls_key : env_nonempty("DLOCK_TLS_KEY");
    opts->tls_insecure = o->insecure;
    if ((opts->tls_cert_file == NULL) != (opts->tls_key_file == NULL))
        return cli_usage_error(
            o->cmd_name,
            "%s without %s: a client certificate needs its "
            "private key",
            opts->tls_cert_file != NULL ? "--cert (or DLOCK_TLS_CERT)"
                                        : "--key (or DLOCK_TLS_KEY)",
            opts->tls_cert_file != NULL ? "--key (or DLOCK_TLS_KEY)"
                                        : "--cert (or DLOCK_TLS_CERT)");
    timeout_ms = o->timeout_ms;
    if (timeout_ms == 0 && (env = env_nonempty("DLOCK_TIMEOUT")) != NULL) {
        const char *why = NULL;
        if (cli_parse_seconds(env, &timeout_ms, &why) < 0 || timeout_ms <= 0)
            return cli_usage_error(o->cmd_name, "DLOCK_TIMEOUT '%s': %s", env,
                                   why != NULL ? why : "must be more than 0");
    }
    if (timeout_ms > 0)
        opts->connect_timeout_ms = opts->command_timeout_ms = timeout_ms;
    {
        const char *bad = NULL, *why = NULL;
        if (cli_durability_apply((struct cli *)o, opts, &bad, &why) < 0)
            return cli_usage_error(o->cmd_name, "%s '%s': %s", bad, getenv(bad),
                                   why);
    }
    return 0;
}

/*
 * How long the library's wait rides an outage in a row (dlock.1,
 * DLOCK_OUTAGE_RIDE): by default the whole wait (-w bounds it), so a wait
 * is never cut short by one; with DLOCK_OUTAGE_RIDE set the library's
 * wait gives up after that long and dlock starts it again while -w lasts
 * (hold.c: ride_on). Returns 0, or CLI_EX_USAGE after printing why.
 */
static int set_outage_ride(const struct cli *o, dlock_client *c)
{
    const char *env = env_nonempty("DLOCK_OUTAGE_RIDE"), *why = NULL;
    int64_t ms = -1;
    if (env != NULL && (cli_parse_seconds(env, &ms, &why) < 0 || ms <= 0))
        return cli_usage_error(o->cmd_name, "DLOCK_OUTAGE_RIDE '%s': %s", env,
                               why != NULL ? why : "must be more than 0");
    if (dlock_client_set_outage_ride_ms(c, ms) != DLOCK_OK) {
        cli_err("DLOCK_OUTAGE_RIDE: %s", dlock_errmsg(c));
        return CLI_EX_USAGE;
    }
    return 0;
}

/*
 * Create the client from the options and the environment (DLOCK_USER,
 * DLOCK_PASSWORD, DLOCK_CACERT, DLOCK_TLS_CERT, DLOCK_TLS_KEY,
 * DLOCK_PREFIX, DLOCK_TIMEOUT, DLOCK_OUTAGE_RIDE). With MARKS set, the client for the
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
    char *done_prefix = NULL;
    char label[DLOCK_LABEL_MAX];
    int rc;

    dlock_options_init(&opts);
    if ((rc = client_options(o, &opts)) != 0)
        return rc;
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

    /* The string layout records no holder info (dlock.h); over several
     * servers (Redlock) it has no fair queue: its waits are notify. */
    if (!marks && o->layout == DLOCK_LAYOUT_STRING) {
        opts.holder_info = 0;
        if (opts.nservers > 1)
            opts.wait_strategy = DLOCK_WAIT_NOTIFY;
    }

    if (o->verbose && !marks)
        say_servers(o);

    rc = dlock_client_new(out, &opts, err, sizeof err);
    free(done_prefix);
    if (rc == DLOCK_OK && !marks && o->layout == DLOCK_LAYOUT_STRING &&
        dlock_client_set_layout(*out, DLOCK_LAYOUT_STRING) != DLOCK_OK) {
        cli_err("--layout string: %s", dlock_errmsg(*out));
        dlock_client_free(*out);
        *out = NULL;
        return CLI_EX_USAGE;
    }
    if (rc != DLOCK_OK) {
        cli_err("%s%s%s%s", marks ? "the client for the done-markers: " : "",
                dlock_strerror(rc), *err ? ": " : "", err);
        return new_failed(rc);
    }
    if (!marks && (rc = set_outage_ride(o, *out)) != 0) {
        dlock_client_free(*out);
        *out = NULL;
        return rc;
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

/* o with every setting at its default, before the command line. */
static void defaults(struct cli *o)
{
    memset(o, 0, sizeof *o);
    o->wait_ms = -1;
    o->lease_ms = CLI_DEFAULT_LEASE_MS;
    o->grace_ms = CLI_DEFAULT_GRACE_MS;
    o->conflict_code = CLI_DEFAULT_CONFLICT_CODE;
    o->lost_code = CLI_DEFAULT_LOST_CODE;
    o->on_lost = ON_LOST_TERM;
    cli_durability_init(o);
    o->done_code = CLI_DEFAULT_DONE_CODE;
}

/* Run the subcommand o->cmd with its client (and the done-markers'
 * client of run --once-per, else NULL). Its exit status. */
static int dispatch(struct cli *o, dlock_client *client, dlock_client *marks)
{
    int rc = 0;

    switch (o->cmd) {
    case CMD_RUN:
        rc = cli_run(o, client, marks);
        if (o->metrics_file != NULL)
            cli_metrics_write(o, client, rc);
        break;
    case CMD_ACQUIRE:
        rc = cli_cmd_acquire(o, client);
        break;
    case CMD_RELEASE:
        rc = cli_cmd_release(o, client);
        break;
    case CMD_EXTEND:
        rc = cli_cmd_extend(o, client);
        break;
    case CMD_STATUS:
        rc = cli_cmd_status(o, client);
        break;
    case CMD_CHECK:
        rc = cli_cmd_check(o, client);
        break;
    case CMD_LIST:
        rc = cli_cmd_list(o, client);
        break;
    case CMD_LIMIT:
        rc = cli_cmd_limit(o, client);
        break;
    case CMD_ELECT:
        rc = cli_elect(o, client);
        break;
    case CMD_LEADER:
        rc = cli_leader(o, client);
        break;
    }
    return rc;
}

int main(int argc, char **argv)
{
    struct cli o;
    const struct cmd_def *d;
    dlock_client *client = NULL, *marks = NULL;
    int rc;

    defaults(&o);

    if (argc < 2)
        return cli_usage_error(NULL,
                               "missing command (run, acquire, release, "
                               "extend, status, list, check, limit, elect or "
                               "leader)");
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "help") == 0) {
        cli_print_usage();
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
        return cli_usage_error(NULL, "unknown command '%s'", argv[1]);
    o.cmd = d->cmd;
    o.cmd_name = d->name;

    rc = cli_parse_args(&o, argc - 1, argv + 1);
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

    rc = dispatch(&o, client, marks);
    dlock_client_free(marks);
    dlock_client_free(client);
out:
    for (size_t i = 0; i < o.nservers; i++)
        free(o.servers[i]);
    free(o.servers);
    return rc;
}
