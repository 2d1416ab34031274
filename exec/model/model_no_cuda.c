/* The demo model on a CUDA device, in a build without CUDA: every call that
 * can fail says so. Built instead of model_cuda.c, so that
 * include/ptc/exec_model.h is the same in every build. */
#include <string.h>

#include "ptc/exec_model.h"

static int no_cuda(void)
{
    return ptc_error_set(PTC_E_UNSUPPORTED, "built without cuda");
}

int ptc_exec_cuda_select_device(int local_rank, int local_size, int *device)
{
    (void)local_rank, (void)local_size;
    if (device)
        *device = -1;
    return no_cuda();
}

int ptc_exec_model_cuda_create(ptc_exec_model_cuda **out, const ptc_exec_model_cfg *m,
                               const ptc_sched *s, int rank, int64_t gmb_base,
                               int64_t gmb_total, ptc_exec_data_fn data, void *data_user)
{
    (void)m, (void)s, (void)rank, (void)gmb_base, (void)gmb_total, (void)data, (void)data_user;
    *out = NULL;
    return no_cuda();
}

void ptc_exec_model_cuda_destroy(ptc_exec_model_cuda *x)
{
    (void)x;
}

void ptc_exec_model_cuda_stage(ptc_exec_model_cuda *x, ptc_exec_stage *out)
{
    (void)x;
    memset(out, 0, sizeof *out);
}

void ptc_exec_model_cuda_set_step(ptc_exec_model_cuda *x, int64_t step)
{
    (void)x, (void)step;
}

int ptc_exec_model_cuda_losses(ptc_exec_model_cuda *x, const double **losses, int *n)
{
    (void)x;
    *losses = NULL;
    *n = 0;
    return no_cuda();
}

int ptc_exec_model_cuda_params(ptc_exec_model_cuda *x, const ptc_exec_param **params, size_t *n)
{
    (void)x;
    *params = NULL;
    *n = 0;
    return no_cuda();
}

ptc_exec_model *ptc_exec_model_cuda_host(ptc_exec_model_cuda *x)
{
    (void)x;
    return NULL;
}

int ptc_exec_model_cuda_pull_state(ptc_exec_model_cuda *x)
{
    (void)x;
    return no_cuda();
}

int ptc_exec_model_cuda_push_state(ptc_exec_model_cuda *x)
{
    (void)x;
    return no_cuda();
}

void ptc_exec_model_cuda_release_device(ptc_exec_model_cuda *x)
{
    (void)x;
}
