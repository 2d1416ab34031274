/* Fuzz ptc_ckpt_record_from_json (the training-state record of a version's
 * metadata, untrusted text): any input parses or fails cleanly with
 * PTC_E_FORMAT, and a parsed record writes JSON that parses back to the same
 * record and writes the same text again (a fixed point). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/ckpt.h"

static void check(bool ok)
{
    if (!ok)
        abort();
}

static bool str_eq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ptc_ckpt_record r, q;
    int rc = ptc_ckpt_record_from_json((const char *)data, size, &r);
    if (rc != PTC_OK) {
        check(rc == PTC_E_FORMAT || rc == PTC_E_NOMEM);
        check(!r.config && !r.extra && !r.rng);
        return 0;
    }
    check(r.format == PTC_CKPT_RECORD_FORMAT);
    char *a = NULL, *b = NULL;
    check(ptc_ckpt_record_to_json(&r, &a) == PTC_OK);
    check(ptc_ckpt_record_from_json(a, strlen(a), &q) == PTC_OK);
    check(r.step == q.step && r.seed == q.seed && r.epoch == q.epoch && r.sample == q.sample &&
          r.global_batch == q.global_batch && r.has_loss == q.has_loss);
    check(!r.has_loss || (isnan(r.loss) ? isnan(q.loss) : r.loss == q.loss));
    check(str_eq(r.config, q.config) && str_eq(r.schedule, q.schedule) &&
          str_eq(r.dataset, q.dataset));
    check(r.rng_len == q.rng_len && (!r.rng_len || memcmp(r.rng, q.rng, r.rng_len) == 0));
    check(r.nextra == q.nextra);
    for (size_t i = 0; i < r.nextra; i++)
        check(strcmp(r.extra[i].key, q.extra[i].key) == 0 &&
              strcmp(r.extra[i].value, q.extra[i].value) == 0);
    check(ptc_ckpt_record_to_json(&q, &b) == PTC_OK);
    check(strcmp(a, b) == 0);
    ptc_store_free(a);
    ptc_store_free(b);
    ptc_ckpt_record_free(&r);
    ptc_ckpt_record_free(&q);
    return 0;
}
