/* Fuzz the decoder of a process's description of its local tensors (the bytes
 * the group exchanges in ptc_ckpt_collect_over) and the collection checks run
 * on what it decodes: any input decodes or fails with PTC_E_FORMAT, and a
 * decoded description, alone and twice (two processes), gives a layout (of
 * the configuration, or explicit: the pieces it carries) or a clean error. */
#include <stdint.h>
#include <stdlib.h>

#include "ptc/ckpt/ckpt_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char text[] = "match * tp=split(0) pp=all\n";
    static ptc_rules *rules;
    static ptc_config cfg;
    if (!rules && (ptc_rules_parse(&rules, text, sizeof text - 1, "fuzz") != PTC_OK ||
                   ptc_config_parse(&cfg, "tp=2") != PTC_OK))
        abort();
    ptc_ckpt_desc d[2];
    int rc = ptc_ckpt_desc_decode(&d[0], data, size);
    if (rc != PTC_OK) {
        if (rc != PTC_E_FORMAT && rc != PTC_E_NOMEM)
            abort();
        return 0;
    }
    if (ptc_ckpt_desc_decode(&d[1], data, size) != PTC_OK)
        abort(); /* the same bytes decode the same way */
    for (size_t n = 1; n <= 2; n++) {
        ptc_layout *l = NULL;
        bool ex = d[0].config[0] == '\0';
        if (ptc_ckpt_desc_layout(d, n, ex ? NULL : &cfg, ex ? NULL : rules, &l) == PTC_OK && !l)
            abort();
        ptc_layout_destroy(l);
    }
    ptc_ckpt_desc_free(&d[0]);
    ptc_ckpt_desc_free(&d[1]);
    return 0;
}
