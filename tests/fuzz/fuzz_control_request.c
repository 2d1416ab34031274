/* Fuzz train_request_parse, the request of `ptc train --control FILE`
 * (exec/model/train_resize.c). The input up to its first NUL (at most
 * 4 KiB, the file's limit) is the file's text. The result is PTC_OK or a
 * failure with a one-line message, the same on a second parse. A stop is
 * exactly one non-blank line `stop` (blanks and a CR around it), checked by
 * an independent scan; a resize's configuration formats to text that, as
 * `resize CFG\n`, parses back to an equal configuration. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exec/model/train_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TEXT_CAP 4096

static void check(bool ok)
{
    if (!ok)
        abort();
}

static bool blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* The text holds one word "stop" and blanks, the word on the first line. */
static bool is_stop(const char *t)
{
    const char *p = t;
    while (*p == ' ' || *p == '\t')
        p++;
    if (strncmp(p, "stop", 4))
        return false;
    p += 4;
    while (*p == ' ' || *p == '\t' || *p == '\r')
        p++;
    if (*p && *p != '\n')
        return false;
    for (; *p; p++)
        if (!blank(*p))
            return false;
    return true;
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
    int action = -1, action2 = -1;
    ptc_config c, d;
    int rc = train_request_parse(text, &action, &c);
    check(train_request_parse(text, &action2, &d) == rc && action2 == action);
    if (rc != PTC_OK) {
        const char *m = ptc_last_error();
        check(rc < 0 && *m && !strchr(m, '\n') && action == TRAIN_GO);
        check(!is_stop(text));
        return 0;
    }
    check(action == TRAIN_STOP || action == TRAIN_RESIZE);
    check((action == TRAIN_STOP) == is_stop(text));
    if (action == TRAIN_RESIZE) {
        check(ptc_config_equal(&c, &d));
        static char line[TEXT_CAP + 64];
        memcpy(line, "resize ", 7);
        if (ptc_config_format(&c, PTC_CONFIG_STYLE_KEYS, line + 7, TEXT_CAP - 16) == PTC_OK) {
            strcat(line, "\n");
            check(train_request_parse(line, &action2, &d) == PTC_OK);
            check(action2 == TRAIN_RESIZE && ptc_config_equal(&c, &d));
        }
    }
    return 0;
}
