/* The elastic supervisor (ptc_elastic_create/run) against a fake mpirun: a
 * shell script that records its command line, the hostfile it was given
 * and the wait Open MPI's teardown is told (OMPI_MCA_odls_base_sigkill_timeout:
 * 0, or the environment's), prints one step and dies the way Open MPI
 * reports a killed rank. The supervisor must launch the job as
 * docs/elastic.md says, drop the dead
 * process's slot after each failure, re-plan on the slots left, report each
 * restart once the new job made a step, and give up after --max-restarts;
 * a stop asked before a launch launches nothing; bad inputs are refused
 * before anything starts (a FIFO as the slots file without blocking, more
 * slots than the host runs); while the job runs, a FIFO in place of the
 * slots file, a half-written one and one with too many slots are said once
 * and ignored, and the controller keeps reading the job's output. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ptc/elastic.h"
#include "exec/model/elastic_internal.h"

static char dir[] = "/tmp/ptc-test-elastic.XXXXXX";
static char store[256], fake[256], log_path[256];

typedef struct seen {
    ptc_elastic_event ev[8];
    int nev;
    int out_steps, err_lines;
    char err[2048]; /* the stderr lines, as far as they fit */
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
    if (is_stderr) {
        s->err_lines++;
        size_t n = strlen(s->err);
        snprintf(s->err + n, sizeof s->err - n, "%s\n", line);
    }
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
               "echo \"KILLWAIT ${OMPI_MCA_odls_base_sigkill_timeout-unset}\" >> \"%s\"\n"
               "while [ $# -gt 0 ]; do\n"
               "  [ \"$1\" = --hostfile ] && sed 's/^/HOST /' \"$2\" >> \"%s\"\n"
               "  shift\n"
               "done\n"
               "echo 'step 0 loss 1.5 time 1.0 ms'\n"
               "echo 'mpirun noticed that process rank 1 with PID 99 on node localhost "
               "exited on signal 9 (Killed).' >&2\n"
               "exit 1\n",
            log_path, log_path, log_path);
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

/* The warnings the supervisor logs. */
static char warned[4096];
static int nwarned;
static void on_log(int level, const char *msg, void *user)
{
    (void)user;
    if (level != PTC_LOG_WARN)
        return;
    nwarned++;
    size_t n = strlen(warned);
    snprintf(warned + n, sizeof warned - n, "%s\n", msg);
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
    /* each launch is told to kill a torn-down job's processes at once
     * (Open MPI's 1 s wait between SIGTERM and SIGKILL otherwise) */
    int kills = 0;
    for (p = strstr(log, "KILLWAIT 0\n"); p; p = strstr(p + 1, "KILLWAIT 0\n"))
        kills++;
    assert_int_equal(kills, 3);
    /* the directory of the control file and the hostfile is gone */
    char cmd[400];
    snprintf(cmd, sizeof cmd, "ls -d '%s'.elastic.* >/dev/null 2>&1", store);
    assert_int_not_equal(system(cmd), 0);
}

/* A value of that wait the environment gives is the one the job gets. */
static void test_kill_wait_kept(void **state)
{
    (void)state;
    unlink(log_path);
    seen s = {0};
    ptc_elastic_opts o;
    opts_for(&o, &s);
    o.max_restarts = 0;
    setenv("OMPI_MCA_odls_base_sigkill_timeout", "7", 1);
    ptc_elastic *e = NULL;
    assert_int_equal(ptc_elastic_create(&e, &o), PTC_OK);
    ptc_elastic_result res;
    assert_int_equal(ptc_elastic_run(e, &res), PTC_E_IO);
    ptc_elastic_destroy(e);
    unsetenv("OMPI_MCA_odls_base_sigkill_timeout");
    assert_non_null(strstr(read_log(), "KILLWAIT 7\n"));
    assert_null(strstr(read_log(), "KILLWAIT 0\n"));
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
    assert_non_null(strstr(ptc_last_error(), "cannot read the slots file /nonexistent/slots: "
                                             "open /nonexistent/slots: No such file"));

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

/* A slots file that cannot be one is refused at the start, at once. */
static void test_slots_file_refused(void **state)
{
    (void)state;
    seen s = {0};
    ptc_elastic_opts o;
    ptc_elastic *e = NULL;
    char path[300];
    alarm(30); /* a FIFO opened for reading would block here for ever */

    snprintf(path, sizeof path, "%s/slots-fifo", dir);
    assert_int_equal(mkfifo(path, 0644), 0);
    opts_for(&o, &s);
    o.slots = -1;
    o.slots_file = path;
    assert_int_equal(ptc_elastic_create(&e, &o), PTC_E_INVAL);
    assert_null(e);
    assert_non_null(strstr(ptc_last_error(), "slots-fifo is not a regular file (a FIFO)"));
    unlink(path);

    assert_int_equal(mkdir(path, 0755), 0);
    assert_int_equal(ptc_elastic_create(&e, &o), PTC_E_INVAL);
    assert_non_null(strstr(ptc_last_error(), "is not a regular file (a directory)"));
    rmdir(path);

    static const struct {
        const char *text, *words;
        int rc;
    } bad[] = {
        {"65536\n", "gives 65536 slots, more than this host runs: at most", PTC_E_CONFIG},
        {"4", "is incomplete ('4' without its newline) (write it as a line)", PTC_E_INVAL},
        {"", "is incomplete ('' without its newline)", PTC_E_INVAL},
        {"four\n", "'four' is not a number of slots", PTC_E_INVAL},
        {"18446744073709551616\n", "is not a number of slots", PTC_E_INVAL},
        {"4\n8\n", "'4' is not a number of slots", PTC_E_INVAL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(bad[i].text, f);
        fclose(f);
        assert_int_equal(ptc_elastic_create(&e, &o), bad[i].rc);
        if (!strstr(ptc_last_error(), bad[i].words))
            fail_msg("'%s': %s", bad[i].text, ptc_last_error());
    }
    unlink(path);

    /* the number given on the command line, and --max-slots */
    opts_for(&o, &s);
    o.slots = 65536;
    assert_int_equal(ptc_elastic_create(&e, &o), PTC_E_CONFIG);
    assert_non_null(strstr(ptc_last_error(), "--slots gives 65536 slots, more than this host "
                                             "runs"));
    opts_for(&o, &s);
    o.max_slots = 3;
    assert_int_equal(ptc_elastic_create(&e, &o), PTC_E_CONFIG);
    assert_non_null(strstr(ptc_last_error(), "--slots gives 4 slots, more than --max-slots 3"));
    o.max_slots = 65536;
    o.slots = 100;
    assert_int_equal(ptc_elastic_create(&e, &o), PTC_OK);
    ptc_elastic_destroy(e);
    alarm(0);
}

/* While the job runs, its slots file becomes a FIFO, then a file being
 * written, then one with too many slots: each said once, ignored; the
 * controller reads all of the job's output (300 KB, more than a pipe
 * holds: a controller blocked on the FIFO would stall the job for ever). */
static void test_slots_file_while_running(void **state)
{
    (void)state;
    char slots[300], tmp[310], fake2[300];
    snprintf(slots, sizeof slots, "%s/slots-run", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", slots);
    snprintf(fake2, sizeof fake2, "%s/mpirun-slots", dir);
    FILE *f = fopen(slots, "w");
    assert_non_null(f);
    fputs("4\n", f);
    fclose(f);
    f = fopen(fake2, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\n"
               "echo \"ARGS $*\" >> '%s'\n"
               "echo 'step 0 loss 1.5 time 1.0 ms'\n"
               "mkfifo '%s' && mv '%s' '%s'\n" /* renames: never absent */
               "sleep 0.5\n"
               "i=1; while [ $i -le 3000 ]; do\n"
               "  echo \"step $i loss 1.5 time 1.0 ms ...............................................\"\n"
               "  i=$((i + 1))\n"
               "done\n"
               "printf 8 > '%s' && mv '%s' '%s'\n" /* half-written: no newline yet */
               "sleep 0.5\n"
               "echo 65536 > '%s' && mv '%s' '%s'\n"
               "sleep 0.5\n"
               "echo 'step 3001 loss 1.5 time 1.0 ms'\n"
               "exit 0\n",
            log_path, tmp, tmp, slots, tmp, tmp, slots, tmp, tmp, slots);
    fclose(f);
    assert_int_equal(chmod(fake2, 0755), 0);
    unlink(log_path);
    warned[0] = 0;
    nwarned = 0;
    ptc_log_set(on_log, NULL, PTC_LOG_WARN);
    seen s = {0};
    ptc_elastic_opts o;
    opts_for(&o, &s);
    o.slots = -1;
    o.slots_file = slots;
    o.mpirun = fake2;
    o.max_restarts = 0;
    ptc_elastic *e = NULL;
    assert_int_equal(ptc_elastic_create(&e, &o), PTC_OK);
    alarm(60);
    ptc_elastic_result res;
    assert_int_equal(ptc_elastic_run(e, &res), PTC_E_IO); /* it saved nothing: a failure */
    alarm(0);
    ptc_log_set(NULL, NULL, 0);
    ptc_elastic_destroy(e);
    assert_int_equal(s.out_steps, 3002);
    assert_int_equal(s.nev, 1); /* the start; no reconfiguration */
    /* said once each (the inputs are looked at every 100 ms), the half-written
     * file not at all */
    if (nwarned != 2 || !strstr(warned, "slots-run is not a regular file (a FIFO); ignored, "
                                        "the job goes on as it is") ||
        !strstr(warned, "gives 65536 slots, more than this host runs"))
        fail_msg("%d warnings:\n%s", nwarned, warned);
    const char *log = read_log();
    assert_non_null(strstr(log, "-np 4 "));
    assert_null(strstr(strstr(log, "ARGS") + 4, "ARGS")); /* launched once */
    unlink(slots);
}

/* With a hostfile, its capacity caps the slots: a slots file of 65536
 * launches on the hosts' 2 + 2 slots; a hostfile over a job's largest world
 * (or over --max-slots) is refused at the start. */
static void test_slots_hostfile_capacity(void **state)
{
    (void)state;
    char slots[300], hostfile[300];
    snprintf(slots, sizeof slots, "%s/slots-cap", dir);
    snprintf(hostfile, sizeof hostfile, "%s/hosts-cap", dir);
    FILE *f = fopen(slots, "w");
    assert_non_null(f);
    fputs("65536\n", f);
    fclose(f);
    f = fopen(hostfile, "w");
    assert_non_null(f);
    fputs("node-a slots=2\nnode-b slots=2\n", f);
    fclose(f);
    unlink(log_path);
    seen s = {0};
    ptc_elastic_opts o;
    opts_for(&o, &s);
    o.slots = -1;
    o.slots_file = slots;
    o.hostfile = hostfile;
    o.max_restarts = 0;
    ptc_elastic *e = NULL;
    assert_int_equal(ptc_elastic_create(&e, &o), PTC_OK);
    ptc_elastic_result res;
    assert_int_equal(ptc_elastic_run(e, &res), PTC_E_IO); /* the fake job fails */
    ptc_elastic_destroy(e);
    assert_int_equal(s.ev[0].kind, PTC_ELASTIC_START);
    assert_int_equal(s.ev[0].slots, 4);
    const char *log = read_log();
    if (!strstr(log, "-np 4 ") || !strstr(log, "HOST node-a slots=2\nHOST node-b slots=2\n"))
        fail_msg("not launched on the hostfile's 4 slots; the log:\n%s", log);

    /* a hostfile over the largest world, and one over --max-slots */
    f = fopen(hostfile, "w");
    assert_non_null(f);
    fputs("node-a slots=1048576\nnode-b slots=1048576\n", f);
    fclose(f);
    opts_for(&o, &s);
    o.slots = -1;
    o.hostfile = hostfile;
    assert_int_equal(ptc_elastic_create(&e, &o), PTC_E_CONFIG);
    if (!strstr(ptc_last_error(), "hosts-cap gives 2097152 slots, more than a job's most 1048576"))
        fail_msg("%s", ptc_last_error());
    f = fopen(hostfile, "w");
    assert_non_null(f);
    fputs("node-a slots=8\nnode-b slots=8\n", f);
    fclose(f);
    o.max_slots = 12;
    assert_int_equal(ptc_elastic_create(&e, &o), PTC_E_CONFIG);
    if (!strstr(ptc_last_error(), "hosts-cap gives 16 slots, more than --max-slots 12"))
        fail_msg("%s", ptc_last_error());
    o.slots = 12; /* --slots within --max-slots caps the hostfile */
    assert_int_equal(ptc_elastic_create(&e, &o), PTC_OK);
    ptc_elastic_destroy(e);
    unlink(slots);
    unlink(hostfile);
}

/* A fake mpirun for a job with a store on each host: launch 1 makes step 3
 * and loses a process; launch 2 fails before a step, every copy of ranks 4
 * and 5 lost; launch 3 (from the persistent tier) resumes version 2 at step
 * 2 and runs to step 5. */
static int write_local_fake(const char *path, const char *count)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "#!/bin/sh\n"
               "echo \"ARGS $*\" >> \"%s\"\n"
               "n=$(($(cat '%s' 2>/dev/null || echo 0) + 1)); echo $n > '%s'\n"
               "case $n in\n"
               "1) echo 'resumed from version 3 at step 3, load 2.0 ms'\n"
               "   echo 'step 3 loss 1.5 time 1.0 ms'\n"
               "   echo 'mpirun noticed that process rank 1 with PID 99 on node localhost "
               "exited on signal 9 (Killed).' >&2; exit 1 ;;\n"
               "2) echo 'ptc: error: training failed on process 0: the shards of 2 saved "
               "ranks (4, 5) are on no host present: lost with every copy (save with more "
               "--replicas)' >&2; exit 1 ;;\n"
               "*) echo 'resumed from version 2 at step 2, load 1.0 ms'\n"
               "   for k in 2 3 4; do echo \"step $k loss 1.5 time 1.0 ms\"; done\n"
               "   echo 'saved version 9 (step 5)'; exit 0 ;;\n"
               "esac\n",
            log_path, count, count);
    fclose(f);
    return chmod(path, 0755);
}

/* Stores on each host (replicas >= 0): the controller reads no store; every
 * launch runs --until-step TOTAL --resume --resume-any; the lost shards'
 * failure falls back to the persistent tier (--resume-from), said in an
 * event; the versions and steps reported are the job's. Without a
 * persistent tier that failure ends the run naming the shards. */
static void test_node_local(void **state)
{
    (void)state;
    char fake2[300], count[300];
    snprintf(fake2, sizeof fake2, "%s/mpirun-local", dir);
    snprintf(count, sizeof count, "%s/launches", dir);
    assert_int_equal(write_local_fake(fake2, count), 0);
    unlink(log_path);
    seen s = {0};
    ptc_elastic_opts o;
    opts_for(&o, &s);
    o.mpirun = fake2;
    o.total_steps = 5;
    o.replicas = 1; /* one host (localhost) cannot hold another's copies */
    ptc_elastic *e = NULL;
    assert_int_equal(ptc_elastic_create(&e, &o), PTC_E_CONFIG);
    if (!strstr(ptc_last_error(), "dp=1,tp=4,pp=1 runs on 1 host (localhost), and --replicas 1 "
                                  "needs 2 or more"))
        fail_msg("%s", ptc_last_error());
    o.replicas = 0; /* stores on each host, no copies */
    o.persist = "/persist/tier";
    char sdir[300]; /* each host's store: never opened here (no such directory) */
    snprintf(sdir, sizeof sdir, "%s/st", dir);
    o.store = sdir;
    assert_int_equal(ptc_elastic_create(&e, &o), PTC_OK);
    ptc_elastic_result res;
    assert_int_equal(ptc_elastic_run(e, &res), PTC_OK);
    ptc_elastic_destroy(e);
    assert_int_equal(res.step, 5);
    assert_int_equal(res.version, 9);
    assert_int_equal(res.failures, 2);
    assert_int_equal(res.reconfigurations, 1);
    assert_int_equal(s.nev, 4);
    assert_int_equal(s.ev[0].kind, PTC_ELASTIC_START);
    assert_true(s.ev[0].node_local);
    assert_int_equal(s.ev[1].kind, PTC_ELASTIC_FALLBACK);
    assert_non_null(strstr(s.ev[1].detail, "the shards of 2 saved ranks (4, 5)"));
    assert_string_equal(s.ev[1].persist, "/persist/tier");
    const ptc_elastic_event *v = &s.ev[2];
    assert_int_equal(v->kind, PTC_ELASTIC_RECONFIGURE);
    assert_string_equal(v->reason, "failure");
    assert_true(v->from_persist);
    assert_string_equal(v->persist, "/persist/tier");
    assert_string_equal(v->from, "dp=1,tp=4,pp=1");
    assert_string_equal(v->config, "dp=3,tp=1,pp=1");
    assert_int_equal(v->step, 4);         /* launch 1 had made step 3 */
    assert_int_equal(v->version, 2);      /* the tier's version */
    assert_int_equal(v->resumed_step, 2);
    assert_int_equal(v->steps_lost, 2);
    assert_int_equal(s.ev[3].kind, PTC_ELASTIC_DONE);
    assert_int_equal(s.ev[3].step, 5);
    char *log = read_log();
    const char *l1 = strstr(log, "ARGS "), *l2 = l1 ? strstr(l1 + 1, "ARGS ") : NULL,
               *l3 = l2 ? strstr(l2 + 1, "ARGS ") : NULL;
    assert_non_null(l3);
    assert_non_null(strstr(l1, " --until-step 5 --control "));
    assert_true(strstr(l1, " --resume --resume-any") < l2);
    assert_true(strstr(l2, " --resume --resume-any") < l3);
    assert_non_null(strstr(l3, " --resume-from /persist/tier"));
    assert_null(strstr(log, " --steps "));

    /* without a persistent tier: the run ends at launch 2, naming the shards */
    unlink(count);
    unlink(log_path);
    memset(&s, 0, sizeof s);
    o.persist = NULL;
    assert_int_equal(ptc_elastic_create(&e, &o), PTC_OK);
    assert_int_equal(ptc_elastic_run(e, &res), PTC_E_IO);
    assert_non_null(strstr(ptc_last_error(), "the shards of 2 saved ranks (4, 5) are on no host "
                                             "present: lost with every copy"));
    assert_non_null(strstr(ptc_last_error(), "no persistent tier to fall back to"));
    ptc_elastic_destroy(e);
}

/* A launch that fails before its first step naming no process (a daemon
 * that cannot call back): the controller probes the hostfile's hosts, drops
 * every slot of one that cannot run a process and relaunches without it;
 * when no host can, the launcher is at fault: the job's error, nothing
 * dropped. */
static void test_probe_drops_host(void **state)
{
    (void)state;
    char script[300], hostfile[300], alldown[300];
    snprintf(script, sizeof script, "%s/mpirun-probe", dir);
    snprintf(hostfile, sizeof hostfile, "%s/hosts-probe", dir);
    snprintf(alldown, sizeof alldown, "%s/all-down", dir);
    FILE *f = fopen(script, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\n"
               "hf=; for a in \"$@\"; do [ \"$prev\" = --hostfile ] && hf=$a; prev=$a; done\n"
               "case \"$*\" in *' --version')\n"
               "  echo \"PROBE $(cat \"$hf\")\" >> '%s'\n"
               "  [ -e '%s' ] && exit 1\n"
               "  grep -q node-b \"$hf\" && exit 1\n"
               "  exit 0 ;;\n"
               "esac\n"
               "echo \"LAUNCH $(tr '\\n' ' ' < \"$hf\")\" >> '%s'\n"
               "echo 'ORTE was unable to reliably start one or more daemons.' >&2\n"
               "exit 1\n",
            log_path, alldown, log_path);
    fclose(f);
    assert_int_equal(chmod(script, 0755), 0);
    f = fopen(hostfile, "w");
    assert_non_null(f);
    fputs("node-a slots=2\nnode-b slots=2\n", f);
    fclose(f);
    for (int all = 0; all < 2; all++) {
        unlink(log_path);
        if (all && (f = fopen(alldown, "w")))
            fclose(f);
        seen s = {0};
        ptc_elastic_opts o;
        opts_for(&o, &s);
        o.slots = -1;
        o.hostfile = hostfile;
        o.mpirun = script;
        ptc_elastic *e = NULL;
        assert_int_equal(ptc_elastic_create(&e, &o), PTC_OK);
        ptc_elastic_result res;
        assert_int_equal(ptc_elastic_run(e, &res), PTC_E_IO);
        ptc_elastic_destroy(e);
        const char *log = read_log();
        assert_non_null(strstr(ptc_last_error(), "the job failed before its first step"));
        assert_non_null(strstr(log, "LAUNCH node-a slots=2 node-b slots=2 \n"));
        assert_non_null(strstr(log, "PROBE node-a slots=1\n"));
        assert_non_null(strstr(log, "PROBE node-b slots=1\n"));
        const char *warn = "ptc: warning: elastic: host node-b cannot run a process (probed "
                           "after the launch failed): its slots are dropped\n";
        if (!all) { /* node-b dropped: the relaunch on node-a alone, whose failure ends it */
            assert_non_null(strstr(log, "LAUNCH node-a slots=2 \n"));
            assert_non_null(strstr(s.err, warn));
        } else { /* nothing dropped, no relaunch */
            assert_null(strstr(log, "LAUNCH node-a slots=2 \n"));
            assert_null(strstr(s.err, "cannot run a process"));
        }
    }
    unlink(alldown);
}

/* elastic_probe: one launch per host, each given a hostfile naming that host
 * alone and `-np 1 PROG --version`; a launch that fails or outlives the
 * timeout is a host that cannot run a process (and is killed). */
static void test_probe(void **state)
{
    (void)state;
    char probe[300], pdir[300];
    snprintf(probe, sizeof probe, "%s/probe-mpirun", dir);
    snprintf(pdir, sizeof pdir, "%s/probes", dir);
    assert_int_equal(mkdir(pdir, 0755), 0);
    FILE *f = fopen(probe, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\n"
               "case \"$*\" in *' -np 1 prog --version') ;; *) exit 3 ;; esac\n"
               "while [ \"$1\" != --hostfile ]; do shift; done\n"
               "case $(cat \"$2\") in\n"
               "'up slots=1') exit 0 ;;\n"
               "'hang slots=1') exec sleep 60 ;;\n"
               "*) exit 1 ;;\n"
               "esac\n");
    fclose(f);
    assert_int_equal(chmod(probe, 0755), 0);
    const char *names[] = {"up", "down", "hang", "up"};
    bool up[4] = {false, true, true, false};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(elastic_probe(probe, "prog", pdir, names, 4, 1.0, up), PTC_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_true(up[0]);
    assert_false(up[1]);
    assert_false(up[2]);
    assert_true(up[3]);
    assert_true(t1.tv_sec - t0.tv_sec < 30); /* the hung one was killed, not waited for */
    assert_int_equal(rmdir(pdir), 0);       /* its hostfiles are gone */
    /* more hosts than a wave (32 probes at once): every one answered */
    const char *many[40];
    bool mup[40];
    for (int i = 0; i < 40; i++)
        many[i] = i == 35 ? "down" : "up";
    assert_int_equal(mkdir(pdir, 0755), 0);
    assert_int_equal(elastic_probe(probe, "prog", pdir, many, 40, 5.0, mup), PTC_OK);
    for (int i = 0; i < 40; i++)
        assert_int_equal(mup[i], i != 35);
    assert_int_equal(rmdir(pdir), 0);
    /* a launcher that cannot be run: an error, nothing up */
    assert_int_equal(mkdir(pdir, 0755), 0);
    assert_int_equal(elastic_probe("/nonexistent/mpirun", "prog", pdir, names, 2, 1.0, up),
                     PTC_E_IO);
    assert_false(up[0]);
    assert_int_equal(rmdir(pdir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failures),
        cmocka_unit_test(test_slots_file_refused),
        cmocka_unit_test(test_slots_file_while_running),
        cmocka_unit_test(test_slots_hostfile_capacity),
        cmocka_unit_test(test_kill_wait_kept),
        cmocka_unit_test(test_stop_before_launch),
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_node_local),
        cmocka_unit_test(test_probe),
        cmocka_unit_test(test_probe_drops_host),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
