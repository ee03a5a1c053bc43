/*
 * holder.c - who holds a lock, as the dlock tool shows it: the label it
 * records for its own holds (COMMAND's words, the caller of `dlock
 * acquire`, or --label), and the sentence that names a holder in
 * `status`, `list`, and the -v messages of a busy or timed-out acquire:
 *
 *   held by HOST pid PID `COMMAND` for 3m12s, token T, lease 21 s left
 *
 * It calls include/dlock.h and report.c only.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* Cut S (LEN bytes of room) to at most MAX bytes without splitting a UTF-8
 * sequence. */
static void cut_utf8(char *s, size_t max)
{
    size_t n = strlen(s);
    if (n <= max)
        return;
    n = max;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    s[n] = '\0';
}

/* Append the words of ARGV, separated by blanks, to BUF (LEN bytes). */
static void join_words(char *buf, size_t len, char *const *argv)
{
    size_t used = strlen(buf);
    for (; *argv != NULL && used + 1 < len; argv++) {
        int n =
            snprintf(buf + used, len - used, "%s%s", used ? " " : "", *argv);
        if (n < 0)
            break;
        used += (size_t)n;
        if (used >= len)
            used = len - 1;
    }
}

/* The command line of process PID, words joined by blanks, into BUF; ""
 * when it cannot be read. */
static void proc_cmdline(long pid, char *buf, size_t len)
{
    char path[64];
    ssize_t n;
    int fd;

    buf[0] = '\0';
    snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    n = read(fd, buf, len - 1);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    while (n > 0 && buf[n - 1] == '\0')
        n--;
    for (ssize_t i = 0; i < n; i++)
        if (buf[i] == '\0')
            buf[i] = ' ';
}

/* See cli.h. */
void cli_holder_label(const struct cli *o, char *buf, size_t len, int64_t *pid)
{
    buf[0] = '\0';
    *pid = 0;
    if (o->cmd == CMD_ACQUIRE) {
        /* dlock acquire exits at once: the holder is its caller. */
        *pid = (int64_t)getppid();
        if (o->label == NULL)
            proc_cmdline((long)*pid, buf, len);
    }
    if (o->label != NULL)
        snprintf(buf, len, "%s", o->label);
    else if (o->cmd == CMD_RUN && o->command != NULL)
        join_words(buf, len, o->command);
    cut_utf8(buf, len < DLOCK_LABEL_MAX ? len - 1 : DLOCK_LABEL_MAX - 1);
}

/* See cli.h. "3m12s", "45s", "1h02m", "2d03h"; under a second "420ms". */
void cli_format_age(int64_t ms, char *out, size_t len)
{
    int64_t s = ms / 1000;
    if (ms < 0)
        snprintf(out, len, "?");
    else if (s < 1)
        snprintf(out, len, "%lldms", (long long)ms);
    else if (s < 60)
        snprintf(out, len, "%llds", (long long)s);
    else if (s < 3600)
        snprintf(out, len, "%lldm%02llds", (long long)(s / 60),
                 (long long)(s % 60));
    else if (s < 86400)
        snprintf(out, len, "%lldh%02lldm", (long long)(s / 3600),
                 (long long)(s % 3600 / 60));
    else
        snprintf(out, len, "%lldd%02lldh", (long long)(s / 86400),
                 (long long)(s % 86400 / 3600));
}

/* A remaining lease: "21 s" (whole seconds, rounded down), or "350 ms"
 * under a second. */
static void format_left(int64_t ms, char *out, size_t len)
{
    if (ms < 1000)
        snprintf(out, len, "%lld ms", (long long)(ms < 0 ? 0 : ms));
    else
        snprintf(out, len, "%lld s", (long long)(ms / 1000));
}

/* See cli.h. A label is anybody's text and must not drive the terminal. */
void cli_printable(const char *s, char *out, size_t len)
{
    size_t i;
    for (i = 0; s[i] != '\0' && i + 1 < len; i++)
        out[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    out[i] = '\0';
}

/* See cli.h. */
void cli_describe_holder(const dlock_info *info, char *buf, size_t len)
{
    char age[32], left[32], label[DLOCK_LABEL_MAX], host[DLOCK_HOST_MAX];
    size_t used;

    if (!info->held) {
        snprintf(buf, len, "free");
        return;
    }
    format_left(info->ttl_ms, left, sizeof left);
    if (info->has_holder) {
        cli_printable(info->holder_host, host, sizeof host);
        cli_printable(info->holder_label, label, sizeof label);
        cli_format_age(info->held_ms, age, sizeof age);
        snprintf(buf, len, "held by %s pid %lld%s%s%s for %s", host,
                 (long long)info->holder_pid, label[0] ? " `" : "", label,
                 label[0] ? "`" : "", age);
    } else {
        snprintf(buf, len, "held by owner %s (no holder info)", info->owner);
    }
    used = strlen(buf);
    snprintf(buf + used, len - used, ", token %llu, lease %s left",
             (unsigned long long)info->last_token, left);
}

/* See cli.h. */
void cli_holder_json(FILE *f, const dlock_info *info)
{
    if (!info->held || !info->has_holder) {
        fputs("null", f);
        return;
    }
    fputs("{\"host\":", f);
    cli_json_string(f, info->holder_host);
    fprintf(f, ",\"pid\":%lld,\"label\":", (long long)info->holder_pid);
    cli_json_string(f, info->holder_label);
    fputs(",\"version\":", f);
    cli_json_string(f, info->holder_version);
    if (info->held_ms >= 0)
        fprintf(f, ",\"held_ms\":%lld}", (long long)info->held_ms);
    else
        fputs(",\"held_ms\":null}", f);
}

/* See cli.h. */
void cli_say_holder(const struct cli *o, dlock_client *c, const char *what)
{
    dlock_info info;
    char who[DLOCK_LABEL_MAX + DLOCK_HOST_MAX + 160];

    if (!o->verbose)
        return;
    if (dlock_lock_inspect(c, o->key, &info) != DLOCK_OK || !info.held) {
        cli_verbose(o, "\"%s\": %s", o->key, what);
        return;
    }
    cli_describe_holder(&info, who, sizeof who);
    cli_verbose(o, "\"%s\" is %s: %s", o->key, who, what);
}
