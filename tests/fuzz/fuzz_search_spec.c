/* Fuzz ptc_search_spec_parse, the `--model` spec of `ptc suggest`
 * (gpt:layers=L,hidden=H,heads=A,vocab=V,seq=S[,kv_heads=K][,ffn=F]
 * [,recompute=R] or mlp:layers=L,hidden=H,vocab=V[,tokens=N]). The input up
 * to its first NUL (at most 512 bytes) is the text. The result is PTC_OK or
 * PTC_E_INVAL with a one-line message, the same on a second parse, and a
 * failed parse leaves the output untouched. After a success: the family is
 * gpt or mlp; layers 1..2^20; hidden, vocab, seq 1..2^40; gpt: heads
 * dividing hidden, kv_heads dividing heads, ffn >= 1, recompute one of the
 * three; mlp: no heads, kv_heads or ffn. The spec printed canonically parses
 * back to the same values, and a small one builds a cost model. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/error.h"
#include "ptc/search.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TEXT_CAP 512
#define MAX40 ((int64_t)1 << 40)

static void check(bool ok)
{
    if (!ok)
        abort();
}

static bool same(const ptc_search_spec *a, const ptc_search_spec *b)
{
    return a->family == b->family && a->layers == b->layers && a->hidden == b->hidden &&
           a->heads == b->heads && a->kv_heads == b->kv_heads && a->ffn == b->ffn &&
           a->vocab == b->vocab && a->seq == b->seq && a->recompute == b->recompute;
}

static const char *const recompute[] = {"selective", "none", "full"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char text[TEXT_CAP + 1];
    size_t len = 0;
    while (len < size && len < TEXT_CAP && data[len] != 0) {
        text[len] = (char)data[len];
        len++;
    }
    text[len] = '\0';

    ptc_search_spec a, b, sent;
    memset(&sent, 0x5a, sizeof sent);
    a = sent;
    int rc = ptc_search_spec_parse(&a, text);
    check(rc == PTC_OK || rc == PTC_E_INVAL);
    check(ptc_search_spec_parse(&b, text) == rc);
    if (rc != PTC_OK) {
        check(!memcmp(&a, &sent, sizeof a));
        const char *msg = ptc_last_error();
        check(msg && *msg);
        return 0;
    }
    check(same(&a, &b));
    check(a.layers >= 1 && a.layers <= (1 << 20));
    check(a.hidden >= 1 && a.hidden <= MAX40 && a.vocab >= 1 && a.vocab <= MAX40 &&
          a.seq >= 1 && a.seq <= MAX40);
    char canon[TEXT_CAP];
    if (a.family == PTC_SEARCH_GPT) {
        check(a.heads >= 1 && a.heads <= MAX40 && a.hidden % a.heads == 0);
        check(a.kv_heads >= 1 && a.heads % a.kv_heads == 0);
        check(a.ffn >= 1);
        check((int)a.recompute >= 0 && (int)a.recompute < 3);
        snprintf(canon, sizeof canon,
                 "gpt:layers=%lld,hidden=%lld,heads=%lld,kv_heads=%lld,ffn=%lld,vocab=%lld,"
                 "seq=%lld,recompute=%s",
                 (long long)a.layers, (long long)a.hidden, (long long)a.heads,
                 (long long)a.kv_heads, (long long)a.ffn, (long long)a.vocab, (long long)a.seq,
                 recompute[a.recompute]);
    } else {
        check(a.family == PTC_SEARCH_MLP);
        check(a.heads == 0 && a.kv_heads == 0 && a.ffn == 0);
        snprintf(canon, sizeof canon, "mlp:layers=%lld,hidden=%lld,vocab=%lld,tokens=%lld",
                 (long long)a.layers, (long long)a.hidden, (long long)a.vocab,
                 (long long)a.seq);
    }
    /* ffn defaults to 4H, which may pass 2^40: then it cannot be spelled */
    if (a.ffn <= MAX40) {
        ptc_search_spec c;
        check(ptc_search_spec_parse(&c, canon) == PTC_OK);
        check(same(&a, &c));
    }
    /* a small spec describes a model */
    if (a.layers <= 64 && a.hidden <= 4096 && a.vocab <= 65536 && a.seq <= 65536 &&
        a.ffn <= 16384) {
        ptc_cost_model *m = NULL;
        int mrc = ptc_cost_model_from_spec(&m, &a);
        check(mrc == PTC_OK || mrc == PTC_E_NOMEM);
        check(!m || ptc_cost_model_layers(m) == a.layers);
        ptc_cost_model_destroy(m);
    }
    return 0;
}
