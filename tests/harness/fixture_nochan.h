/*
 * fixture_nochan.h - a server with a user that may not use pub/sub
 * (ACL "nochan", password "pw": every key and command, no channel), for
 * the tests of waiting without notifications. Include once per test file,
 * after <cmocka.h>, "dlock.h" and "harness.h"; it defines srv and
 * setup/teardown for cmocka_run_group_tests() (as fixture.h does).
 */
#ifndef TH_FIXTURE_NOCHAN_H
#define TH_FIXTURE_NOCHAN_H

static th_server srv;

static int setup(void **state)
{
    redisReply *r;
    (void)state;
    if (th_server_start(&srv, NULL) != 0)
        return -1;
    r = th_cmd(&srv, "ACL SETUSER nochan on >pw ~* +@all resetchannels");
    if (r == NULL || r->type != REDIS_REPLY_STATUS)
        return -1;
    freeReplyObject(r);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    th_server_stop(&srv);
    return 0;
}

#endif /* TH_FIXTURE_NOCHAN_H */
