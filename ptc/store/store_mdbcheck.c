/* A check of meta/data.mdb's page structure before liblmdb reads it
 * (docs/format.md §2.6). liblmdb trusts the pages it maps: a damaged page
 * header, node offset, size or child page number makes it read outside
 * the page or the file and crash (a bit-flip campaign of ours found such
 * a page: a SIGSEGV inside mdb_cursor_get). This walk reads the file with
 * pread, never through the map, and checks every invariant liblmdb relies
 * on when it reads: the two meta pages agree, and every page reachable from
 * the newest (the free-page tree, the main tree, every named database's
 * tree, their overflow pages) is where its parent says, of the right kind,
 * with its nodes, keys and data inside the page, each page reached once.
 * It is the on-disk format of liblmdb 0.9 (MDB_DATA_VERSION 1, 64-bit
 * page numbers, little-endian). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ptc/store/store_internal.h"
#include "base/util_internal.h"

#define PAGEHDRSZ 16u
#define NODESIZE 8u
#define META_OFF PAGEHDRSZ /* MDB_meta follows the page header */
#define MDB_MAGIC_ 0xBEEFC0DEu
#define MDB_DATA_VERSION_ 1u
#define P_BRANCH 0x01u
#define P_LEAF 0x02u
#define P_OVERFLOW 0x04u
#define P_META 0x08u
#define P_LEAF2 0x20u
#define P_SUBP 0x40u
#define P_MEMORY 0xc010u /* P_DIRTY, P_LOOSE, P_KEEP: in-memory states */
#define F_BIGDATA 0x01u
#define F_SUBDATA 0x02u
#define F_DUPDATA 0x04u
#define P_INVALID UINT64_MAX
#define MAXKEYSIZE 511u
#define MAXDEPTH 32 /* liblmdb's cursor stack */
#define DB_SIZE 48u /* MDB_db */

typedef struct mdb_db {
    uint16_t flags, depth;
    uint64_t entries, root;
} mdb_db;

typedef struct mdb_meta {
    uint32_t psize;
    uint64_t last_pg, txnid;
    mdb_db dbs[2]; /* free pages, main */
} mdb_meta;

typedef struct walk {
    int fd;
    const char *dir;
    uint32_t psize;
    uint64_t npages;  /* of the file */
    uint64_t last_pg; /* of the snapshot */
    uint8_t *seen;    /* one bit per page */
} walk;

static uint64_t le(const uint8_t *p, int n)
{
    return ptc_le_get(p, n);
}

static int damaged(const char *dir, uint64_t pg, const char *why)
{
    if (pg == P_INVALID)
        return ptc_error_set(PTC_E_STORE, "store %s: meta/data.mdb is damaged (%s)", dir, why);
    return ptc_error_set(PTC_E_STORE, "store %s: meta/data.mdb is damaged (page %llu: %s)", dir,
                         (unsigned long long)pg, why);
}

static void db_decode(mdb_db *d, const uint8_t *p)
{
    d->flags = (uint16_t)le(p + 4, 2);
    d->depth = (uint16_t)le(p + 6, 2);
    d->entries = le(p + 32, 8);
    d->root = le(p + 40, 8);
}

/* Meta page @p i (psize @p psize, 0: page 0 at offset 0, size unknown). */
static int meta_read(int fd, const char *dir, int i, uint32_t psize, mdb_meta *m)
{
    uint8_t b[PAGEHDRSZ + 136];
    if (pread(fd, b, sizeof b, (off_t)i * psize) != (ssize_t)sizeof b)
        return damaged(dir, (uint64_t)i, "a meta page is cut short");
    const uint8_t *mm = b + META_OFF;
    if (!(le(b + 10, 2) & P_META) || le(mm, 4) != MDB_MAGIC_ ||
        le(mm + 4, 4) != MDB_DATA_VERSION_)
        return damaged(dir, (uint64_t)i, "not an LMDB meta page of data version 1");
    m->psize = (uint32_t)le(mm + 24, 4); /* mm_dbs[FREE].md_pad */
    db_decode(&m->dbs[0], mm + 24);
    db_decode(&m->dbs[1], mm + 24 + DB_SIZE);
    m->last_pg = le(mm + 24 + 2 * DB_SIZE, 8);
    m->txnid = le(mm + 32 + 2 * DB_SIZE, 8);
    if (m->psize < 512 || m->psize > 65536 || (m->psize & (m->psize - 1)))
        return damaged(dir, (uint64_t)i, "bad page size");
    return PTC_OK;
}

int ptc_store_mdb_metas(int fd, const char *dir, uint64_t *txnid)
{
    mdb_meta m[2];
    int rc = PTC_OK;
    /* a writer rewrites a meta page at each commit: read both again when
     * they disagree, before calling that damage */
    for (int attempt = 0; attempt < 5; attempt++) {
        if ((rc = meta_read(fd, dir, 0, 0, &m[0])) < 0 ||
            (rc = meta_read(fd, dir, 1, m[0].psize, &m[1])) < 0)
            return rc;
        uint64_t a = m[0].txnid, b = m[1].txnid;
        /* transaction N writes meta page N % 2: the two differ by one (or
         * both are 0, before the first commit); otherwise liblmdb would
         * pick an older snapshot, or a damaged one, silently */
        bool paired = (a == 0 && b == 0) || (a + 1 == b && b % 2 == 1) ||
                      (b + 1 == a && a % 2 == 0);
        if (m[0].psize != m[1].psize)
            rc = damaged(dir, P_INVALID, "the meta pages disagree on the page size");
        else if (!paired)
            rc = damaged(dir, P_INVALID, "the meta pages' transaction ids do not pair up");
        else
            rc = PTC_OK;
        if (rc == PTC_OK)
            break;
        usleep(2000);
    }
    if (rc < 0)
        return rc;
    /* the size after the metas: a writer extends the file with a
     * transaction's pages before its meta page names them, so a size taken
     * before could be older than the newest meta (a store opened beside a
     * writer then looked damaged) */
    struct stat st;
    if (fstat(fd, &st) != 0)
        return ptc_error_sys(PTC_E_IO, "stat %s/meta/data.mdb", dir);
    const mdb_meta *cur = &m[m[0].txnid < m[1].txnid];
    uint64_t npages = (uint64_t)st.st_size / cur->psize;
    if (cur->last_pg < 1 || cur->last_pg >= npages)
        return damaged(dir, P_INVALID, "the last page is past the end of the file");
    for (int d = 0; d < 2; d++)
        if (cur->dbs[d].root != P_INVALID &&
            (cur->dbs[d].root < 2 || cur->dbs[d].root > cur->last_pg ||
             cur->dbs[d].depth > MAXDEPTH))
            return damaged(dir, P_INVALID, "a tree's root is not a page of the file");
    if (txnid)
        *txnid = cur->txnid;
    return PTC_OK;
}

/* ---- the walk ---------------------------------------------------------------------- */

static int mark(walk *w, uint64_t pg, uint64_t n)
{
    if (pg < 2 || pg > w->last_pg || n > w->last_pg - pg + 1)
        return damaged(w->dir, pg, "a page number outside the file");
    for (uint64_t p = pg; p < pg + n; p++) {
        if (w->seen[p / 8] & (1u << (p % 8)))
            return damaged(w->dir, p, "reached twice (a loop or a shared page)");
        w->seen[p / 8] |= (uint8_t)(1u << (p % 8));
    }
    return PTC_OK;
}

static int read_page(walk *w, uint64_t pg, uint8_t *b)
{
    if (pread(w->fd, b, w->psize, (off_t)(pg * w->psize)) != (ssize_t)w->psize)
        return damaged(w->dir, pg, "cut short");
    if (le(b, 8) != pg)
        return damaged(w->dir, pg, "its header names another page");
    return PTC_OK;
}

/* The overflow pages of a big value of @p dsz bytes at page @p op. */
static int check_overflow(walk *w, uint64_t op, uint64_t dsz)
{
    uint8_t h[PAGEHDRSZ];
    if (op < 2 || op > w->last_pg)
        return damaged(w->dir, op, "an overflow page number outside the file");
    if (pread(w->fd, h, sizeof h, (off_t)(op * w->psize)) != (ssize_t)sizeof h)
        return damaged(w->dir, op, "cut short");
    uint64_t pages = le(h + 12, 4);
    if (le(h, 8) != op || (le(h + 10, 2) & ~P_MEMORY) != P_OVERFLOW || pages == 0 ||
        dsz > pages * w->psize - PAGEHDRSZ)
        return damaged(w->dir, op, "not the overflow pages its node says");
    return mark(w, op, pages);
}

static int walk_tree(walk *w, uint64_t pg, int level, const mdb_db *db, bool main_tree);

/* Node @p i of page @p b (@p nkeys nodes): inside the page, its key and
 * (leaf) data too. Sets *kind: its flags, *pgno: a branch child or a big
 * value's first page, *data / *dsz: a leaf's data in the page. */
static int check_node(walk *w, uint64_t pg, const uint8_t *b, unsigned i, bool leaf,
                      unsigned *flags, uint64_t *pgno, const uint8_t **data, uint64_t *dsz)
{
    uint64_t off = le(b + PAGEHDRSZ + 2 * i, 2), upper = le(b + 14, 2);
    if (off < upper || off % 2 || off + NODESIZE > w->psize)
        return damaged(w->dir, pg, "a node outside the page");
    const uint8_t *n = b + off;
    uint64_t lo = le(n, 2), hi = le(n + 2, 2), fl = le(n + 4, 2), ksize = le(n + 6, 2);
    if (ksize > MAXKEYSIZE || off + NODESIZE + ksize > w->psize)
        return damaged(w->dir, pg, "a key outside the page");
    *flags = leaf ? (unsigned)fl : 0;
    if (!leaf) {
        *pgno = lo | hi << 16 | fl << 32;
        return PTC_OK;
    }
    *dsz = lo | hi << 16;
    const uint8_t *d = n + NODESIZE + ksize;
    uint64_t room = w->psize - (off + NODESIZE + ksize);
    if (fl & ~(F_BIGDATA | F_SUBDATA | F_DUPDATA))
        return damaged(w->dir, pg, "unknown node flags");
    if (fl & F_BIGDATA) {
        if (room < 8)
            return damaged(w->dir, pg, "a big value's page number outside the page");
        *pgno = le(d, 8);
        *data = NULL;
        return PTC_OK;
    }
    if (*dsz > room)
        return damaged(w->dir, pg, "a value outside the page");
    *data = d;
    return PTC_OK;
}

static int walk_page(walk *w, uint64_t pg, const uint8_t *b, int level, const mdb_db *db,
                     bool main_tree)
{
    unsigned flags = (unsigned)le(b + 10, 2) & ~P_MEMORY;
    bool leaf = flags == P_LEAF, branch = flags == P_BRANCH;
    uint64_t lower = le(b + 12, 2), upper = le(b + 14, 2);
    if (!leaf && !branch)
        return damaged(w->dir, pg, flags & (P_LEAF2 | P_SUBP) ? "a page kind this store never "
                                                              "makes" : "not a tree page");
    if (lower < PAGEHDRSZ || lower % 2 || lower > upper || upper > w->psize)
        return damaged(w->dir, pg, "bad free-space bounds");
    unsigned nkeys = (unsigned)((lower - PAGEHDRSZ) / 2);
    if (branch && (nkeys < 1 || level + 1 >= db->depth))
        return damaged(w->dir, pg, "a branch page with no child or past the tree's depth");
    if (leaf && level + 1 != db->depth)
        return damaged(w->dir, pg, "a leaf page at another depth than the tree's");
    uint64_t *kids = NULL;
    int rc = PTC_OK;
    if (branch && !(kids = ptc_malloc(nkeys * sizeof *kids)))
        return PTC_E_NOMEM;
    for (unsigned i = 0; i < nkeys && rc == PTC_OK; i++) {
        unsigned fl;
        uint64_t child = 0, dsz = 0;
        const uint8_t *data = NULL;
        if ((rc = check_node(w, pg, b, i, leaf, &fl, &child, &data, &dsz)) < 0)
            break;
        if (branch) {
            kids[i] = child;
        } else if (fl & F_BIGDATA) {
            rc = check_overflow(w, child, dsz);
        } else if (fl & (F_SUBDATA | F_DUPDATA)) {
            /* named databases live in the main tree; the store's own
             * databases hold no duplicates */
            if (!main_tree || fl != F_SUBDATA || dsz != DB_SIZE) {
                rc = damaged(w->dir, pg, "a sub-database node where none can be");
                break;
            }
            mdb_db sub;
            db_decode(&sub, data);
            if (sub.root != P_INVALID)
                rc = sub.depth < 1 || sub.depth > MAXDEPTH
                         ? damaged(w->dir, pg, "a named database of bad depth")
                         : walk_tree(w, sub.root, 0, &sub, false);
        }
    }
    for (unsigned i = 0; branch && i < nkeys && rc == PTC_OK; i++)
        rc = walk_tree(w, kids[i], level + 1, db, main_tree);
    ptc_free(kids);
    return rc;
}

static int walk_tree(walk *w, uint64_t pg, int level, const mdb_db *db, bool main_tree)
{
    if (level >= MAXDEPTH)
        return damaged(w->dir, pg, "a tree deeper than liblmdb reads");
    PTC_TRY(mark(w, pg, 1));
    uint8_t *b = ptc_malloc(w->psize);
    if (!b)
        return PTC_E_NOMEM;
    int rc = read_page(w, pg, b);
    if (rc == PTC_OK)
        rc = walk_page(w, pg, b, level, db, main_tree);
    ptc_free(b);
    return rc;
}

int ptc_store_mdb_walk(int fd, const char *dir, uint64_t txnid)
{
    mdb_meta m[2];
    PTC_TRY(meta_read(fd, dir, 0, 0, &m[0]));
    PTC_TRY(meta_read(fd, dir, 1, m[0].psize, &m[1]));
    const mdb_meta *cur = m[0].txnid == txnid ? &m[0] : m[1].txnid == txnid ? &m[1] : NULL;
    if (!cur)
        return PTC_E_BUSY; /* overwritten meanwhile: the caller reads a newer snapshot */
    struct stat st;
    if (fstat(fd, &st) != 0)
        return ptc_error_sys(PTC_E_IO, "stat %s/meta/data.mdb", dir);
    walk w = {.fd = fd, .dir = dir, .psize = cur->psize, .last_pg = cur->last_pg};
    w.npages = (uint64_t)st.st_size / cur->psize;
    if (w.last_pg >= w.npages)
        return damaged(dir, P_INVALID, "the last page is past the end of the file");
    w.seen = ptc_calloc((size_t)(w.last_pg / 8 + 1), 1);
    if (!w.seen)
        return PTC_E_NOMEM;
    int rc = PTC_OK;
    for (int d = 0; d < 2 && rc == PTC_OK; d++)
        if (cur->dbs[d].root != P_INVALID)
            rc = cur->dbs[d].depth < 1 || cur->dbs[d].depth > MAXDEPTH
                     ? damaged(dir, P_INVALID, "a tree of bad depth")
                     : walk_tree(&w, cur->dbs[d].root, 0, &cur->dbs[d], d == 1);
    ptc_free(w.seen);
    return rc;
}
