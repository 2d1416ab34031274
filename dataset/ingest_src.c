/* The input window of the ingest readers (dataset/ingest*.c): one growing
 * buffer over the current input, so a record is returned as a pointer into
 * it. Shared by the readers of every format. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
    /* a claimed length beyond the end of the file is not allocated for: read
     * to the end (and one byte more, to see it); the caller finds fewer bytes */
    uint64_t left = s->size > s->base ? s->size - s->base : 0;
    if (need > left) {
        struct stat st;
        if (fstat(s->fd, &st) == 0 && (uint64_t)st.st_size > s->size)
            s->size = (uint64_t)st.st_size; /* it grew */
        left = s->size > s->base ? s->size - s->base : 0;
        if (need > left)
            need = (size_t)left + 1;
    }
    if (need > s->cap) {
        size_t cap = s->cap ? s->cap : INGEST_WINDOW;
        while (cap < need)
            cap *= 2;
        if (cap > need && need > INGEST_WINDOW && (uint64_t)cap > left + 1)
            cap = need; /* no doubling past the end of the file */
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
