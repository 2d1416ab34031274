/* Fuzz elastic_slots_parse, the slots file `ptc elastic --slots FILE`
 * watches (exec/model/elastic.c). The input up to its first NUL (at most
 * 255 bytes, the file's limit) is the text. The result is PTC_OK or
 * PTC_E_INVAL with a one-line message starting "slots file", the same on a
 * second parse. A success is exactly one run of decimal digits among
 * blanks and newlines (an independent scan), of value 0..PTC_CONFIG_MAX_WORLD,
 * and "%d\n" of it parses back to it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/model/elastic_internal.h"
#include "ptc/config.h"
#include "ptc/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TEXT_CAP 255

static void check(bool ok)
{
    if (!ok)
        abort();
}

/* One run of digits, the rest blanks; its value (or -1 when over 9 digits). */
static bool one_number(const char *t, long *v)
{
    int runs = 0;
    size_t digits = 0;
    *v = 0;
    for (const char *p = t; *p; p++) {
        if (*p >= '0' && *p <= '9') {
            if (p == t || p[-1] < '0' || p[-1] > '9')
                runs++;
            if (++digits <= 9)
                *v = *v * 10 + (*p - '0');
        } else if (!strchr(" \t\r\v\f\n", *p)) {
            return false;
        }
    }
    if (digits > 9)
        *v = -1;
    return runs == 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char text[TEXT_CAP + 1];
    size_t len = 0;
    while (len < size && len < TEXT_CAP && data[len] != 0) {
        text[len] = (char)data[len];
        len++;
    }
    text[len] = '\0';
    int a = -7, b = -7;
    int rc = elastic_slots_parse(text, &a);
    check(rc == PTC_OK || rc == PTC_E_INVAL);
    check(elastic_slots_parse(text, &b) == rc);
    long v;
    bool num = one_number(text, &v);
    if (rc != PTC_OK) {
        const char *m = ptc_last_error();
        check(!strncmp(m, "slots file", 10) && !strchr(m, '\n'));
        check(!num || v < 0 || v > PTC_CONFIG_MAX_WORLD);
        return 0;
    }
    check(num && v == a && a == b && a >= 0 && a <= PTC_CONFIG_MAX_WORLD);
    char out[32];
    snprintf(out, sizeof out, "%d\n", a);
    check(elastic_slots_parse(out, &b) == PTC_OK && b == a);
    return 0;
}
