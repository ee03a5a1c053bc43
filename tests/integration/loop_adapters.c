/*
 * loop_adapters.c - the libuv and libevent adapters (dlock_loop_uv.h,
 * dlock_loop_event.h) drive a dlock_loop against a real redis-server: a
 * waiter woken by a release, then its own release, all from callbacks
 * inside uv_run / event_base_dispatch.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "dlock.h"
#include "dlock_loop.h"
#include "dlock_loop_event.h"
#include "dlock_loop_uv.h"
#include "harness.h"
#include "fixture.h"

/* The scenario, shared by both adapters: A takes the lock, B waits for
 * it; A's release wakes B; B releases; then stop() ends the loop. */
typedef struct scene {
    dlock_loop *la, *lb;
    dlock_hold *ha;
    int steps, b_status, failed;
    void (*stop)(struct scene *);
    void *base;
} scene;

static void b_released(dlock_op *op, int status, dlock_hold *h, void *ud)
{
    scene *s = ud;
    (void)op;
    (void)h;
    s->failed += status != DLOCK_OK;
    s->steps++;
    s->stop(s);
}

static void b_got(dlock_op *op, int status, dlock_hold *h, void *ud)
{
    scene *s = ud;
    (void)op;
    s->b_status = status;
    s->steps++;
    if (status != DLOCK_OK ||
        dlock_loop_release(NULL, s->lb, h, b_released, s) != DLOCK_OK)
        s->stop(s);
}

static void a_released(dlock_op *op, int status, dlock_hold *h, void *ud)
{
    scene *s = ud;
    (void)op;
    (void)h;
    s->failed += status != DLOCK_OK;
    s->steps++;
}

static void a_got(dlock_op *op, int status, dlock_hold *h, void *ud)
{
    scene *s = ud;
    dlock_loop_acquire o;
    (void)op;
    s->steps++;
    if (status != DLOCK_OK) {
        s->failed++;
        s->stop(s);
        return;
    }
    s->ha = h;
    dlock_loop_acquire_init(&o, NULL);
    o.wait_ms = 20000;
    o.strategy = DLOCK_WAIT_FAIR;
    dlock_loop_lock(NULL, s->lb, "la:x", &o, b_got, s);
    /* Release from A once B had time to queue: released on A's next
     * renewal-free tick, from B's first answer being in: simply now; B's
     * wait then either finds it free or is handed it. */
    dlock_loop_release(NULL, s->la, h, a_released, s);
}

static void start(scene *s)
{
    dlock_loop_acquire o;
    dlock_loop_acquire_init(&o, NULL);
    o.lease_ms = 60000;
    assert_int_equal(dlock_loop_lock(NULL, s->la, "la:x", &o, a_got, s),
                     DLOCK_OK);
}

static void uv_stop_scene(scene *s)
{
    uv_stop((uv_loop_t *)s->base);
}

static void test_uv(void **state)
{
    dlock_client *c = fixture_client(DLOCK_WAIT_FAIR, 0, 0);
    uv_loop_t uvl;
    dlock_loop_uv aa, ab;
    scene s;
    (void)state;
    memset(&s, 0, sizeof s);
    assert_int_equal(uv_loop_init(&uvl), 0);
    assert_int_equal(dlock_loop_new(&s.la, c), DLOCK_OK);
    assert_int_equal(dlock_loop_new(&s.lb, c), DLOCK_OK);
    s.stop = uv_stop_scene;
    s.base = &uvl;
    assert_int_equal(dlock_loop_uv_attach(&aa, &uvl, s.la), 0);
    assert_int_equal(dlock_loop_uv_attach(&ab, &uvl, s.lb), 0);
    start(&s);
    uv_run(&uvl, UV_RUN_DEFAULT);
    assert_int_equal(s.failed, 0);
    assert_int_equal(s.b_status, DLOCK_OK);
    assert_int_equal(s.steps, 4);
    dlock_loop_uv_detach(&aa);
    dlock_loop_uv_detach(&ab);
    uv_run(&uvl, UV_RUN_NOWAIT);
    assert_int_equal(uv_loop_close(&uvl), 0);
    dlock_loop_free(s.la);
    dlock_loop_free(s.lb);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{la:x}"), 0);
    dlock_client_free(c);
}

static void ev_stop_scene(scene *s)
{
    event_base_loopbreak((struct event_base *)s->base);
}

static void test_libevent(void **state)
{
    dlock_client *c = fixture_client(DLOCK_WAIT_FAIR, 0, 0);
    struct event_base *base = event_base_new();
    dlock_loop_event aa, ab;
    scene s;
    (void)state;
    memset(&s, 0, sizeof s);
    assert_non_null(base);
    assert_int_equal(dlock_loop_new(&s.la, c), DLOCK_OK);
    assert_int_equal(dlock_loop_new(&s.lb, c), DLOCK_OK);
    s.stop = ev_stop_scene;
    s.base = base;
    assert_int_equal(dlock_loop_event_attach(&aa, base, s.la), 0);
    assert_int_equal(dlock_loop_event_attach(&ab, base, s.lb), 0);
    start(&s);
    event_base_dispatch(base);
    assert_int_equal(s.failed, 0);
    assert_int_equal(s.b_status, DLOCK_OK);
    assert_int_equal(s.steps, 4);
    dlock_loop_event_detach(&aa);
    dlock_loop_event_detach(&ab);
    event_base_free(base);
    dlock_loop_free(s.la);
    dlock_loop_free(s.lb);
    assert_int_equal(th_cmd_int(&srv, "EXISTS dlock:{la:x}"), 0);
    dlock_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uv),
        cmocka_unit_test(test_libevent),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
