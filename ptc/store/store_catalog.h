/* The dataset catalog record (docs/format.md §8.1): its codec, shared by the
 * dataset store (store_dataset.c) and the format upgrade (store_upgrade.c).
 * Private to the store module. */
#ifndef PTC_STORE_CATALOG_H
#define PTC_STORE_CATALOG_H

#include "ptc/store/store_internal.h"

typedef struct ds_rec {
    uint64_t id, samples;
    int64_t created;
    char format[PTC_STORE_DATASET_FORMAT_MAX + 1];
    ptc_blob_rec data, index;
} ds_rec;

void ds_rec_free(ds_rec *r);
/* Append the record of dataset @p name, sealed (its sum in @p sum). */
int ds_rec_encode(ptc_buf *b, const char *name, const ds_rec *r, uint64_t *sum);
/* A catalog record as LMDB holds it (key @p k = the name, NUL-terminated in
 * @p name): where liblmdb put it, its sum (store format @p fmt >= 2), then
 * the fields. PTC_E_STORE naming the dataset. */
int ds_rec_get(ptc_store *s, unsigned fmt, const MDB_val *k, const MDB_val *v,
               const char *name, ds_rec *r, uint64_t *sum);

#endif
