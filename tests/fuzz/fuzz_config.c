/* Fuzz ptc_config_parse: any input parses or fails cleanly, and a parsed
 * configuration formats (both styles) to text that re-parses to an equal
 * configuration and formats to the same text again. The same text as an
 * explicit layout's ("explicit:W", ptc_layout_parse_explicit): parsed, it
 * is no configuration, and W is in range. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/config.h"
#include "ptc/layout.h"

static void check(bool ok)
{
    if (!ok)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    memcpy(s, data, size);
    s[size] = '\0';
    ptc_config c, d;
    if (ptc_config_parse(&c, s) == PTC_OK) {
        static char a[20000], b[20000];
        check(c.dp >= 1 && c.tp >= 1 && c.pp >= 1);
        check((long long)c.dp * c.tp * c.pp <= PTC_CONFIG_MAX_WORLD);
        check(c.nlayers == 0 || c.nlayers == c.pp);
        for (int style = 0; style < 2; style++) {
            check(ptc_config_format(&c, style, a, sizeof a) == PTC_OK);
            check(ptc_config_parse(&d, a) == PTC_OK);
            check(ptc_config_equal(&c, &d));
            check(ptc_config_format(&d, style, b, sizeof b) == PTC_OK);
            check(strcmp(a, b) == 0);
        }
        int p, dp, t;
        int w = ptc_config_world(&c);
        ptc_config_coords(&c, w - 1, &p, &dp, &t);
        check(ptc_config_rank(&c, p, dp, t) == w - 1);
    }
    int xw = -1;
    if (ptc_layout_parse_explicit(s, &xw) == PTC_OK && xw > 0)
        check(xw <= PTC_CONFIG_MAX_WORLD && ptc_config_parse(&c, s) != PTC_OK);
    else
        check(xw == 0);
    free(s);
    return 0;
}
