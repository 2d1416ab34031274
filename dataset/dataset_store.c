/* Ingest into the store: an ingest reader (ingest.c) feeding the store's
 * dataset writer (ptc/store_dataset.c), and the audit of a stored dataset. */
#include <string.h>

#include "ptc/dataset.h"
#include "ptc/store.h"

int ptc_dataset_ingest(ptc_store *store, const char *name, const char *format,
                       const char *const *inputs, size_t ninputs,
                       const ptc_dataset_ingest_options *opts, uint64_t *samples)
{
    static const ptc_dataset_ingest_options none;
    if (!opts)
        opts = &none;
    if (samples)
        *samples = 0;
    if (!format || strlen(format) > PTC_STORE_DATASET_FORMAT_MAX)
        return ptc_error_set(PTC_E_INVAL, "bad dataset format");
    ptc_ingest *in;
    PTC_TRY(ptc_ingest_open(&in, format, inputs, ninputs));
    if (opts->progress)
        ptc_ingest_set_progress(in, opts->progress, opts->progress_user);
    ptc_store_dataset_options wo = {.codec = opts->codec, .level = opts->level,
                                    .replace = opts->replace};
    ptc_store_dataset_writer *w;
    int rc = ptc_store_dataset_writer_begin(&w, store, name, &wo);
    if (rc < 0)
        goto out_ingest;
    for (;;) {
        const uint8_t *data;
        size_t len;
        bool end;
        if ((rc = ptc_ingest_next(in, &data, &len, &end)) < 0 || end)
            break;
        if ((rc = ptc_store_dataset_writer_append(w, data, len)) < 0)
            break;
    }
    ptc_store_dataset_info info;
    if (rc == PTC_OK && (rc = ptc_store_dataset_writer_commit(w, format, &info)) == PTC_OK &&
        samples)
        *samples = info.samples;
    ptc_store_dataset_writer_destroy(w);
out_ingest:
    ptc_ingest_destroy(in);
    return rc;
}

int ptc_dataset_audit(ptc_store *store, const char *name, uint64_t seed, uint64_t epoch,
                      ptc_dataset_audit_result *out)
{
    ptc_store_dataset_info info;
    PTC_TRY(ptc_store_dataset_stat(store, name, &info));
    return ptc_dataset_audit_counts(store, name, info.id, seed, epoch, info.samples, out);
}

int ptc_dataset_audit_policy(ptc_store *store, const char *name, uint64_t seed, uint64_t epoch,
                             const ptc_dataset_batch_policy *policy,
                             ptc_dataset_audit_result *out)
{
    ptc_store_dataset_info info;
    PTC_TRY(ptc_store_dataset_stat(store, name, &info));
    /* a start past the end reads nothing: not an audit of anything served */
    if (policy && policy->start > info.samples)
        return ptc_error_set(PTC_E_RANGE, "dataset '%s': start %llu is past its %llu records",
                             name, (unsigned long long)policy->start,
                             (unsigned long long)info.samples);
    return ptc_dataset_audit_counts_policy(store, name, info.id, seed, epoch, info.samples,
                                           policy, out);
}
