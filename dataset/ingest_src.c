/* The input window of the ingest readers (dataset/ingest*.c): one growing
 * buffer over the current input, so a record is returned as a pointer into
 * it. Shared by the readers of every format. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataset/ingest_internal.h"
#include "base/util_internal.h"


int ptc_ingest_src_fill(struct ingest_src *s, size_t need)
{
    if (s->end - s->pos >= need || s->eof)
        return PTC_OK;
    if (s->pos > 0) {
        memmove(s->own, s->own + s->pos, s->end - s->pos);
        s->end -= s->pos;
        s->base += s->pos;
        s->pos = 0;
    }
    if (need > s->cap) {
        size_t cap = s->cap ? s->cap : INGEST_WINDOW;
        while (cap < need)
            cap *= 2;
        uint8_t *p = ptc_realloc(s->own, cap);
        if (!p)
            return PTC_E_NOMEM;
        s->own = p;
        s->data = p;
        s->cap = cap;
    }
    while (s->end < need && !s->eof) {
        ssize_t n = read(s->fd, s->own + s->end, s->cap - s->end);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return ptc_error_sys(PTC_E_IO, "read %s", s->name);
        }
        if (n == 0)
            s->eof = true;
        s->end += (size_t)n;
    }
    return PTC_OK;
}
