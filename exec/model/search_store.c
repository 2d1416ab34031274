/* The configuration search's model description from a stored version:
 * reads tensors and placements through the store's public API and hands
 * plain ptc_cost_tensor records to the cost model (exec/sched_cost.c),
 * which knows nothing of the store. */
#include <stdio.h>
#include <string.h>

#include "ptc/rules.h"
#include "ptc/search_store.h"
#include "base/util_internal.h"

#define DEFAULT_SEQ 2048

static bool has(const char *name, const char *part) { return strstr(name, part) != NULL; }

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* GPT-2's Conv1D keeps weights as [in, out]. */
static bool conv1d(const char *name)
{
    return has(name, ".c_attn.") || has(name, ".c_proj.") || has(name, ".c_fc.");
}

static ptc_cost_pp map_pp(ptc_pp_kind k)
{
    switch (k) {
    case PTC_PP_FIRST: return PTC_COST_PP_FIRST;
    case PTC_PP_LAST: return PTC_COST_PP_LAST;
    case PTC_PP_FIRST_LAST: return PTC_COST_PP_FIRST_LAST;
    case PTC_PP_ALL: return PTC_COST_PP_ALL;
    default: return PTC_COST_PP_LAYER;
    }
}

int ptc_search_store_model(ptc_cost_model **out, ptc_store *s, uint64_t version,
                           ptc_search_store_info *info)
{
    *out = NULL;
    ptc_search_store_info in;
    memset(&in, 0, sizeof in);
    ptc_store_reader *r;
    PTC_TRY(ptc_store_reader_open(&r, s, version));
    in.version = ptc_store_reader_version(r)->version;
    size_t n = ptc_store_reader_tensor_count(r);
    ptc_cost_tensor *t = ptc_calloc(n ? n : 1, sizeof *t);
    int rc = t ? PTC_OK : PTC_E_NOMEM;
    /* The most common length of 1-D layer tensors (norm weights), in case
     * there is no embedding to read the width from. */
    int64_t lens[64] = {0}, counts[64] = {0}, emb_w = 0, vocab = 0, pos = 0;
    ptc_dtype pdt = PTC_DTYPE_BF16;
    bool pdt_set = false;
    for (size_t i = 0; i < n && !rc; i++) {
        ptc_store_tensor st;
        if ((rc = ptc_store_reader_tensor(r, i, &st)))
            break;
        ptc_placement pl;
        if (!st.placement || !*st.placement) {
            rc = ptc_error_set(PTC_E_INVAL, "tensor %.200s has no placement (imported without "
                               "rules?)", st.name);
            break;
        }
        if ((rc = ptc_placement_parse(&pl, st.placement)))
            break;
        ptc_cost_tensor *c = &t[i];
        c->name = st.name;
        c->dtype = st.dtype;
        c->ndim = st.ndim;
        memcpy(c->shape, st.shape, sizeof c->shape);
        c->tp_dim = pl.tp == PTC_TP_SPLIT ? pl.dim : -1;
        c->tp_blocks = pl.nblocks > 1 && pl.blocks_equal ? pl.nblocks : 0;
        c->pp = map_pp(pl.pp);
        c->layer = pl.pp == PTC_PP_LAYER ? pl.layer : -1;
        c->kind = pl.kind == PTC_KIND_OPTIM ? PTC_COST_OPTIM : PTC_COST_PARAM;
        c->op = PTC_COST_OP_OTHER;
        if (c->kind == PTC_COST_OPTIM) {
            in.optim_tensors++;
            continue;
        }
        if (!pdt_set || ptc_dtype_size(st.dtype) < ptc_dtype_size(pdt))
            pdt = st.dtype;
        pdt_set = true;
        if (c->pp == PTC_COST_PP_LAYER && (has(st.name, "attn") || has(st.name, "attention")))
            in.attention = true;
        if (c->ndim == 1 && c->pp == PTC_COST_PP_LAYER) {
            for (int k = 0; k < 64; k++)
                if (!counts[k] || lens[k] == c->shape[0]) {
                    lens[k] = c->shape[0];
                    counts[k]++;
                    break;
                }
        }
        if (c->ndim != 2)
            continue;
        if (c->pp == PTC_COST_PP_FIRST_LAST) {
            c->op = PTC_COST_OP_TIED;
            c->in_dim = 0;
            emb_w = c->shape[1];
            vocab = c->shape[0];
        } else if (c->pp == PTC_COST_PP_FIRST) {
            c->op = PTC_COST_OP_LOOKUP;
            c->in_dim = 0;
            if (has(st.name, "pos") || has(st.name, "wpe"))
                pos = c->shape[0];
            else if (!emb_w)
                emb_w = c->shape[1];
        } else if (ends_with(st.name, ".weight") || c->pp == PTC_COST_PP_LAST) {
            c->op = PTC_COST_OP_MATMUL;
            c->in_dim = conv1d(st.name) ? 0 : 1;
            if (c->pp == PTC_COST_PP_LAST && !vocab)
                vocab = c->shape[1 - c->in_dim];
        }
    }
    if (!rc) {
        int64_t best = 0, bc = 0;
        for (int k = 0; k < 64 && counts[k]; k++)
            if (counts[k] > bc) {
                bc = counts[k];
                best = lens[k];
            }
        in.hidden = emb_w ? emb_w : best;
        if (in.hidden < 1)
            rc = ptc_error_set(PTC_E_INVAL, "cannot tell the model's width: no embedding and "
                                            "no 1-d layer tensors");
    }
    if (!rc) {
        in.seq = pos ? pos : DEFAULT_SEQ;
        in.seq_assumed = !pos;
        in.tensors = n;
        ptc_cost_model_info mi;
        memset(&mi, 0, sizeof mi);
        double h = (double)in.hidden, a = (double)ptc_dtype_size(pdt);
        mi.seq = in.seq;
        mi.hidden = in.hidden;
        mi.act_dtype = pdt;
        mi.grad_dtype = pdt;
        mi.optim_bytes_per_param = a <= 2 ? 12 : 8;
        if (in.attention) {
            mi.attn_flops = 4.0 * (double)in.seq * h;
            mi.recompute_flops = mi.attn_flops;
        }
        /* Korthikanti et al.'s 34 bytes per token per layer at 16 bits,
         * scaled to the activation size. */
        mi.act_split = 34 * h * a / 2;
        mi.act_last_split = 4.0 * (double)vocab;
        rc = ptc_cost_model_create(out, t, n, &mi);
    }
    ptc_free(t);
    ptc_store_reader_close(r);
    if (!rc && info)
        *info = in;
    return rc;
}
