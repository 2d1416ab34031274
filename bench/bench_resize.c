/* Online resize of live training state under mpirun (ptc_exec_resize), against
 * the point-to-point bandwidth of the same processes in the same run:
 *
 *   time of the move  ÷  (bytes the busiest process sends plus receives
 *                         ÷ its point-to-point MPI bandwidth)
 *
 * Goal: <= 1.5 for >= 1 GiB of training state. The state is llama-style fp32
 * parameters plus two AdamW moments (the llama rules preset), one rank per
 * process. The bandwidth is measured with every process busy at once, as in
 * the move: in each of np-1 rounds process i exchanges a message of
 * --msg-mib MiB with process i XOR r (or a shifted partner for odd counts)
 * by MPI_Sendrecv; a process's bandwidth is the bytes it sent and received
 * over the time of all rounds, measured before and after each move (the
 * mean of the two is that move's baseline; the ratio printed is the median
 * of the repetitions' ratios). Each repetition moves the state from
 * --from to --to and back; the round trip must give back the original bytes
 * (checked; the replicas of a shard are filled with its owner's bytes), so
 * the figures are those of a correct move.
 *
 *   mpirun -np 4 bench_resize [--from CFG] [--to CFG] [--layers L] [--hidden H]
 *       [--ffn F] [--vocab V] [--reps N] [--msg-mib M] [--budget-mib B]
 *
 * Prints one line per figure and a last line of JSON. Exits 1 on a failure
 * only: the goal is reported, not enforced. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "bench_model.h"

#include "ptc/ckpt.h"
#include "ptc/exec.h"


static int me, np;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "error: process %d: %s: %s\n", me, what, ptc_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* This process's local buffers of rank `me` under @p l (NULL where none). */
static uint8_t **bufs_alloc(const ptc_layout *l, bool fill, size_t *total)
{
    size_t nt = ptc_layout_count(l);
    uint8_t **b = calloc(nt + 1, sizeof *b);
    if (!b)
        die("out of memory");
    *total = 0;
    for (size_t t = 0; t < nt; t++) {
        size_t bytes;
        ptc_shard sh;
        if (ptc_ckpt_local_bytes(l, t, me, &bytes) || ptc_layout_shard(l, t, me, &sh))
            die("layout");
        /* the replicas of a shard hold its owner's bytes, as in training */
        uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(t + 1) + (uint64_t)sh.owner * 0x51ed27;
        if (!bytes)
            continue;
        if (!(b[t] = malloc(bytes)))
            die("out of memory");
        memset(b[t], 0, bytes); /* touched: no page faults inside the timed move */
        if (fill) {
            uint64_t *w = (uint64_t *)b[t];
            for (size_t k = 0; k < bytes / 8; k++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                w[k] = x;
            }
        }
        *total += bytes;
    }
    return b;
}

static void bufs_free(uint8_t **b, size_t nt)
{
    for (size_t t = 0; t < nt; t++)
        free(b[t]);
    free(b);
}

/* Per-process point-to-point bandwidth with every process busy at once,
 * bytes sent + received per second (the slowest process's figure). */
static double p2p_bandwidth(size_t msg)
{
    char *s = malloc(msg), *r = malloc(msg);
    if (!s || !r)
        die("out of memory");
    memset(s, 1, msg);
    memset(r, 0, msg);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_s();
    uint64_t bytes = 0;
    for (int k = 1; k < np; k++) {
        int to = (me + k) % np, from = (me - k + np) % np;
        /* messages over 2 GiB are not needed here: msg is at most 1 GiB */
        if (MPI_Sendrecv(s, (int)msg, MPI_BYTE, to, 7, r, (int)msg, MPI_BYTE, from, 7,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            die("MPI_Sendrecv");
        bytes += 2 * msg;
    }
    double t = now_s() - t0;
    double bw = (double)bytes / t, slowest = bw;
    MPI_Allreduce(&bw, &slowest, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    free(s);
    free(r);
    return slowest;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    const char *from_s = "dp=2,tp=2,zero=1", *to_s = "tp=4";
    int layers = 6, reps = 3, msg_mib = 64, budget_mib = 0;
    int64_t hidden = 1024, ffn = 4096, vocab = 8192;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--from"))
            from_s = argv[i + 1];
        else if (!strcmp(argv[i], "--to"))
            to_s = argv[i + 1];
        else if (!strcmp(argv[i], "--layers"))
            layers = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--hidden"))
            hidden = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--ffn"))
            ffn = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--vocab"))
            vocab = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--msg-mib"))
            msg_mib = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--budget-mib"))
            budget_mib = atoi(argv[i + 1]);
    }
    if (reps < 1 || reps > 32)
        reps = 3;
    if (msg_mib < 1 || msg_mib > 1024)
        msg_mib = 64;

    model *m = calloc(1, sizeof *m);
    if (!m)
        die("out of memory");
    model_init(m, layers, hidden, ffn, vocab);
    ptc_rules *rules;
    ptc_config cf, ct;
    ptc_layout *lf, *lt;
    if (ptc_rules_load(&rules, "llama") || ptc_config_parse(&cf, from_s) ||
        ptc_config_parse(&ct, to_s) || ptc_layout_create(&lf, m->ti, m->nt, rules, &cf) ||
        ptc_layout_create(&lt, m->ti, m->nt, rules, &ct))
        die("layouts");
    if (ptc_config_world(&cf) > np || ptc_config_world(&ct) > np) {
        if (me == 0)
            fprintf(stderr, "error: %s and %s need %d and %d processes; started with %d\n",
                    from_s, to_s, ptc_config_world(&cf), ptc_config_world(&ct), np);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    size_t nt = m->nt, tf = 0, tt = 0;
    bool in_from = me < ptc_config_world(&cf), in_to = me < ptc_config_world(&ct);
    uint8_t **src = in_from ? bufs_alloc(lf, true, &tf) : calloc(nt + 1, sizeof(uint8_t *));
    uint8_t **dst = in_to ? bufs_alloc(lt, false, &tt) : calloc(nt + 1, sizeof(uint8_t *));
    uint8_t **back = in_from ? bufs_alloc(lf, false, &tf) : calloc(nt + 1, sizeof(uint8_t *));
    double state = 0, mine = (double)tf;
    MPI_Allreduce(&mine, &state, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    ptc_exec_resize_options o = {.budget = (uint64_t)budget_mib << 20};
    if (me == 0)
        printf("state: %zu tensors (fp32 params + exp_avg + exp_avg_sq), %d layers, hidden %lld, "
               "%.3f GiB in the process-local buffers of %s; %s -> %s on %d processes\n",
               nt, layers, (long long)hidden, state / (1 << 30), from_s, from_s, to_s, np);

    double t_move[32], t_total[32], t_back[32], bw[32], r_move[32], r_total[32];
    ptc_exec_resize_stats st = {0}, sb = {0};
    for (int k = 0; k < reps; k++) {
        bw[k] = p2p_bandwidth((size_t)msg_mib << 20);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = now_s();
        if (ptc_exec_resize(lf, (const void *const *)src, lt, (void *const *)dst, MPI_COMM_WORLD,
                            &o, NULL, &st))
            die("resize");
        MPI_Barrier(MPI_COMM_WORLD);
        t_total[k] = now_s() - t0;
        double mv = st.move_seconds, mx = mv;
        MPI_Allreduce(&mv, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        t_move[k] = mx;
        t0 = now_s();
        if (ptc_exec_resize(lt, (const void *const *)dst, lf, (void *const *)back, MPI_COMM_WORLD,
                            &o, NULL, &sb))
            die("resize back");
        MPI_Barrier(MPI_COMM_WORLD);
        t_back[k] = now_s() - t0;
        /* the machine's speed drifts: the bandwidth around each move */
        bw[k] = 0.5 * (bw[k] + p2p_bandwidth((size_t)msg_mib << 20));
        r_move[k] = t_move[k] * bw[k] / (double)(st.max_process_bytes ? st.max_process_bytes : 1);
        r_total[k] = t_total[k] * bw[k] / (double)(st.max_process_bytes ? st.max_process_bytes : 1);
        int bad = 0, anybad = 0;
        for (size_t t = 0; in_from && t < nt; t++) {
            size_t bytes;
            ptc_ckpt_local_bytes(lf, t, me, &bytes);
            if (bytes && memcmp(src[t], back[t], bytes)) {
                if (!bad)
                    fprintf(stderr, "process %d: %s differs after the round trip\n", me,
                            m->names[t]);
                bad = 1;
            }
            if (bytes)
                memset(back[t], 0, bytes);
        }
        MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (anybad) {
            if (me == 0)
                fprintf(stderr, "error: the round trip %s -> %s -> %s changed bytes\n", from_s,
                        to_s, from_s);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    double move = median(t_move, reps), total = median(t_total, reps),
           backt = median(t_back, reps), bwm = median(bw, reps);
    if (st.max_process_bytes == 0) {
        if (me == 0)
            printf("nothing crosses processes from %s to %s: no ratio\n", from_s, to_s);
        MPI_Finalize();
        return 0;
    }
    double ideal = (double)st.max_process_bytes / bwm;
    double rm = median(r_move, reps), rt = median(r_total, reps);
    if (me == 0) {
        printf("p2p bandwidth per process, all busy (sent+received): %.2f GB/s\n", bwm / 1e9);
        printf("bytes moved %.3f GiB, busiest process %.3f GiB, %llu rounds (budget %d MiB)\n",
               (double)st.bytes_moved / (1 << 30), (double)st.max_process_bytes / (1 << 30),
               (unsigned long long)st.rounds, budget_mib ? budget_mib : 256);
        printf("move %.3f s, whole resize (plan + move, barrier to barrier) %.3f s, back %.3f s "
               "(medians of %d)\n", move, total, backt, reps);
        printf("move / (busiest bytes / bandwidth) = %.3f / %.3f = %.2f; median of the "
               "repetitions' ratios %.2f   (goal <= 1.5)\n", move, ideal, move / ideal, rm);
        printf("whole resize / (busiest bytes / bandwidth): median %.2f\n", rt);
        printf("{\"state_gib\":%.3f,\"from\":\"%s\",\"to\":\"%s\",\"processes\":%d,"
               "\"p2p_gbs\":%.3f,\"busiest_gib\":%.3f,\"move_s\":%.3f,\"resize_s\":%.3f,"
               "\"plan_s\":%.4f,\"ratio_move\":%.3f,\"ratio_resize\":%.3f}\n",
               state / (1 << 30), from_s, to_s, np, bwm / 1e9,
               (double)st.max_process_bytes / (1 << 30), move, total, st.plan_seconds, rm, rt);
    }
    bufs_free(src, nt);
    bufs_free(dst, nt);
    bufs_free(back, nt);
    ptc_layout_destroy(lf);
    ptc_layout_destroy(lt);
    ptc_rules_destroy(rules);
    free(m);
    MPI_Finalize();
    return 0;
}
