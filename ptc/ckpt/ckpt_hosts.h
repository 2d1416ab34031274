/* Inside ptc/ckpt: a host's journal of the versions spread over hosts
 * (docs/format.md §10), which the cross-host commit protocol
 * (ckpt_hosts.c) and its tests use. Never installed. */
#ifndef PTC_CKPT_HOSTS_H
#define PTC_CKPT_HOSTS_H

#include <stddef.h>
#include <stdint.h>

#include "ptc/ckpt.h"

/* The journal's directory inside a store, and its two files. */
#define PTC_HOSTS_DIR "hosts"
#define PTC_HOSTS_PREPARED "prepared"
#define PTC_HOSTS_COMMITTED "committed"
#define PTC_HOSTS_LOCK "lock"
/* Bytes of a journal record, and its magic. */
#define PTC_HOSTS_REC_SIZE 56
#define PTC_HOSTS_MAGIC "PTCHOST2"
/* Kinds of record. */
enum { PTC_HOSTS_KIND_PREPARED = 1, PTC_HOSTS_KIND_COMMITTED = 2 };
/* The local version's metadata key naming its version across hosts. */
#define PTC_HOSTS_META_KEY "ptc.hosts"

/* One journal record. */
typedef struct ptc_hosts_rec {
    uint32_t kind;
    uint32_t host, hosts, replicas;
    uint64_t version; /* across hosts */
    uint64_t local;   /* in this host's store */
    uint64_t attempt; /* the save's attempt id (1..INT64_MAX; 0 in metadata: none) */
} ptc_hosts_rec;

/* The record's 56 bytes (little-endian, XXH3-64 of the first 48 last). */
void ptc_hosts_rec_encode(const ptc_hosts_rec *r, uint8_t out[PTC_HOSTS_REC_SIZE]);
/* Decode untrusted bytes: PTC_E_FORMAT naming the fault (length, magic,
 * checksum, kind, host >= hosts, version 0). */
int ptc_hosts_rec_decode(const void *buf, size_t len, ptc_hosts_rec *r);

/* Read the journal file @p name of store @p s: PTC_OK, PTC_E_NOTFOUND (no
 * such file: *r zeroed), PTC_E_FORMAT naming the file. */
int ptc_hosts_rec_read(ptc_store *s, const char *name, ptc_hosts_rec *r);
/* Replace the journal file @p name of store @p s by @p r durably (a
 * temporary file, fsync, rename, fsync of the directory). */
int ptc_hosts_rec_write(ptc_store *s, const char *name, const ptc_hosts_rec *r);
/* Remove the journal file @p name durably (absent: PTC_OK). */
int ptc_hosts_rec_remove(ptc_store *s, const char *name);

/* Take the journal's lock, STORE/hosts/lock (flock, never waits), held by a
 * host's leader from before it reads the journal until its save or
 * recovery returns: *fd, to give to ptc_hosts_unlock. PTC_E_BUSY: another
 * save or recovery across hosts holds it. */
int ptc_hosts_lock(ptc_store *s, int *fd);
/* Release a lock from ptc_hosts_lock (@p fd < 0: none). */
void ptc_hosts_unlock(int fd);

/* The metadata value of a local version: {"host":h,"hosts":H,"replicas":K,"version":G}. */
int ptc_hosts_meta_format(const ptc_hosts_rec *r, char *buf, size_t cap);
/* Parse it (untrusted): PTC_E_FORMAT naming the fault. */
int ptc_hosts_meta_parse(const char *text, size_t len, ptc_hosts_rec *r);

#endif
