/* The layout of a stored version: its tensors under its stored rules, for
 * its own configuration or another one. */
#include <string.h>

#include "ptc/layout.h"
#include "ptc/store.h"
#include "base/util_internal.h"

int ptc_layout_of_version(ptc_layout **out, const ptc_store_reader *r, const ptc_config *cfg)
{
    *out = NULL;
    const ptc_version_info *vi = ptc_store_reader_version(r);
    ptc_config stored;
    if (!cfg) {
        PTC_TRY(ptc_config_parse(&stored, vi->config ? vi->config : ""));
        cfg = &stored;
    }
    ptc_rules *rules = NULL;
    const char *rt = vi->rules ? vi->rules : "";
    PTC_TRY(ptc_rules_parse(&rules, rt, strlen(rt), "stored rules"));
    size_t n = ptc_store_reader_tensor_count(r);
    ptc_tensor_info *infos = ptc_calloc(n ? n : 1, sizeof *infos);
    int rc = infos ? PTC_OK : PTC_E_NOMEM;
    for (size_t t = 0; t < n && rc == PTC_OK; t++) {
        ptc_store_tensor ti;
        rc = ptc_store_reader_tensor(r, t, &ti);
        infos[t].name = ti.name;
        infos[t].dtype = ti.dtype;
        infos[t].ndim = ti.ndim;
        memcpy(infos[t].shape, ti.shape, sizeof infos[t].shape);
    }
    if (rc == PTC_OK)
        rc = ptc_layout_create(out, infos, n, rules, cfg);
    ptc_free(infos);
    ptc_rules_destroy(rules);
    return rc;
}
