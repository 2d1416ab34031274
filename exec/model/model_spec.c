/* The demo model's description (mlp:layers=L,hidden=H,vocab=V,tokens=N): a
 * file of its own, apart from model.c, because ptc elastic parses it without
 * the model: linked alone it needs neither MPI nor the kernels (OpenBLAS),
 * so the light ptc command can hold the elastic controller
 * (docs/architecture.md, "What a command loads"). */
#include <stdlib.h>
#include <string.h>

#include "exec/model/model_internal.h"

int ptc_exec_model_parse(ptc_exec_model_cfg *m, const char *text)
{
    if (strncmp(text, "mlp:", 4) != 0)
        return ptc_error_set(PTC_E_INVAL, "model '%s': expected mlp:layers=L,hidden=H,vocab=V",
                             text);
    const char *p = text + 4;
    while (*p) {
        const char *eq = strchr(p, '=');
        if (!eq)
            return ptc_error_set(PTC_E_INVAL, "model: '%s' is not key=value", p);
        char *end;
        long v = strtol(eq + 1, &end, 10);
        if (end == eq + 1 || (*end && *end != ',') || v < 0 || v > (1 << 20))
            return ptc_error_set(PTC_E_INVAL, "model: bad value in '%s'", p);
        size_t kl = (size_t)(eq - p);
        if (kl == 6 && !strncmp(p, "layers", kl))
            m->layers = (int)v;
        else if (kl == 6 && !strncmp(p, "hidden", kl) && v > 0)
            m->hidden = (int)v;
        else if (kl == 5 && !strncmp(p, "vocab", kl) && v > 1)
            m->vocab = (int)v;
        else if (kl == 6 && !strncmp(p, "tokens", kl) && v > 0)
            m->tokens = (int)v;
        else
            return ptc_error_set(PTC_E_INVAL, "model: unknown key or bad value in '%s'", p);
        p = *end ? end + 1 : end;
    }
    return PTC_OK;
}

size_t ptc_exec_model_act_bytes(const ptc_exec_model_cfg *m)
{
    return (size_t)m->tokens * (size_t)m->hidden * sizeof(float);
}
