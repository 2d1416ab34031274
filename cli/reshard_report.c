/* What ptc reshard prints, in both executables (cli/cli_reshard.h). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <jansson.h>

#include "cli/cli_reshard.h"

/* A report's figures: printed as text lines, or as members of its JSON. */
typedef struct figure {
    const char *k;
    uint64_t v;
} figure;

static void print_figures(const figure *f, size_t n)
{
    for (size_t i = 0; i < n; i++)
        printf("  %-26s %llu\n", f[i].k, (unsigned long long)f[i].v);
}

static void set_figures(json_t *o, const figure *f, size_t n)
{
    for (size_t i = 0; i < n; i++)
        json_object_set_new(o, f[i].k, json_integer((json_int_t)f[i].v));
}

/* Prints @p o on one line and frees it. */
static int print_object(json_t *o)
{
    char *txt = json_dumps(o, JSON_COMPACT);
    if (txt)
        printf("%s\n", txt);
    free(txt);
    json_decref(o);
    return PTC_CLI_OK;
}

int ptc_cli_reshard_print(const ptc_reshard_result *res, unsigned long long peak, bool json)
{
    const ptc_plan_stats *st = &res->plan;
    const figure kv[] = {
        {"parent", res->parent},
        {"bytes_written", res->bytes_written},
        {"shards_written", res->shards_written},
        {"shards_reused", res->shards_reused},
        {"shards_aliased", res->shards_aliased},
        {"bytes_total", st->bytes_total},
        {"bytes_reused", st->bytes_reused},
        {"bytes_local_copy", st->bytes_local_copy},
        {"bytes_network", st->bytes_network},
        {"bytes_network_lower_bound", st->bytes_network_lower_bound},
        {"max_rank_send", st->max_rank_send},
        {"max_rank_recv", st->max_rank_recv},
        {"transfers", st->transfers},
    };
    size_t n = sizeof kv / sizeof kv[0];
    if (!json) {
        printf("version %llu\n", (unsigned long long)res->version);
        print_figures(kv, n);
        printf("  %-26s %.3f\n", "seconds", res->seconds);
        return PTC_CLI_OK;
    }
    json_t *o = json_object();
    json_object_set_new(o, "version", json_integer((json_int_t)res->version));
    set_figures(o, kv, n);
    json_object_set_new(o, "hosts", json_integer(st->hosts));
    if (res->rounds) {
        json_object_set_new(o, "rounds", json_integer((json_int_t)res->rounds));
        json_object_set_new(o, "max_round_bytes", json_integer((json_int_t)res->max_round_bytes));
    }
    json_object_set_new(o, "peak_rss_bytes", json_integer((json_int_t)peak));
    json_object_set_new(o, "seconds", json_real(res->seconds));
    return print_object(o);
}

int ptc_cli_reshard_hosts_print(const ptc_reshard_hosts_result *res, uint64_t written,
                                const char *out, unsigned long long peak, bool json)
{
    const ptc_plan_stats *st = &res->plan;
    const figure kv[] = {
        {"source_version", res->version},
        {"bytes_total", st->bytes_total},
        {"bytes_reused", st->bytes_reused},
        {"bytes_read", res->bytes_read},
        {"bytes_network", st->bytes_network},
        {"bytes_network_lower_bound", st->bytes_network_lower_bound},
        {"max_host_bytes", res->max_host_bytes},
    };
    size_t n = sizeof kv / sizeof kv[0];
    if (!json) {
        if (out)
            printf("version %llu of %s\n", (unsigned long long)written, out);
        else
            printf("version %llu across %d host%s\n", (unsigned long long)written, res->hosts,
                   res->hosts == 1 ? "" : "s");
        printf("moved %llu bytes between hosts (lower bound %llu)\n",
               (unsigned long long)st->bytes_network,
               (unsigned long long)st->bytes_network_lower_bound);
        print_figures(kv, n);
        printf("  %-26s %.3f\n", "load_seconds", res->seconds);
        return PTC_CLI_OK;
    }
    json_t *o = json_object();
    json_object_set_new(o, "version", json_integer((json_int_t)written));
    json_object_set_new(o, "out", out ? json_string(out) : json_null());
    json_object_set_new(o, "hosts", json_integer(res->hosts));
    set_figures(o, kv, n);
    json_object_set_new(o, "peak_rss_bytes", json_integer((json_int_t)peak));
    json_object_set_new(o, "load_seconds", json_real(res->seconds));
    return print_object(o);
}

unsigned long long ptc_cli_peak_rss(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (unsigned long long)ru.ru_maxrss * 1024; /* Linux: KiB */
}
