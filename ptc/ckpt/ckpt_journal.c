/* A host's journal of the versions spread over hosts (docs/format.md §10):
 * two fixed records, STORE/hosts/prepared and STORE/hosts/committed, each
 * replaced atomically and durably, and the metadata that names a local
 * version's version across hosts. Both are read as untrusted bytes. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <xxhash.h>

#include "ptc/ckpt/ckpt_hosts.h"
#include "base/util_internal.h"

void ptc_hosts_rec_encode(const ptc_hosts_rec *r, uint8_t out[PTC_HOSTS_REC_SIZE])
{
    memcpy(out, PTC_HOSTS_MAGIC, 8);
    ptc_put_le32(out + 8, r->kind);
    ptc_put_le32(out + 12, r->host);
    ptc_put_le32(out + 16, r->hosts);
    ptc_put_le32(out + 20, r->replicas);
    ptc_put_le64(out + 24, r->version);
    ptc_put_le64(out + 32, r->local);
    ptc_put_le64(out + 40, r->attempt);
    ptc_put_le64(out + 48, XXH3_64bits(out, 48));
}

int ptc_hosts_rec_decode(const void *buf, size_t len, ptc_hosts_rec *r)
{
    const uint8_t *p = buf;
    memset(r, 0, sizeof *r);
    if (len != PTC_HOSTS_REC_SIZE)
        return ptc_error_set(PTC_E_FORMAT, "journal record of %zu bytes, not %d", len,
                             PTC_HOSTS_REC_SIZE);
    if (memcmp(p, PTC_HOSTS_MAGIC, 8))
        return ptc_error_set(PTC_E_FORMAT, "journal record without its magic");
    if (ptc_get_le64(p + 48) != XXH3_64bits(p, 48))
        return ptc_error_set(PTC_E_FORMAT, "journal record with a wrong checksum");
    ptc_hosts_rec d = {
        .kind = ptc_get_le32(p + 8),
        .host = ptc_get_le32(p + 12),
        .hosts = ptc_get_le32(p + 16),
        .replicas = ptc_get_le32(p + 20),
        .version = ptc_get_le64(p + 24),
        .local = ptc_get_le64(p + 32),
        .attempt = ptc_get_le64(p + 40),
    };
    if (d.kind != PTC_HOSTS_KIND_PREPARED && d.kind != PTC_HOSTS_KIND_COMMITTED)
        return ptc_error_set(PTC_E_FORMAT, "journal record of unknown kind %u", d.kind);
    if (d.hosts == 0 || d.host >= d.hosts || d.replicas >= d.hosts)
        return ptc_error_set(PTC_E_FORMAT, "journal record of host %u of %u with %u replicas",
                             d.host, d.hosts, d.replicas);
    if (d.version == 0 || d.local == 0 || d.attempt == 0 || d.attempt > INT64_MAX)
        return ptc_error_set(PTC_E_FORMAT, "journal record of version %llu, local %llu, "
                             "attempt %llu", (unsigned long long)d.version,
                             (unsigned long long)d.local, (unsigned long long)d.attempt);
    *r = d;
    return PTC_OK;
}

static int rec_path(ptc_store *s, const char *name, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "%s/" PTC_HOSTS_DIR "/%s", ptc_store_dir(s), name);
    if (n < 0 || (size_t)n >= cap)
        return ptc_error_set(PTC_E_RANGE, "store path too long: %s", ptc_store_dir(s));
    return PTC_OK;
}

int ptc_hosts_rec_read(ptc_store *s, const char *name, ptc_hosts_rec *r)
{
    char path[4096];
    memset(r, 0, sizeof *r);
    PTC_TRY(rec_path(s, name, path, sizeof path));
    char *data = NULL;
    size_t len = 0;
    int rc = ptc_file_read(path, 4096, &data, &len);
    if (rc == PTC_E_NOTFOUND) {
        ptc_error_clear();
        ptc_free(data);
        return PTC_E_NOTFOUND;
    }
    if (rc == PTC_E_RANGE)
        rc = ptc_error_set(PTC_E_FORMAT, "%s: larger than a journal record", path);
    if (rc == PTC_OK && (rc = ptc_hosts_rec_decode(data, len, r)) < 0)
        rc = ptc_error_set(rc, "%s: %s", path, ptc_last_error());
    ptc_free(data);
    return rc;
}

/* The journal's directory of the file @p path, made durable if new. */
static int make_dir(ptc_store *s, char *path)
{
    char *slash = strrchr(path, '/');
    *slash = '\0';
    struct stat st;
    bool made = stat(path, &st) != 0;
    int rc = ptc_mkdir_p(path, 0755);
    if (rc == PTC_OK && made) /* the new directory's entry in the store's */
        rc = ptc_fsync_dir(ptc_store_dir(s));
    *slash = '/';
    return rc;
}

int ptc_hosts_lock(ptc_store *s, int *fd)
{
    char path[4096];
    *fd = -1;
    PTC_TRY(rec_path(s, PTC_HOSTS_LOCK, path, sizeof path));
    PTC_TRY(make_dir(s, path));
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (f < 0)
        return ptc_error_sys(PTC_E_IO, "open %s", path);
    if (flock(f, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(f);
        if (e == EWOULDBLOCK)
            return ptc_error_set(PTC_E_BUSY, "%s: another checkpoint save or recovery across "
                                 "hosts is using this store", path);
        errno = e;
        return ptc_error_sys(PTC_E_IO, "lock %s", path);
    }
    *fd = f;
    return PTC_OK;
}

void ptc_hosts_unlock(int fd)
{
    if (fd >= 0)
        close(fd); /* and with it the flock */
}

int ptc_hosts_rec_write(ptc_store *s, const char *name, const ptc_hosts_rec *r)
{
    char path[4096];
    PTC_TRY(rec_path(s, name, path, sizeof path));
    PTC_TRY(make_dir(s, path));
    struct stat st;
    bool created = stat(path, &st) != 0;
    uint8_t bytes[PTC_HOSTS_REC_SIZE];
    ptc_hosts_rec_encode(r, bytes);
    char *tmp;
    int fd;
    PTC_TRY(ptc_tmpfile_create(path, &tmp, &fd));
    int rc = ptc_write_all(fd, bytes, sizeof bytes, tmp);
    if (rc < 0) {
        ptc_tmpfile_discard(fd, tmp);
        return rc;
    }
    PTC_TRY(ptc_tmpfile_commit(fd, tmp, path));
    /* a new record: the store's directory too, so the hosts directory's
     * entry is durable even if an earlier call made it and died before its
     * fsync */
    return created ? ptc_fsync_dir(ptc_store_dir(s)) : PTC_OK;
}

int ptc_hosts_rec_remove(ptc_store *s, const char *name)
{
    char path[4096];
    PTC_TRY(rec_path(s, name, path, sizeof path));
    if (unlink(path) != 0) {
        if (errno == ENOENT)
            return PTC_OK;
        return ptc_error_sys(PTC_E_IO, "remove %s", path);
    }
    *strrchr(path, '/') = '\0';
    return ptc_fsync_dir(path);
}

int ptc_hosts_meta_format(const ptc_hosts_rec *r, char *buf, size_t cap)
{
    int n = r->attempt
                ? snprintf(buf, cap,
                           "{\"host\":%u,\"hosts\":%u,\"replicas\":%u,\"version\":%llu,"
                           "\"attempt\":%llu}",
                           r->host, r->hosts, r->replicas, (unsigned long long)r->version,
                           (unsigned long long)r->attempt)
                : snprintf(buf, cap, "{\"host\":%u,\"hosts\":%u,\"replicas\":%u,\"version\":%llu}",
                           r->host, r->hosts, r->replicas, (unsigned long long)r->version);
    if (n < 0 || (size_t)n >= cap)
        return ptc_error_set(PTC_E_RANGE, "hosts metadata longer than %zu bytes", cap);
    return PTC_OK;
}

/* A member of @p o that is an integer in [lo, hi]. */
static int get_int(json_t *o, const char *key, uint64_t lo, uint64_t hi, uint64_t *v)
{
    json_t *x = json_object_get(o, key);
    if (!json_is_integer(x) || json_integer_value(x) < 0 ||
        (uint64_t)json_integer_value(x) < lo || (uint64_t)json_integer_value(x) > hi)
        return ptc_error_set(PTC_E_FORMAT, "hosts metadata: '%s' is not an integer in [%llu, %llu]",
                             key, (unsigned long long)lo, (unsigned long long)hi);
    *v = (uint64_t)json_integer_value(x);
    return PTC_OK;
}

int ptc_hosts_meta_parse(const char *text, size_t len, ptc_hosts_rec *r)
{
    memset(r, 0, sizeof *r);
    json_error_t err;
    json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    if (!o)
        return ptc_error_set(PTC_E_FORMAT, "hosts metadata: %s", err.text);
    uint64_t h = 0, n = 0, k = 0, v = 0, a = 0;
    int rc = PTC_OK;
    bool with_attempt = json_is_object(o) && json_object_size(o) == 5;
    if (!json_is_object(o) || (json_object_size(o) != 4 && !with_attempt))
        rc = ptc_error_set(PTC_E_FORMAT, "hosts metadata: not an object of 4 or 5 members");
    if (rc == PTC_OK && with_attempt)
        rc = get_int(o, "attempt", 1, INT64_MAX, &a);
    if (rc == PTC_OK && (rc = get_int(o, "hosts", 1, UINT32_MAX, &n)) == PTC_OK &&
        (rc = get_int(o, "host", 0, n - 1, &h)) == PTC_OK &&
        (rc = get_int(o, "replicas", 0, n - 1, &k)) == PTC_OK &&
        (rc = get_int(o, "version", 1, INT64_MAX, &v)) == PTC_OK)
        *r = (ptc_hosts_rec){.kind = PTC_HOSTS_KIND_COMMITTED,
                             .host = (uint32_t)h,
                             .hosts = (uint32_t)n,
                             .replicas = (uint32_t)k,
                             .version = v,
                             .attempt = a};
    json_decref(o);
    return rc;
}
