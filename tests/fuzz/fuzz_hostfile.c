/* Fuzz ptc_elastic_hostfile_parse, the hostfile `ptc elastic --hostfile`
 * watches. The input up to its first NUL (at most 8 KiB) is the text, parsed
 * into 8 hosts of room. The result is PTC_OK or PTC_E_INVAL with a one-line
 * message starting "hostfile", the same on a second parse. After a success:
 * at most 8 hosts, each name 1..255 printable bytes without '=' or blanks,
 * no name twice, slots 0..PTC_CONFIG_MAX_WORLD; the hosts printed as
 * `NAME slots=N` lines parse back to the same hosts, and a host named on
 * every line of the input appears (the count equals the lines with a name,
 * checked by an independent scan of the lines). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/elastic.h"
#include "ptc/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TEXT_CAP 8192
#define ROOM 8

static void check(bool ok)
{
    if (!ok)
        abort();
}

static bool blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

/* Lines whose text before any '#' holds a non-blank byte. */
static size_t named_lines(const char *t)
{
    size_t k = 0;
    bool seen = false, comment = false;
    for (const char *p = t;; p++) {
        if (!*p || *p == '\n') {
            k += seen;
            seen = comment = false;
            if (!*p)
                return k;
            continue;
        }
        if (*p == '#')
            comment = true;
        if (!comment && !blank(*p))
            seen = true;
    }
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

    ptc_elastic_host a[ROOM], b[ROOM];
    size_t na = 0, nb = 0;
    int rc = ptc_elastic_hostfile_parse(text, a, ROOM, &na);
    check(rc == PTC_OK || rc == PTC_E_INVAL);
    check(ptc_elastic_hostfile_parse(text, b, ROOM, &nb) == rc);
    if (rc != PTC_OK) {
        const char *m = ptc_last_error();
        check(!strncmp(m, "hostfile", 8) && !strchr(m, '\n'));
        return 0;
    }
    check(na == nb && na <= ROOM && na == named_lines(text));
    static char out[ROOM * 300];
    size_t o = 0;
    for (size_t i = 0; i < na; i++) {
        size_t nl = strlen(a[i].name);
        check(nl >= 1 && nl <= 255 && !strcmp(a[i].name, b[i].name) && a[i].slots == b[i].slots);
        for (size_t k = 0; k < nl; k++)
            check(a[i].name[k] > ' ' && a[i].name[k] < 0x7f && a[i].name[k] != '=' &&
                  a[i].name[k] != '#');
        for (size_t j = 0; j < i; j++)
            check(strcmp(a[i].name, a[j].name) != 0);
        check(a[i].slots >= 0 && a[i].slots <= PTC_CONFIG_MAX_WORLD);
        memcpy(out + o, a[i].name, nl);
        o += nl;
        o += (size_t)snprintf(out + o, sizeof out - o, " slots=%d\n", a[i].slots);
    }
    out[o] = 0;
    check(ptc_elastic_hostfile_parse(out, b, ROOM, &nb) == PTC_OK && nb == na);
    for (size_t i = 0; i < na; i++)
        check(!strcmp(a[i].name, b[i].name) && a[i].slots == b[i].slots);
    return 0;
}
