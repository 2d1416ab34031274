/* The cross-host resume against the link (issue #30): under mpirun, one
 * process per target rank over hosts whose stores are their own disks
 * (bench/bench_hosts_resume.sh makes them), recover
 * (ptc_ckpt_hosts_recover_over), then load the newest committed version of
 * the store spread over hosts into configuration --to
 * (ptc_reshard_hosts_load of the version the recovery names, as ptc train
 * --resume and ptc reshard --mpi call it), then send the busiest host's
 * byte count from process 0 to a process on another host with plain
 * MPI_Send (the link's time for those bytes, the best of three). Prints one
 * JSON line: the recovery's seconds (timed apart), the version's bytes
 * (state_bytes), the plan's bytes moved between hosts, its lower bound, the
 * busiest host's bytes, the load's seconds (the slowest process's; of
 * which, each the slowest process's: reads, plan, exchange), the send's
 * seconds, the link's bandwidth and ratio = load / send (the goal: <= 1.5);
 * and the same bytes sent by every host at once (MPI_Alltoall of the
 * busiest host's bytes, split over its peers) with ratio_alltoall = load /
 * that: on one machine the veth "links" share its cores, so hosts sending
 * at once are slower than one pair alone.
 *
 *   mpirun -np W bench_hosts_resume --store DIR --to CFG */
#include <mpi.h>

#include "bench/bench_util.h"
#include "ptc/ckpt.h"
#include "ptc/reshard.h"

/* The layout of this host's part of version @p v under @p to. */
static ptc_layout *target_layout(ptc_store *s, uint64_t v, const ptc_config *to)
{
    uint64_t lv = 0;
    ptc_store_reader *rd = NULL;
    ptc_layout *l = NULL;
    CHECK(ptc_ckpt_hosts_local_version(s, v, &lv));
    CHECK(ptc_store_reader_open(&rd, s, lv));
    CHECK(ptc_layout_of_version(&l, rd, to));
    ptc_store_reader_close(rd);
    return l;
}

/* Seconds of the best of three sends of @p n bytes from process 0 to
 * process @p peer (barriers around each). */
static double link_seconds(int me, int peer, uint64_t n)
{
    uint8_t *buf = malloc(n + 1);
    if (!buf)
        exit(1);
    memset(buf, 1, n + 1);
    double best = 1e30;
    for (int k = 0; k < 3; k++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = bench_now();
        for (uint64_t at = 0; at < n; at += (uint64_t)1 << 30) {
            int part = (int)(n - at < ((uint64_t)1 << 30) ? n - at : (uint64_t)1 << 30);
            if (me == 0)
                MPI_Send(buf + at, part, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
            else if (me == peer)
                MPI_Recv(buf + at, part, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        double t = bench_now() - t0;
        best = t < best ? t : best;
    }
    free(buf);
    return best;
}

/* Seconds of the best of three MPI_Alltoall of @p n bytes from every
 * process to every other (each sends n * (np - 1)): the busiest host's
 * bytes moved by every host at once, as the load does, with plain MPI. */
static double alltoall_seconds(int np, uint64_t n)
{
    uint8_t *a = calloc((size_t)np, n + 1), *b = calloc((size_t)np, n + 1);
    if (!a || !b || n > INT32_MAX)
        exit(1);
    double best = 1e30;
    for (int k = 0; k < 3; k++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = bench_now();
        MPI_Alltoall(a, (int)n, MPI_BYTE, b, (int)n, MPI_BYTE, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t = bench_now() - t0;
        best = t < best ? t : best;
    }
    free(a);
    free(b);
    return best;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int me, np;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    const char *dir = NULL, *to_s = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--store"))
            dir = argv[i + 1];
        else if (!strcmp(argv[i], "--to"))
            to_s = argv[i + 1];
    }
    if (!dir || !to_s) {
        fprintf(stderr, "usage: mpirun -np W bench_hosts_resume --store DIR --to CFG\n");
        return 2;
    }
    ptc_config to;
    CHECK(ptc_config_parse(&to, to_s));
    if (ptc_config_world(&to) != np) {
        fprintf(stderr, "run one process per rank of %s (%d)\n", to_s, ptc_config_world(&to));
        return 2;
    }
    char name[MPI_MAX_PROCESSOR_NAME + 1] = {0};
    int len = 0, host = 0, nhosts = 0;
    MPI_Get_processor_name(name, &len);
    ptc_transport t;
    CHECK(ptc_transport_mpi(&t, MPI_COMM_WORLD));
    CHECK(ptc_reshard_hosts_index(&t, name, &host, &nhosts));
    ptc_store *s = NULL;
    CHECK(ptc_store_open(&s, dir, 0));
    uint64_t newest = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t_rec = bench_now();
    CHECK(ptc_ckpt_hosts_recover_over(&t, host, s, &newest));
    t_rec = bench_now() - t_rec;
    ptc_layout *l = target_layout(s, newest, &to);
    size_t nt = ptc_layout_count(l);
    void **bufs = calloc(nt + 1, sizeof *bufs);
    for (size_t i = 0; i < nt; i++) {
        size_t b = 0;
        CHECK(ptc_ckpt_local_bytes(l, i, me, &b));
        bufs[i] = b ? malloc(b) : NULL;
        if (b)
            memset(bufs[i], 0, b); /* touched: no page faults in the timing */
    }
    ptc_reshard_hosts_result res;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    CHECK(ptc_reshard_hosts_load(&t, host, s, newest, l, &me, 1, bufs, &res));
    double mine[5] = {bench_now() - t0, res.read_seconds, res.move_seconds,
                      res.plan.plan_seconds, t_rec},
           most[5];
    MPI_Allreduce(mine, most, 5, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double load = most[0];
    /* a process on another host than process 0's */
    int *hosts = calloc((size_t)np, sizeof *hosts), peer = -1;
    MPI_Allgather(&host, 1, MPI_INT, hosts, 1, MPI_INT, MPI_COMM_WORLD);
    for (int p = 1; p < np && peer < 0; p++)
        if (hosts[p] != hosts[0])
            peer = p;
    double link = peer > 0 && res.max_host_bytes ? link_seconds(me, peer, res.max_host_bytes) : 0;
    double all = np > 1 && res.max_host_bytes
                     ? alltoall_seconds(np, res.max_host_bytes / (uint64_t)(np - 1))
                     : 0;
    if (me == 0)
        printf("{\"hosts\":%d,\"version\":%llu,\"recover_s\":%.4f,\"state_bytes\":%llu,"
               "\"bytes_network\":%llu,\"lower_bound\":%llu,"
               "\"max_host_bytes\":%llu,\"load_s\":%.4f,\"read_s\":%.4f,\"move_s\":%.4f,"
               "\"plan_s\":%.4f,"
               "\"link_s\":%.4f,\"link_MBps\":%.1f,"
               "\"ratio\":%.3f,\"alltoall_s\":%.4f,\"ratio_alltoall\":%.3f}\n",
               res.hosts, (unsigned long long)res.version, most[4],
               (unsigned long long)res.bytes_read,
               (unsigned long long)res.plan.bytes_network,
               (unsigned long long)res.plan.bytes_network_lower_bound,
               (unsigned long long)res.max_host_bytes, load, most[1], most[2], most[3], link,
               link > 0 ? (double)res.max_host_bytes / link / 1e6 : 0.0,
               link > 0 ? load / link : 0.0, all, all > 0 ? load / all : 0.0);
    for (size_t i = 0; i < nt; i++)
        free(bufs[i]);
    free(bufs);
    free(hosts);
    ptc_layout_destroy(l);
    ptc_store_close(s);
    MPI_Finalize();
    return 0;
}
