/* A detached mount (ptc_mount_run without foreground) reports how its start
 * ended (issue 33, item 7): the parent returns the error of a child whose
 * ready callback failed (code and message; nothing stays mounted), and
 * exits 0 only once the child serves. Mounts for real; skips without FUSE. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "ptc/build_config.h"
#include "ptc/mount.h"
#include "ptc/view.h"

static char mnt[256];

static bool is_mounted(void)
{
    struct stat a, b;
    char up[300];
    snprintf(up, sizeof up, "%s/..", mnt);
    return stat(mnt, &a) == 0 && stat(up, &b) == 0 && a.st_dev != b.st_dev;
}

static int ready_fails(void *user)
{
    (void)user;
    return ptc_error_set(PTC_E_STORE, "store S: corrupt metadata (the test's)");
}

static int ready_ok(void *user)
{
    (void)user;
    return PTC_OK;
}

/* Run ptc_mount_run detached in a helper process, which has ended when
 * this returns (its exit status in *st); the helper (the parent of the
 * detach) sends back its return code and message, if it returned. */
static void run_detached(int (*ready)(void *), int *rc, char *msg, size_t cap, int *st)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t helper = fork();
    assert_true(helper >= 0);
    if (helper == 0) {
        close(p[0]);
        pid_t me = getpid();
        ptc_view *v;
        static const ptc_view_ops ops = {0};
        if (ptc_view_create(&v, &ops, NULL) != PTC_OK)
            _exit(3);
        ptc_mount_options o = {.ready = ready};
        int r = ptc_mount_run(v, mnt, &o);
        if (getpid() == me) { /* the parent of the detach: report */
            char buf[600];
            int n = snprintf(buf, sizeof buf, "%d %s", r, ptc_last_error());
            if (write(p[1], buf, (size_t)n) != n)
                _exit(4);
        }
        ptc_view_destroy(v);
        _exit(0);
    }
    close(p[1]);
    assert_int_equal(waitpid(helper, st, 0), helper);
    /* the serving child holds the pipe too: read what is there, no more */
    assert_int_equal(fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
    char buf[600] = "";
    ssize_t n = read(p[0], buf, sizeof buf - 1);
    close(p[0]);
    *rc = 0;
    msg[0] = 0;
    if (n > 0) {
        buf[n] = 0;
        char *sp = strchr(buf, ' ');
        *rc = atoi(buf);
        snprintf(msg, cap, "%s", sp ? sp + 1 : "");
    }
}

static void test_ready_fails(void **state)
{
    (void)state;
    int rc, st;
    char msg[600];
    run_detached(ready_fails, &rc, msg, sizeof msg, &st);
    assert_int_equal(rc, PTC_E_STORE);
    assert_string_equal(msg, "store S: corrupt metadata (the test's)");
    assert_false(is_mounted());
}

static void test_ready_ok(void **state)
{
    (void)state;
    int rc = -1, st;
    char msg[600];
    run_detached(ready_ok, &rc, msg, sizeof msg, &st);
    /* the parent exited 0 without returning (nothing reported), mounted */
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(rc, 0);
    assert_true(is_mounted());
    char cmd[300];
    snprintf(cmd, sizeof cmd, "fusermount3 -u '%s'", mnt);
    assert_int_equal(system(cmd), 0);
    for (int i = 0; i < 100 && is_mounted(); i++)
        usleep(10000);
    assert_false(is_mounted());
}

int main(void)
{
    if (!PTC_WITH_FUSE || access("/dev/fuse", R_OK | W_OK) != 0 ||
        system("command -v fusermount3 >/dev/null") != 0) {
        printf("skipped: no usable /dev/fuse or fusermount3 here\n");
        return 77;
    }
    snprintf(mnt, sizeof mnt, "/tmp/ptc_detach_XXXXXX");
    if (!mkdtemp(mnt))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ready_fails),
        cmocka_unit_test(test_ready_ok),
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    rmdir(mnt);
    return r;
}
