/* Private parts of the elastic supervisor (exec/model/elastic_*.c): one
 * launch of the job under mpirun. Never installed. Nothing here talks MPI:
 * the light `ptc` links these objects. */
#ifndef PTC_ELASTIC_INTERNAL_H
#define PTC_ELASTIC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define ELASTIC_MAX_HOSTS 256
/* Without a hostfile this host runs at most --max-slots processes, or 8 per
 * CPU and at least 64 (docs/elastic.md). */
#define ELASTIC_SLOTS_PER_CPU 8
#define ELASTIC_SLOTS_MIN 64

/* The number of slots a slots file's text (NUL-terminated) says: one
 * decimal 0..PTC_CONFIG_MAX_WORLD among blanks and newlines. PTC_OK; PTC_E_INVAL
 * "slots file: 'TEXT' is not a number of slots (0..N)". */
int elastic_slots_parse(const char *text, int *slots);

struct ptc_elastic_opts;

/* The most slots this host is given without a hostfile (--max-slots, or
 * ELASTIC_SLOTS_PER_CPU per CPU and at least ELASTIC_SLOTS_MIN). */
int elastic_local_max_slots(const struct ptc_elastic_opts *o);

/* A watched file's text into @p buf (of @p cap bytes). PTC_E_BUSY: being
 * written (no final newline yet); PTC_E_INVAL: anything else, said. */
int elastic_read_input(const char *what, const char *path, char *buf, size_t cap);

/* The total the slots option or its file gives (-1: none); the file's text
 * in @p sbuf (of @p cap bytes). */
int elastic_read_slots(const struct ptc_elastic_opts *o, char *sbuf, size_t cap, int *total);

/* A pipe's bytes not yet cut into lines. */
typedef struct elastic_lines {
    char buf[8192];
    size_t len;
} elastic_lines;

/* Called per complete line (NUL-terminated, without its newline). */
typedef void (*elastic_line_fn)(void *ctx, char *line);

/* Read what @p fd holds into @p b and call @p fn per complete line (an
 * overlong line in pieces, a last line without a newline at EOF). Returns
 * false at EOF (or a read error), true while the pipe may hold more. */
bool elastic_lines_drain(int fd, elastic_lines *b, elastic_line_fn fn, void *ctx);

/* Where mpirun puts @p world ranks given a hostfile of usable[] slots per
 * host: it fills the hosts in file order. Fills host index @p at[i] and
 * rank count @p count[i]; returns the entries. */
int elastic_placement(const int *usable, int nh, int world, int *at, int *count);

/* PTC_OK when @p world ranks placed on @p usable (elastic_placement) run on
 * more than @p replicas hosts, or @p replicas <= 0; else PTC_E_CONFIG naming
 * configuration @p cfg, the hosts (@p names) and the copies asked for. */
int elastic_replicas_fit(const int *usable, const char *const *names, int nh, const char *cfg,
                         int world, int replicas);

/* Start @p argv (argv[0] found on PATH) in a process group of its own, its
 * stdout and stderr on two non-blocking pipes. PTC_OK or PTC_E_IO. */
int elastic_spawn(const char *const *argv, pid_t *pid, int *out_fd, int *err_fd);

/* Which of hosts @p names[0..n-1] can run a process now: one `MPIRUN
 * --hostfile F -np 1 PROG --version` per host (F naming that host alone, in
 * @p dir), 32 at once, output discarded. @p up[i]: that launch exited 0
 * within @p timeout seconds (a host whose daemon cannot start or call back
 * fails or is still waiting then, and is killed). PTC_OK or PTC_E_IO when a
 * probe cannot be started. */
int elastic_probe(const char *mpirun, const char *prog, const char *dir,
                  const char *const *names, int n, double timeout, bool *up);

/* Replace @p path by @p text atomically (a temporary beside it, renamed).
 * PTC_OK or PTC_E_IO. */
int elastic_write_file(const char *path, const char *text);

#endif
