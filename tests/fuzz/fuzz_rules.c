/* Fuzz the rules parser, name resolution and the placement text: any input
 * parses or fails cleanly; canonical text re-parses to itself; every
 * resolved placement formats and parses back to an equal placement. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/rules.h"

static void check(bool ok)
{
    if (!ok)
        abort();
}

static void resolve_one(const ptc_rules *r, const char *name)
{
    ptc_placement p, q;
    char buf[1024];
    if (ptc_rules_resolve(r, name, &p) != PTC_OK)
        return;
    check(ptc_placement_format(&p, buf, sizeof buf) == PTC_OK);
    check(ptc_placement_parse(&q, buf) == PTC_OK);
    check(ptc_placement_equal(&p, &q));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the input is rules text, then optionally "\n%%\n" and names to resolve,
     * one per line */
    const char *text = (const char *)data;
    size_t tlen = size;
    const char *sep = NULL;
    for (size_t i = 0; i + 4 <= size; i++)
        if (memcmp(text + i, "\n%%\n", 4) == 0) {
            sep = text + i;
            break;
        }
    if (sep)
        tlen = (size_t)(sep - text) + 1;
    ptc_rules *r = NULL;
    if (ptc_rules_parse(&r, text, tlen, "fuzz") == PTC_OK) {
        const char *canon = ptc_rules_text(r);
        ptc_rules *r2 = NULL;
        check(ptc_rules_parse(&r2, canon, strlen(canon), "canonical") == PTC_OK);
        check(strcmp(ptc_rules_text(r2), canon) == 0);
        static const char *const names[] = {
            "model.layers.0.self_attn.q_proj.weight", "model.layers.12.mlp.up_proj.weight.exp_avg",
            "transformer.h.3.attn.c_attn.weight", "lm_head.weight", "", "a", "x.exp_avg_sq",
            "model.layers.99999999999999.x"};
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            resolve_one(r, names[i]);
            /* both rule sets must agree */
            ptc_placement a, b;
            int ra = ptc_rules_resolve(r, names[i], &a);
            int rb = ptc_rules_resolve(r2, names[i], &b);
            check(ra == rb);
            if (ra == PTC_OK)
                check(ptc_placement_equal(&a, &b));
        }
        if (sep) {
            const char *p = sep + 4, *end = text + size;
            while (p < end) {
                const char *q = memchr(p, '\n', (size_t)(end - p));
                if (!q)
                    q = end;
                char *name = malloc((size_t)(q - p) + 1);
                memcpy(name, p, (size_t)(q - p));
                name[q - p] = '\0';
                resolve_one(r, name);
                free(name);
                p = q + 1;
            }
        }
        ptc_rules_destroy(r2);
        ptc_rules_destroy(r);
    }
    /* the same bytes as placement text */
    char *s = malloc(size + 1);
    memcpy(s, data, size);
    s[size] = '\0';
    ptc_placement p, q;
    char buf[2048];
    if (ptc_placement_parse(&p, s) == PTC_OK) {
        check(ptc_placement_format(&p, buf, sizeof buf) == PTC_OK);
        check(ptc_placement_parse(&q, buf) == PTC_OK);
        check(ptc_placement_equal(&p, &q));
    }
    free(s);
    return 0;
}
