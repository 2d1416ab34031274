/* The layout of a stored version: its tensors under its stored rules, for
 * its own configuration or another one; or, for a version saved with an
 * explicit layout (per-rank pieces, e.g. from DTensors), that layout
 * rebuilt from its shard records. */
#include <stdlib.h>
#include <string.h>

#include "ptc/layout.h"
#include "ptc/store.h"
#include "base/util_internal.h"

/* The world W of a version whose configuration text is "explicit:W"
 * (docs/format.md §2.2), or 0 for a version of a configuration. */
static int explicit_world(const ptc_version_info *vi, int *world)
{
    if (ptc_layout_parse_explicit(vi->config ? vi->config : "", world) != PTC_OK)
        return ptc_error_set(PTC_E_STORE, "version %llu: %s", (unsigned long long)vi->version,
                             ptc_last_error());
    return PTC_OK;
}

/* The tensors of the version (names owned by the reader). */
static int version_tensors(const ptc_store_reader *r, ptc_tensor_info **out, size_t *nshards)
{
    size_t n = ptc_store_reader_tensor_count(r);
    ptc_tensor_info *infos = ptc_calloc(n ? n : 1, sizeof *infos);
    if (!infos)
        return PTC_E_NOMEM;
    *nshards = 0;
    for (size_t t = 0; t < n; t++) {
        ptc_store_tensor ti;
        int rc = ptc_store_reader_tensor(r, t, &ti);
        if (rc != PTC_OK) {
            ptc_free(infos);
            return rc;
        }
        infos[t].name = ti.name;
        infos[t].dtype = ti.dtype;
        infos[t].ndim = ti.ndim;
        memcpy(infos[t].shape, ti.shape, sizeof infos[t].shape);
        *nshards += ti.nshards;
    }
    *out = infos;
    return PTC_OK;
}

/* Every shard record as an explicit shard: an alias holds its owner's
 * local shape and pieces. */
static int explicit_of_version(ptc_layout **out, const ptc_store_reader *r, int world)
{
    const ptc_version_info *vi = ptc_store_reader_version(r);
    ptc_tensor_info *infos = NULL;
    size_t m = 0, n = ptc_store_reader_tensor_count(r);
    PTC_TRY(version_tensors(r, &infos, &m));
    ptc_layout_explicit_shard *sh = ptc_calloc(m + 1, sizeof *sh);
    int rc = sh ? PTC_OK : PTC_E_NOMEM;
    size_t k = 0;
    for (size_t t = 0; t < n && rc == PTC_OK; t++) {
        ptc_store_tensor ti;
        rc = ptc_store_reader_tensor(r, t, &ti);
        for (size_t i = 0; rc == PTC_OK && i < ti.nshards && k < m; i++) {
            ptc_shard_info si;
            rc = ptc_store_reader_shard_at(r, t, i, &si);
            if (rc != PTC_OK)
                break;
            sh[k].tensor = t;
            sh[k].rank = si.rank > (uint32_t)world ? world : (int)si.rank;
            sh[k].ndim = si.local_ndim;
            memcpy(sh[k].shape, si.local_shape, sizeof sh[k].shape);
            sh[k].pieces = si.pieces;
            sh[k].npieces = si.npieces;
            k++;
        }
    }
    if (rc == PTC_OK) {
        rc = ptc_layout_create_explicit(out, infos, n, world, sh, k);
        if (rc == PTC_E_INVAL || rc == PTC_E_RANGE)
            rc = ptc_error_set(PTC_E_STORE, "version %llu (an explicit layout of %d ranks): %s",
                               (unsigned long long)vi->version, world, ptc_last_error());
    }
    ptc_free(sh);
    ptc_free(infos);
    return rc;
}

int ptc_layout_version_rules(const ptc_store_reader *r, ptc_rules **out)
{
    *out = NULL;
    const ptc_version_info *vi = ptc_store_reader_version(r);
    const char *rt = vi->rules ? vi->rules : "";
    int world;
    PTC_TRY(explicit_world(vi, &world));
    if (world && !rt[0])
        PTC_TRY(ptc_rules_preset_text("none", &rt));
    return ptc_rules_parse(out, rt, strlen(rt), "stored rules");
}

int ptc_layout_of_version_rules(ptc_layout **out, const ptc_store_reader *r,
                                const ptc_config *cfg, const ptc_rules *rules)
{
    *out = NULL;
    const ptc_version_info *vi = ptc_store_reader_version(r);
    int world;
    PTC_TRY(explicit_world(vi, &world));
    if (world && !cfg)
        return explicit_of_version(out, r, world);
    ptc_config stored;
    if (!cfg) {
        PTC_TRY(ptc_config_parse(&stored, vi->config ? vi->config : ""));
        cfg = &stored;
    }
    ptc_rules *own = NULL;
    if (!rules) {
        PTC_TRY(ptc_layout_version_rules(r, &own));
        rules = own;
    }
    ptc_tensor_info *infos = NULL;
    size_t m;
    int rc = version_tensors(r, &infos, &m);
    if (rc == PTC_OK)
        rc = ptc_layout_create(out, infos, ptc_store_reader_tensor_count(r), rules, cfg);
    ptc_free(infos);
    ptc_rules_destroy(own);
    return rc;
}

int ptc_layout_of_version(ptc_layout **out, const ptc_store_reader *r, const ptc_config *cfg)
{
    return ptc_layout_of_version_rules(out, r, cfg, NULL);
}
