/* Test helper: store a copy of the newest version of a `ptc train` store
 * whose training-state record says another step: `train_restep STORE MODEL
 * STEP` (MODEL as --model). The state (parameters and AdamW moments) is
 * read under one process's layout and saved again unchanged with the
 * record's step set to STEP, as a job that ran that long would have saved
 * it; prints the new version. Used by tests/mpi/test_train_control.sh to
 * resume at the last steps a job can count. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/ckpt.h"
#include "ptc/exec_model.h"
#include "ptc/layout.h"
#include "ptc/rules.h"
#include "ptc/store.h"
#include "base/util_internal.h"

static int restep(const char *dir, const char *model, uint64_t step)
{
    ptc_exec_model_cfg m = {.layers = 4, .hidden = 16, .vocab = 32, .tokens = 8};
    PTC_TRY(ptc_exec_model_parse(&m, model));
    ptc_tensor_info *t = NULL;
    size_t n = 0;
    PTC_TRY(ptc_exec_model_tensors(&m, true, &t, &n));
    ptc_config c;
    ptc_config_init(&c); /* one process holds every tensor whole */
    ptc_rules *rules = NULL;
    ptc_layout *l = NULL;
    ptc_store *s = NULL;
    void **bufs = ptc_calloc(n, sizeof *bufs);
    ptc_ckpt_record rec;
    memset(&rec, 0, sizeof rec);
    int rc = bufs ? ptc_rules_load(&rules, "ptc-mlp") : PTC_E_NOMEM;
    if (rc == PTC_OK)
        rc = ptc_layout_create(&l, t, n, rules, &c);
    for (size_t i = 0; rc == PTC_OK && i < n; i++) {
        size_t bytes = 0;
        rc = ptc_ckpt_local_bytes(l, i, 0, &bytes);
        if (rc == PTC_OK && bytes && !(bufs[i] = ptc_malloc(bytes)))
            rc = PTC_E_NOMEM;
    }
    if (rc == PTC_OK)
        rc = ptc_store_open(&s, dir, 0);
    int rank = 0;
    uint64_t from = 0, v = 0;
    if (rc == PTC_OK)
        rc = ptc_ckpt_load_local(s, 0, l, &rank, 1, bufs, NULL, &rec, &from);
    if (rc == PTC_OK) {
        rec.step = step;
        rc = ptc_ckpt_save(s, l, rules, &rank, 1, (const void *const *)bufs, &rec, NULL,
                           MPI_COMM_SELF, &v);
    }
    if (rc == PTC_OK)
        printf("version %llu (from version %llu) at step %llu\n", (unsigned long long)v,
               (unsigned long long)from, (unsigned long long)step);
    ptc_ckpt_record_free(&rec);
    ptc_store_close(s);
    for (size_t i = 0; bufs && i < n; i++)
        ptc_free(bufs[i]);
    ptc_free(bufs);
    ptc_layout_destroy(l);
    ptc_rules_destroy(rules);
    ptc_exec_model_tensors_free(t, n);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: train_restep STORE MODEL STEP\n");
        return 2;
    }
    char *end;
    errno = 0;
    unsigned long long step = strtoull(argv[3], &end, 10);
    if (errno || *end || argv[3][0] == '-') {
        fprintf(stderr, "train_restep: bad step '%s'\n", argv[3]);
        return 2;
    }
    MPI_Init(&argc, &argv);
    int rc = restep(argv[1], argv[2], step);
    if (rc != PTC_OK)
        fprintf(stderr, "train_restep: %s\n", ptc_last_error());
    MPI_Finalize();
    return rc == PTC_OK ? 0 : 1;
}
