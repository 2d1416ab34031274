/* Collectives over a ptc_transport (include/ptc/transport.h): agreement on
 * an outcome carrying the failing process's message, and the gather of
 * variable-length bytes, built from the transport's all-gather and
 * broadcast. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/transport.h"
#include "base/transport_internal.h"
#include "base/util_internal.h"

/* The longest failure message sent between processes. */
#define AGREE_MSG_MAX 1000

static int self_allgather(void *user, const void *in, size_t n, void *out)
{
    (void)user;
    if (n)
        memmove(out, in, n);
    return PTC_OK;
}

static int self_broadcast(void *user, void *buf, size_t n, int root)
{
    (void)user, (void)buf, (void)n, (void)root;
    return PTC_OK;
}

static int self_barrier(void *user)
{
    (void)user;
    return PTC_OK;
}

void ptc_transport_self(ptc_transport *t)
{
    *t = (ptc_transport){.rank = 0, .size = 1, .allgather = self_allgather,
                         .broadcast = self_broadcast, .barrier = self_barrier};
}

int ptc_transport_agree(const ptc_transport *t, int rc, const char *what)
{
    if (t->size <= 1)
        return rc;
    int32_t mine = rc < 0 ? (int32_t)rc : 0;
    /* not ptc_calloc: an injected failure here would leave the others
     * waiting in the collective (4 bytes a process; a real failure to get
     * them ends the job) */
    int32_t *all = calloc((size_t)t->size, sizeof *all);
    if (!all)
        return ptc_error_set(PTC_E_NOMEM, "%s: no memory to agree", what);
    int trc = t->allgather(t->user, &mine, sizeof mine, all);
    int first = -1, code = PTC_OK;
    for (int p = 0; trc == PTC_OK && p < t->size && first < 0; p++)
        if (all[p] < 0)
            first = p, code = all[p];
    free(all);
    if (trc != PTC_OK)
        return ptc_error_set(trc, "%s: the agreement failed: %s", what, ptc_last_error());
    if (first < 0)
        return PTC_OK;
    char msg[AGREE_MSG_MAX];
    memset(msg, 0, sizeof msg);
    if (t->rank == first)
        snprintf(msg, sizeof msg, "%s", ptc_last_error()[0] ? ptc_last_error() : ptc_strerror(rc));
    if ((trc = t->broadcast(t->user, msg, sizeof msg, first)) != PTC_OK)
        return ptc_error_set(trc, "%s: the broadcast of a failure failed: %s", what,
                             ptc_last_error());
    msg[sizeof msg - 1] = 0;
    size_t wl = strlen(what);
    if (!strncmp(msg, what, wl) && !strncmp(msg + wl, " failed on process ", 19))
        return ptc_error_set(code, "%s", msg); /* agreed already (nested calls): said once */
    return ptc_error_set(code, "%s failed on process %d: %s", what, first, msg);
}

/* Every process's byte count into @p lens; the largest into *top. */
static int gather_lengths(const ptc_transport *t, size_t n, size_t *lens, size_t *top)
{
    uint64_t mine = n, big = 0;
    uint64_t *all = calloc((size_t)t->size, sizeof *all); /* as in ptc_transport_agree */
    if (!all)
        return ptc_error_set(PTC_E_NOMEM, "no memory to gather lengths");
    int rc = t->allgather(t->user, &mine, sizeof mine, all);
    for (int p = 0; rc == PTC_OK && p < t->size; p++) {
        lens[p] = (size_t)all[p];
        big = PTC_MAX(big, all[p]);
    }
    free(all);
    if (rc == PTC_OK && big > (SIZE_MAX - 1) / (size_t)t->size)
        rc = ptc_error_set(PTC_E_RANGE, "gather of %llu bytes from %d processes",
                           (unsigned long long)big, t->size);
    *top = (size_t)big;
    return rc;
}

/* Every process sends the longest length (padded) in one collective; the
 * bytes are then packed in place. @p root < 0: to every process. */
static int gather_bytes(const ptc_transport *t, const void *in, size_t n, int root, void **out,
                        size_t *lens)
{
    *out = NULL;
    size_t top = 0;
    PTC_TRY(gather_lengths(t, n, lens, &top));
    bool here = root < 0 || t->rank == root;
    /* without a gather every process receives everything (the root keeps it) */
    bool whole = here || !t->gather;
    uint8_t *pad = ptc_calloc(1, top + 1), *buf = whole ? ptc_malloc(top * t->size + 1) : NULL;
    int rc = pad && (buf || !whole) ? PTC_OK : PTC_E_NOMEM;
    if ((rc = ptc_transport_agree(t, rc, "gather")) != PTC_OK) {
        ptc_free(pad);
        ptc_free(buf);
        return rc;
    }
    if (n)
        memcpy(pad, in, n);
    if (root >= 0 && t->gather)
        rc = t->gather(t->user, pad, top, buf, root);
    else
        rc = t->allgather(t->user, pad, top, buf);
    ptc_free(pad);
    if (rc != PTC_OK || !here) {
        ptc_free(buf);
        return rc;
    }
    size_t at = 0;
    for (int p = 0; p < t->size; p++) {
        memmove(buf + at, buf + (size_t)p * top, lens[p]);
        at += lens[p];
    }
    *out = buf;
    return PTC_OK;
}

int ptc_transport_allgatherv(const ptc_transport *t, const void *in, size_t n, void **out,
                             size_t *lens)
{
    return gather_bytes(t, in, n, -1, out, lens);
}

int ptc_transport_gatherv(const ptc_transport *t, const void *in, size_t n, int root,
                          void **out, size_t *lens)
{
    if (root < 0 || root >= t->size) {
        *out = NULL;
        return ptc_error_set(PTC_E_INVAL, "gather to process %d of %d", root, t->size);
    }
    return gather_bytes(t, in, n, root, out, lens);
}

void ptc_transport_free(void *p)
{
    ptc_free(p);
}

/* ---- point-to-point messages ------------------------------------------------------ */

int ptc_transport_check_peers(const ptc_transport *t, int rc, size_t nsend, const int *to,
                              size_t nrecv, const int *from)
{
    for (size_t i = 0; i < nsend && rc == PTC_OK; i++)
        if (to[i] < 0 || to[i] >= t->size)
            rc = ptc_error_set(PTC_E_INVAL, "exchange: no process %d of %d", to[i], t->size);
    for (size_t j = 0; j < nrecv && rc == PTC_OK; j++)
        if (from[j] < 0 || from[j] >= t->size)
            rc = ptc_error_set(PTC_E_INVAL, "exchange: no process %d of %d", from[j], t->size);
    return rc;
}

/* The all-gather's stand-in for a transport without an exchange: every
 * process's message headers (destination, length), then its messages'
 * bytes, to every process; each keeps those sent to it, in order. */
static int exchange_by_allgather(const ptc_transport *t, size_t nsend, const int *to,
                                 const void *const *sbuf, const size_t *slen, size_t nrecv,
                                 const int *from, void *const *rbuf, const size_t *rlen)
{
    size_t total = 0, *hl = NULL, *pl = NULL, *cur = NULL;
    uint64_t *head = ptc_malloc(16 * nsend + 1);
    uint8_t *pay = NULL, *hall = NULL, *pall = NULL;
    int rc = head ? PTC_OK : PTC_E_NOMEM;
    for (size_t i = 0; rc == PTC_OK && i < nsend; i++) {
        head[2 * i] = (uint64_t)to[i];
        head[2 * i + 1] = slen[i];
        total += slen[i];
    }
    if (rc == PTC_OK && (!(pay = ptc_malloc(total + 1)) ||
                         !(hl = ptc_calloc((size_t)t->size, sizeof *hl)) ||
                         !(pl = ptc_calloc((size_t)t->size, sizeof *pl)) ||
                         !(cur = ptc_calloc((size_t)t->size, 2 * sizeof *cur))))
        rc = PTC_E_NOMEM;
    for (size_t i = 0, at = 0; rc == PTC_OK && i < nsend; at += slen[i], i++)
        if (slen[i])
            memcpy(pay + at, sbuf[i], slen[i]);
    if ((rc = ptc_transport_agree(t, rc, "exchange")) < 0 ||
        (rc = ptc_transport_allgatherv(t, head, 16 * nsend, (void **)&hall, hl)) < 0 ||
        (rc = ptc_transport_allgatherv(t, pay, total, (void **)&pall, pl)) < 0)
        goto out_free;
    /* cur[2p]: process p's next header (an index into hall's u64 pairs),
     * cur[2p + 1]: the offset of that message's bytes in pall */
    size_t hat = 0, pat = 0;
    for (int p = 0; p < t->size; p++) {
        cur[2 * p] = hat / 16;
        cur[2 * p + 1] = pat;
        hat += hl[p];
        pat += pl[p];
    }
    const uint64_t *hdr = (const uint64_t *)hall;
    for (size_t j = 0; rc == PTC_OK && j < nrecv; j++) {
        int p = from[j];
        size_t end = 0; /* past p's last header */
        for (int q = 0; q <= p; q++)
            end += hl[q] / 16;
        bool found = false;
        while (!found && cur[2 * p] < end) {
            size_t k = cur[2 * p]++;
            size_t len = (size_t)hdr[2 * k + 1];
            if ((int)hdr[2 * k] == t->rank) {
                found = true;
                if (len != rlen[j])
                    rc = ptc_error_set(PTC_E_INVAL,
                                       "exchange: process %d sent %zu bytes, %zu expected", p,
                                       len, rlen[j]);
                else if (len)
                    memcpy(rbuf[j], pall + cur[2 * p + 1], len);
            }
            cur[2 * p + 1] += len;
        }
        if (!found && rc == PTC_OK)
            rc = ptc_error_set(PTC_E_INVAL, "exchange: a message expected from process %d "
                               "never came", p);
    }
out_free:
    ptc_free(head);
    ptc_free(pay);
    ptc_free(hl);
    ptc_free(pl);
    ptc_free(cur);
    ptc_transport_free(hall);
    ptc_transport_free(pall);
    return rc;
}

int ptc_transport_exchange(const ptc_transport *t, size_t nsend, const int *to,
                           const void *const *sbuf, const size_t *slen, size_t nrecv,
                           const int *from, void *const *rbuf, const size_t *rlen)
{
    return ptc_transport_exchange_after(t, PTC_OK, "exchange", nsend, to, sbuf, slen, nrecv,
                                        from, rbuf, rlen);
}

int ptc_transport_exchange_after(const ptc_transport *t, int rc, const char *what, size_t nsend,
                                 const int *to, const void *const *sbuf, const size_t *slen,
                                 size_t nrecv, const int *from, void *const *rbuf,
                                 const size_t *rlen)
{
    /* agreed before the collective: a process leaving alone would hang the others */
    rc = ptc_transport_check_peers(t, rc, nsend, to, nrecv, from);
    PTC_TRY(ptc_transport_agree(t, rc, what));
    if (t->exchange)
        return t->exchange(t->user, nsend, to, sbuf, slen, nrecv, from, rbuf, rlen);
    return exchange_by_allgather(t, nsend, to, sbuf, slen, nrecv, from, rbuf, rlen);
}
