/* The elastic supervisor (ptc_elastic_create/run) against a fake mpirun: a
 * shell script that records its command line and the hostfile it was given,
 * prints one step and dies the way Open MPI reports a killed rank. The
 * supervisor must launch the job as docs/elastic.md says, drop the dead
 * process's slot after each failure, re-plan on the slots left, report each
 * restart once the new job made a step, and give up after --max-restarts;
 * a stop asked before a launch launches nothing; bad inputs are refused
 * before anything starts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "ptc/elastic.h"

static char dir[] = "/tmp/ptc-test-elastic.XXXXXX";
static char store[256], fake[256], log_path[256];

typedef struct seen {
    ptc_elastic_event ev[8];
    int nev;
    int out_steps, err_lines;
} seen;

static void on_event(const ptc_elastic_event *ev, void *user)
{
    seen *s = user;
    if (s->nev < 8)
        s->ev[s->nev] = *ev;
    s->nev++;
}

static void on_output(const char *line, bool is_stderr, void *user)
{
    seen *s = user;
    if (is_stderr)
        s->err_lines++;
    else if (!strncmp(line, "step ", 5))
        s->out_steps++;
}

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(dir))
        return -1;
    snprintf(store, sizeof store, "%s/store", dir);
    snprintf(fake, sizeof fake, "%s/mpirun", dir);
    snprintf(log_path, sizeof log_path, "%s/log", dir);
    if (mkdir(store, 0755) != 0)
        return -1;
    FILE *f = fopen(fake, "w");
    if (!f)
        return -1;
    fprintf(f, "#!/bin/sh\n"
               "echo \"ARGS $*\" >> \"%s\"\n"
               "while [ $# -gt 0 ]; do\n"
               "  [ \"$1\" = --hostfile ] && sed 's/^/HOST /' \"$2\" >> \"%s\"\n"
               "  shift\n"
               "done\n"
               "echo 'step 0 loss 1.5 time 1.0 ms'\n"
               "echo 'mpirun noticed that process rank 1 with PID 99 on node localhost "
               "exited on signal 9 (Killed).' >&2\n"
               "exit 1\n",
            log_path, log_path);
    fclose(f);
    return chmod(fake, 0755);
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *const train_args[] = {"--schedule", "1f1b", "--microbatches", "4",
                                         "--save-every", "1"};

static void opts_for(ptc_elastic_opts *o, seen *s)
{
    ptc_elastic_opts_init(o);
    o->store = store;
    o->slots = 4;
    o->mpirun = fake;
    o->prog = "/bin/ptc-under-test";
    o->train_args = train_args;
    o->ntrain_args = 6;
    o->total_steps = 3;
    o->max_restarts = 2;
    o->want.layers = 4;
    o->want.hidden = 8;
    o->want.microbatches = 4;
    o->on_event = on_event;
    o->on_output = on_output;
    o->user = s;
}

static char *read_log(void)
{
    static char buf[16384];
    FILE *f = fopen(log_path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = 0;
    return buf;
}

/* Three launches on 4, 3 and 2 slots, two restarts reported, then the
 * third failure is one too many. */
static void test_failures(void **state)
{
    (void)state;
    unlink(log_path);
    seen s = {0};
    ptc_elastic_opts o;
    opts_for(&o, &s);
    ptc_elastic *e = NULL;
    assert_int_equal(ptc_elastic_create(&e, &o), PTC_OK);
    ptc_elastic_result res;
    assert_int_equal(ptc_elastic_run(e, &res), PTC_E_IO);
    assert_non_null(strstr(ptc_last_error(), "giving up after 3 failures (--max-restarts 2)"));
    assert_non_null(strstr(ptc_last_error(), "a process of the job failed"));
    ptc_elastic_destroy(e);
    assert_false(res.stopped);
    assert_int_equal(res.failures, 3);
    assert_int_equal(res.reconfigurations, 2);
    assert_int_equal(s.out_steps, 3);
    assert_int_equal(s.err_lines, 3);

    assert_int_equal(s.nev, 3); /* start, two restarts; no done */
    assert_int_equal(s.ev[0].kind, PTC_ELASTIC_START);
    assert_string_equal(s.ev[0].config, "dp=1,tp=4,pp=1");
    assert_int_equal(s.ev[0].slots, 4);
    assert_int_equal(s.ev[0].version, 0);
    assert_int_equal(s.ev[0].total_steps, 3);
    static const char *const to[] = {"dp=3,tp=1,pp=1", "dp=1,tp=2,pp=1"};
    static const char *const from[] = {"dp=1,tp=4,pp=1", "dp=3,tp=1,pp=1"};
    for (int i = 1; i <= 2; i++) {
        const ptc_elastic_event *v = &s.ev[i];
        assert_int_equal(v->kind, PTC_ELASTIC_RECONFIGURE);
        assert_string_equal(v->reason, "failure");
        assert_false(v->online);
        assert_string_equal(v->from, from[i - 1]);
        assert_string_equal(v->config, to[i - 1]);
        assert_int_equal(v->slots, 4 - i);
        assert_int_equal(v->step, 1);         /* the step the dead job was at */
        assert_int_equal(v->resumed_step, 0); /* nothing saved: from the start */
        assert_int_equal(v->steps_lost, 1);
        double parts = v->detect + v->save + v->plan + v->move + v->load + v->restart;
        assert_true(v->downtime >= 0 && v->downtime - parts < 1e-9 && parts - v->downtime < 1e-9);
    }

    /* the command lines and hostfiles the launches got */
    char *log = read_log();
    char want[4096];
    snprintf(want, sizeof want, "ARGS %s--bind-to none --hostfile %s.elastic.",
             geteuid() == 0 ? "--allow-run-as-root " : "", store);
    assert_non_null(strstr(log, want));
    static const char *const launches[] = {
        "-np 4 /bin/ptc-under-test train --schedule 1f1b --microbatches 4 --save-every 1 "
        "--config dp=1,tp=4,pp=1 --store ",
        "-np 3 /bin/ptc-under-test train --schedule 1f1b --microbatches 4 --save-every 1 "
        "--config dp=3,tp=1,pp=1 --store ",
        "-np 2 /bin/ptc-under-test train --schedule 1f1b --microbatches 4 --save-every 1 "
        "--config dp=1,tp=2,pp=1 --store "};
    const char *p = log;
    for (int i = 0; i < 3; i++) {
        p = strstr(p, launches[i]);
        if (!p)
            fail_msg("launch %d not as expected; the log:\n%s", i, log);
        const char *eol = strchr(p, '\n');
        assert_non_null(strstr(p, " --steps 3 --control "));
        assert_true(strstr(p, " --timeout 120") < eol);
        const char *resume = strstr(p, "--resume");
        assert_true(!resume || resume > eol); /* no version to resume from */
        snprintf(want, sizeof want, "HOST localhost slots=%d\n", 4 - i);
        assert_non_null(strstr(eol, want));
    }
    /* the directory of the control file and the hostfile is gone */
    char cmd[400];
    snprintf(cmd, sizeof cmd, "ls -d '%s'.elastic.* >/dev/null 2>&1", store);
    assert_int_not_equal(system(cmd), 0);
}

/* A stop asked before the first launch: nothing is launched, no error. */
static void test_stop_before_launch(void **state)
{
    (void)state;
    unlink(log_path);
    seen s = {0};
    ptc_elastic_opts o;
    opts_for(&o, &s);
    volatile int stop = 1;
    o.stop = &stop;
    ptc_elastic *e = NULL;
    assert_int_equal(ptc_elastic_create(&e, &o), PTC_OK);
    ptc_elastic_result res;
    assert_int_equal(ptc_elastic_run(e, &res), PTC_OK);
    ptc_elastic_destroy(e);
    assert_true(res.stopped);
    assert_false(res.stopped_job);
    assert_int_equal(res.version, 0);
    assert_int_equal(s.nev, 1);
    assert_int_equal(s.ev[0].kind, PTC_ELASTIC_START);
    assert_string_equal(read_log(), "");
}

/* Bad inputs fail at create, naming the problem, with nothing made. */
static void test_create_errors(void **state)
{
    (void)state;
    seen s = {0};
    ptc_elastic_opts o;
    ptc_elastic *e = (ptc_elastic *)&s;

    opts_for(&o, &s);
    o.slots = -1;
    assert_int_equal(ptc_elastic_create(&e, &o), PTC_E_INVAL);
    assert_null(e);
    assert_non_null(strstr(ptc_last_error(), "no slots"));

    opts_for(&o, &s);
    o.min_slots = 5;
    assert_int_equal(ptc_elastic_create(&e, &o), PTC_E_CONFIG);
    assert_non_null(strstr(ptc_last_error(), "4 slots available, --min-slots is 5"));

    opts_for(&o, &s);
    o.slots = -1;
    o.slots_file = "/nonexistent/slots";
    assert_int_equal(ptc_elastic_create(&e, &o), PTC_E_INVAL);
    assert_non_null(strstr(ptc_last_error(), "cannot read the slots file /nonexistent/slots"));

    opts_for(&o, &s);
    o.want.tp = 8;
    assert_int_equal(ptc_elastic_create(&e, &o), PTC_E_CONFIG);
    assert_non_null(strstr(ptc_last_error(), "no configuration fits"));

    opts_for(&o, &s);
    o.total_steps = 0;
    assert_int_equal(ptc_elastic_create(&e, &o), PTC_E_INVAL);
    assert_int_equal(s.nev, 0);
    ptc_elastic_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failures),
        cmocka_unit_test(test_stop_before_launch),
        cmocka_unit_test(test_create_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
