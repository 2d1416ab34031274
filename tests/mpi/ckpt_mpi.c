/* Driver of tests/mpi/test_ckpt_mpi.sh: a model with known global data
 * (parameters and AdamW moments of 4 layers), saved and loaded with the
 * collective checkpoint calls under mpirun.
 *
 *   ckpt_mpi save --store DIR --config CFG [--seed S] [--step N] [--threads N]
 *   ckpt_mpi load --store DIR --config CFG [--seed S] [--version V] [--step N]
 *   ckpt_mpi hold --store DIR --config CFG      (one process: hold the writer lock
 *                                               until DIR/release exists)
 *   ckpt_mpi whole --store DIR --config CFG --hosts NAMES
 *       after a recovery, the version the hosts present hold whole
 *       (ptc_reshard_hosts_whole): process 0 prints "whole: newest N,
 *       version V, missing M"
 *   ckpt_mpi async|async-caller --store DIR --config CFG [--seed S] [--step N]
 *       save as `save` does, with ptc_ckpt_save_async: the collective steps on
 *       the library's thread over a duplicate of the world communicator
 *       (MPI_THREAD_MULTIPLE) while this thread runs collectives of its own
 *       on the world's, or on this thread (async-caller); every buffer is
 *       overwritten as soon as the call returns, so a load of the version
 *       shows that the snapshot, not the later bytes, was saved
 *
 * With --layout explicit, save writes CFG's layout given as explicit
 * per-rank pieces (ptc_layout_create_explicit, the record's config
 * "explicit:W", the driver's rules stored with it): a version as DTensors
 * saved without a configuration make, the same pieces and bytes.
 *
 * With --hosts NAMES (comma-separated, process p's name the p-th) the store
 * is spread over hosts: process p's host is named so
 * (ptc_reshard_hosts_index), its store is DIR/NAME; save writes a version
 * across hosts (ptc_ckpt_hosts_save_over, --replicas K) and load reads the
 * newest committed one by the plan (ptc_reshard_hosts_load; process 0
 * prints the bytes moved between hosts and the lower bound).
 *
 * Ranks go to processes in contiguous blocks (rank r to process r*np/world).
 * load compares every local buffer byte for byte with the slices of the
 * global data of --seed and the record with what save wrote (step, seed).
 * CKPT_FAIL_PROCESS=P makes process P's first write fail (ENOSPC) during a
 * save, its first allocation during a load (its CKPT_FAIL_AT-th where that
 * is set). Exit 0 on success; otherwise one line "error: ..." on stderr, exit 1. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mpi.h>

#include "base/fault_testing.h"
#include "kernels/pack.h"
#include "ptc/ckpt.h"
#include "ptc/reshard.h"
#include "tests/unit/layout_copy.h"

static const char RULES[] = "layer model.layers.{L}.\n"
                            "optim .exp_avg .exp_avg_sq\n"
                            "match *.up.weight tp=split(0)\n"
                            "match *.down.weight tp=split(1)\n"
                            "match *.qkv.weight tp=split(0,blocks=3)\n"
                            "match embed.weight tp=split(0) pp=first\n"
                            "match head.weight tp=split(1) pp=last\n"
                            "match norm.weight tp=replicate pp=last\n"
                            "match * tp=replicate\n";

#define MAXT 64

typedef struct model {
    size_t nt;
    ptc_tensor_info ti[MAXT];
    char names[MAXT][64];
} model;

static void add(model *m, const char *name, ptc_dtype dt, int ndim, int64_t d0, int64_t d1)
{
    ptc_tensor_info *ti = &m->ti[m->nt];
    snprintf(m->names[m->nt], sizeof m->names[m->nt], "%s", name);
    memset(ti, 0, sizeof *ti);
    ti->name = m->names[m->nt];
    ti->dtype = dt;
    ti->ndim = ndim;
    ti->shape[0] = d0;
    ti->shape[1] = d1;
    m->nt++;
}

static void model_init(model *m)
{
    memset(m, 0, sizeof *m);
    const char *kinds[] = {"", ".exp_avg", ".exp_avg_sq"};
    char n[64];
    for (int k = 0; k < 3; k++) {
        snprintf(n, sizeof n, "embed.weight%s", kinds[k]);
        add(m, n, PTC_DTYPE_F32, 2, 500, 64);
        for (int L = 0; L < 4; L++) {
            snprintf(n, sizeof n, "model.layers.%d.up.weight%s", L, kinds[k]);
            add(m, n, PTC_DTYPE_F32, 2, 256, 64);
            snprintf(n, sizeof n, "model.layers.%d.down.weight%s", L, kinds[k]);
            add(m, n, PTC_DTYPE_F32, 2, 64, 256);
            snprintf(n, sizeof n, "model.layers.%d.qkv.weight%s", L, kinds[k]);
            add(m, n, PTC_DTYPE_F32, 2, 192, 64);
            snprintf(n, sizeof n, "model.layers.%d.bias%s", L, kinds[k]);
            add(m, n, k ? PTC_DTYPE_F32 : PTC_DTYPE_BF16, 1, 7, 0);
        }
        snprintf(n, sizeof n, "norm.weight%s", kinds[k]);
        add(m, n, PTC_DTYPE_F32, 1, 64, 0);
        snprintf(n, sizeof n, "head.weight%s", kinds[k]);
        add(m, n, PTC_DTYPE_F32, 2, 500, 640);
    }
}

/* A load across hosts' figures: process 0 the plan's; every process its
 * rounds, the source bytes it held at once and the allocations the load
 * made (the test's fault points are drawn from them). */
static void print_hosts(const ptc_reshard_hosts_result *hr, long allocs, int me)
{
    if (me == 0)
        printf("across %d hosts: moved %llu bytes (lower bound %llu), read %llu\n", hr->hosts,
               (unsigned long long)hr->plan.bytes_network,
               (unsigned long long)hr->plan.bytes_network_lower_bound,
               (unsigned long long)hr->bytes_read);
    printf("rounds %llu peak %llu allocations %ld on process %d\n",
           (unsigned long long)hr->rounds, (unsigned long long)hr->source_peak_bytes, allocs, me);
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* Global tensor t of the model of @p seed. */
static uint8_t *global_data(const ptc_tensor_info *ti, size_t t, uint64_t seed, size_t *len)
{
    size_t n = ptc_dtype_size(ti->dtype);
    for (int d = 0; d < ti->ndim; d++)
        n *= (size_t)ti->shape[d];
    uint8_t *g = malloc(n ? n : 1);
    if (!g)
        return NULL;
    for (size_t i = 0; i < n; i++)
        g[i] = (uint8_t)mix(seed * 1000000007ull + t * 1000003ull + i);
    *len = n;
    return g;
}

static int fail(const char *what)
{
    fprintf(stderr, "error: %s: %s\n", what, ptc_last_error());
    return 1;
}

/* The local tensors of @p ranks cut from the global data (want), or
 * poisoned buffers to load into. */
static int make_bufs(const ptc_layout *l, const int *ranks, size_t nranks, uint64_t seed,
                     bool cut, uint8_t ***out)
{
    size_t nt = ptc_layout_count(l);
    uint8_t **b = calloc(nranks * nt + 1, sizeof *b);
    ptc_piece pc[64];
    if (!b)
        return ptc_error_set(PTC_E_NOMEM, "no memory");
    for (size_t t = 0; t < nt; t++) {
        const ptc_tensor_info *ti = ptc_layout_tensor(l, t);
        size_t es = ptc_dtype_size(ti->dtype), glen = 0;
        uint8_t *g = cut ? global_data(ti, t, seed, &glen) : NULL;
        int64_t gs[PTC_MAX_DIMS];
        ptc_strides_row_major(ti->ndim, ti->shape, gs);
        for (size_t i = 0; i < nranks; i++) {
            size_t bytes, np;
            PTC_TRY(ptc_ckpt_local_bytes(l, t, ranks[i], &bytes));
            if (!bytes)
                continue;
            uint8_t *p = malloc(bytes);
            if (!p)
                return ptc_error_set(PTC_E_NOMEM, "no memory");
            memset(p, 0xAB, bytes);
            b[i * nt + t] = p;
            if (!cut)
                continue;
            PTC_TRY(ptc_layout_pieces(l, t, ranks[i], pc, 64, &np));
            for (size_t k = 0; k < np; k++) {
                int64_t ext[PTC_MAX_DIMS], off = 0;
                for (int d = 0; d < ti->ndim; d++) {
                    ext[d] = pc[k].box.hi[d] - pc[k].box.lo[d];
                    off += pc[k].box.lo[d] * gs[d];
                }
                PTC_TRY(ptc_pack_copy_ref(p + (size_t)pc[k].local_offset * es,
                                          pc[k].local_stride, g + (size_t)off * es, gs, ext,
                                          ti->ndim, es));
            }
        }
        free(g);
    }
    *out = b;
    return PTC_OK;
}

/* The save of `async` / `async-caller` (see the top). */
static int save_in_background(ptc_store *s, const ptc_layout *l, const ptc_rules *rules,
                              const int *ranks, size_t nranks, uint8_t **bufs,
                              const ptc_ckpt_record *rec, bool caller, int me, uint64_t *v)
{
    MPI_Comm bg = MPI_COMM_WORLD;
    if (!caller && MPI_Comm_dup(MPI_COMM_WORLD, &bg) != MPI_SUCCESS)
        return ptc_error_set(PTC_E_MPI, "MPI_Comm_dup failed");
    ptc_transport t;
    ptc_ckpt_stage *st = NULL;
    ptc_ckpt_async *a = NULL;
    ptc_ckpt_options o;
    ptc_ckpt_options_init(&o);
    o.collectives_in_caller = caller;
    int rc = ptc_transport_mpi(&t, bg);
    if (rc == PTC_OK)
        rc = ptc_ckpt_stage_create(&st);
    if (rc == PTC_OK)
        rc = ptc_ckpt_save_async(&a, &t, s, l, rules, ranks, nranks, (const void *const *)bufs,
                                 me == 0 ? rec : NULL, &o, st);
    /* the job goes on: its state changes, its own collectives run meanwhile */
    size_t nt = ptc_layout_count(l);
    for (size_t i = 0; i < nranks * nt; i++) {
        size_t bytes;
        ptc_ckpt_local_bytes(l, i % nt, ranks[i / nt], &bytes);
        if (bytes) /* an empty local shard has no buffer */
            memset(bufs[i], 0xEE, bytes);
    }
    for (int k = 0; rc == PTC_OK && k < 20; k++) {
        int x = k, y = 0;
        if (MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
            rc = ptc_error_set(PTC_E_MPI, "MPI_Allreduce failed");
    }
    if (rc == PTC_OK)
        rc = ptc_ckpt_async_wait(a, v);
    else
        ptc_ckpt_async_cancel(a);
    ptc_ckpt_stage_destroy(st);
    if (bg != MPI_COMM_WORLD)
        MPI_Comm_free(&bg);
    return rc;
}

typedef struct args {
    const char *store, *cfg_text, *hosts, *layout;
    uint64_t seed, step, version;
    int threads, replicas;
} args;

static void parse_args(int argc, char **argv, args *a)
{
    *a = (args){.seed = 1, .step = 1};
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--store") == 0)
            a->store = argv[i + 1];
        else if (strcmp(argv[i], "--config") == 0)
            a->cfg_text = argv[i + 1];
        else if (strcmp(argv[i], "--seed") == 0)
            a->seed = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--step") == 0)
            a->step = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--version") == 0)
            a->version = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--threads") == 0)
            a->threads = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--hosts") == 0)
            a->hosts = argv[i + 1];
        else if (strcmp(argv[i], "--replicas") == 0)
            a->replicas = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--layout") == 0)
            a->layout = argv[i + 1];
    }
}

/* The layout of --config (@p cfg), as explicit pieces with --layout explicit. */
static int make_layout(const model *m, const ptc_rules *rules, const args *a, ptc_config *cfg,
                       ptc_layout **out)
{
    PTC_TRY(ptc_config_parse(cfg, a->cfg_text));
    PTC_TRY(ptc_layout_create(out, m->ti, m->nt, rules, cfg));
    if (!a->layout || strcmp(a->layout, "explicit"))
        return PTC_OK;
    ptc_layout *x = NULL;
    int rc = layout_explicit_copy(*out, &x);
    ptc_layout_destroy(*out);
    *out = x;
    return rc;
}

/* hold: a save begun and held open until STORE/release exists (STORE/ready
 * says it is open), then aborted */
static int hold(ptc_store *s, const char *store, const ptc_layout *l, const ptc_rules *rules,
                const ptc_ckpt_options *o)
{
    ptc_ckpt_txn *txn;
    if (ptc_ckpt_begin(&txn, s, l, rules, o))
        return fail("hold");
    char p[4096];
    snprintf(p, sizeof p, "%s/ready", store);
    fclose(fopen(p, "w"));
    snprintf(p, sizeof p, "%s/release", store);
    struct stat st;
    for (int i = 0; i < 6000 && stat(p, &st) != 0; i++)
        usleep(10000);
    ptc_ckpt_abort(txn);
    return 0;
}

/* whole: the newest version the hosts present hold whole */
static int whole(ptc_transport *tr, int host, ptc_store *s, int me)
{
    uint64_t newest = 0, v = 0;
    int missing = 0;
    if (ptc_ckpt_hosts_recover_over(tr, host, s, &newest) ||
        ptc_reshard_hosts_whole(tr, s, newest, &v, &missing))
        return fail("whole");
    if (me == 0)
        printf("whole: newest %llu, version %llu, missing %d\n", (unsigned long long)newest,
               (unsigned long long)v, missing);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    args a;
    parse_args(argc, argv, &a);
    const char *store = a.store; /* a host's own folder with --hosts */
    bool async = !strcmp(mode, "async") || !strcmp(mode, "async-caller");
    if (!store || !a.cfg_text ||
        (strcmp(mode, "save") && strcmp(mode, "load") && strcmp(mode, "hold") &&
         (strcmp(mode, "whole") || !a.hosts) && !async)) {
        fprintf(stderr, "usage: ckpt_mpi save|load|hold|whole|async|async-caller --store DIR "
                        "--config CFG ...\n");
        return 2;
    }
    int provided = 0;
    MPI_Init_thread(&argc, &argv, async ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE, &provided);
    if (!strcmp(mode, "async") && provided < MPI_THREAD_MULTIPLE) {
        fprintf(stderr, "error: async: MPI_THREAD_MULTIPLE not provided (%d)\n", provided);
        MPI_Finalize();
        return 1;
    }
    int me, np;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    int rc = 1;
    model m;
    model_init(&m);
    ptc_rules *rules = NULL;
    ptc_layout *l = NULL;
    ptc_store *s = NULL;
    ptc_config cfg;
    uint8_t **bufs = NULL, **want = NULL;
    int ranks[1024];
    size_t nranks = 0;
    if (ptc_rules_parse(&rules, RULES, strlen(RULES), "driver rules") ||
        make_layout(&m, rules, &a, &cfg, &l)) {
        rc = fail("layout");
        goto out;
    }
    int world = ptc_config_world(&cfg);
    for (int r = 0; r < world; r++)
        if ((int)((int64_t)r * np / world) == me)
            ranks[nranks++] = r;
    char host_name[256] = "", host_dir[2048];
    ptc_transport tr;
    int host = 0, nhosts = 0;
    if (a.hosts) { /* this process's host: the me-th name; its store DIR/NAME */
        const char *at = a.hosts;
        for (int p = 0; p < me && at; p++)
            at = (at = strchr(at, ',')) ? at + 1 : NULL;
        size_t n = at ? strcspn(at, ",") : 0;
        snprintf(host_name, sizeof host_name, "%.*s", (int)n, at ? at : "");
        snprintf(host_dir, sizeof host_dir, "%s/%s", store, host_name);
        mkdir(store, 0755);
        store = host_dir;
        if (ptc_transport_mpi(&tr, MPI_COMM_WORLD) ||
            ptc_reshard_hosts_index(&tr, host_name, &host, &nhosts)) {
            rc = fail("hosts");
            goto out;
        }
    }
    if (ptc_store_open(&s, store, PTC_STORE_CREATE)) {
        rc = fail("open");
        goto out;
    }
    ptc_ckpt_options o;
    ptc_ckpt_options_init(&o);
    o.threads = a.threads;
    if (strcmp(mode, "hold") == 0) {
        rc = hold(s, store, l, rules, &o);
        goto out;
    }
    if (strcmp(mode, "whole") == 0) {
        rc = whole(&tr, host, s, me);
        goto out;
    }
    if (strcmp(mode, "save") == 0 || async) {
        if (make_bufs(l, ranks, nranks, a.seed, true, &bufs)) {
            rc = fail("buffers");
            goto out;
        }
        char seed_text[32];
        snprintf(seed_text, sizeof seed_text, "%llu", (unsigned long long)a.seed);
        ptc_ckpt_kv kv = {"data-seed", seed_text};
        uint8_t rng[8] = {1, 2, 3, 4, 5, 6, 7, (uint8_t)me};
        ptc_ckpt_record rec = {.step = a.step, .seed = a.seed, .epoch = 1, .sample = a.step * 32,
                               .global_batch = 32, .dataset = "synthetic", .has_loss = true,
                               .loss = 1.0 / (double)(a.step + 1), .rng = rng, .rng_len = 8,
                               .extra = &kv, .nextra = 1};
        const char *f = getenv("CKPT_FAIL_PROCESS");
        if (f && atoi(f) == me)
            ptc_fault_write_at(1, ENOSPC);
        uint64_t v = 0;
        ptc_ckpt_hosts_options ho;
        ptc_ckpt_hosts_options_init(&ho);
        ho.replicas = a.replicas;
        int e;
        if (a.hosts)
            e = ptc_ckpt_hosts_save_over(&tr, host, s, l, rules, ranks, nranks,
                                         (const void *const *)bufs, &rec, &o, &ho, &v);
        else if (async)
            e = save_in_background(s, l, rules, ranks, nranks, bufs, &rec,
                                   !strcmp(mode, "async-caller"), me, &v);
        else
            e = ptc_ckpt_save(s, l, rules, ranks, nranks, (const void *const *)bufs, &rec, &o,
                              MPI_COMM_WORLD, &v);
        ptc_fault_write_at(0, 0);
        if (e) {
            rc = fail("save");
            goto out;
        }
        if (me == 0)
            printf("saved version %llu\n", (unsigned long long)v);
        rc = 0;
    } else {
        if (make_bufs(l, ranks, nranks, a.seed, true, &want) ||
            make_bufs(l, ranks, nranks, a.seed, false, &bufs)) {
            rc = fail("buffers");
            goto out;
        }
        ptc_ckpt_record rec;
        uint64_t v = 0;
        const char *f = getenv("CKPT_FAIL_PROCESS"), *at = getenv("CKPT_FAIL_AT");
        if (f && atoi(f) == me)
            ptc_fault_alloc_at(at ? atol(at) : 1);
        else
            ptc_fault_alloc_at(0); /* counts from here */
        ptc_reshard_hosts_result hr;
        int e = a.hosts ? ptc_reshard_hosts_load(&tr, host, s, a.version, l, ranks, nranks,
                                               (void *const *)bufs, &hr)
                      : ptc_ckpt_load(s, a.version, l, ranks, nranks, (void *const *)bufs, &o,
                                      MPI_COMM_WORLD, &rec, &v);
        long allocs = ptc_fault_alloc_count();
        ptc_fault_alloc_at(0);
        uint64_t lv = 0;
        bool fresh = false; /* a host whose store holds no part of the version */
        if (!e && a.hosts) { /* the record of this host's part */
            v = hr.version;
            memset(&rec, 0, sizeof rec);
            e = ptc_ckpt_hosts_local_version(s, v, &lv);
            if (e == PTC_E_NOTFOUND) {
                ptc_error_clear();
                fresh = true;
                e = PTC_OK;
            }
            if (!e && !fresh)
                e = ptc_ckpt_read_record(s, lv, &rec);
            if (!e)
                print_hosts(&hr, allocs, me);
        }
        if (e) {
            rc = fail("load");
            goto out;
        }
        size_t nt = ptc_layout_count(l);
        rc = 0;
        for (size_t i = 0; i < nranks && rc == 0; i++)
            for (size_t t = 0; t < nt && rc == 0; t++) {
                size_t bytes;
                ptc_ckpt_local_bytes(l, t, ranks[i], &bytes);
                if (bytes && memcmp(want[i * nt + t], bufs[i * nt + t], bytes) != 0) {
                    fprintf(stderr, "error: rank %d tensor %s differs\n", ranks[i], m.names[t]);
                    rc = 1;
                }
            }
        if (rc == 0 && !fresh && (rec.step != a.step || rec.seed != a.seed || rec.rng_len != 8 ||
                        rec.nextra != 1 || strcmp(rec.dataset, "synthetic") != 0)) {
            fprintf(stderr, "error: record differs (step %llu)\n", (unsigned long long)rec.step);
            rc = 1;
        }
        ptc_ckpt_record_free(&rec);
        /* every process reports; the script counts the lines */
        if (rc == 0)
            printf("loaded version %llu: %zu ranks equal on process %d%s\n",
                   (unsigned long long)v, nranks, me, fresh ? " (a host with no part)" : "");
    }
out:
    if (bufs || want) {
        size_t nt = l ? ptc_layout_count(l) : 0;
        for (size_t i = 0; i < nranks * nt; i++) {
            if (bufs)
                free(bufs[i]);
            if (want)
                free(want[i]);
        }
        free(bufs);
        free(want);
    }
    ptc_store_close(s);
    ptc_layout_destroy(l);
    ptc_rules_destroy(rules);
    MPI_Finalize();
    return rc;
}
