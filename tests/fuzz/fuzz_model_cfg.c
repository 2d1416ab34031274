/* Fuzz ptc_exec_model_parse, the `--model` text of `ptc train`. The input
 * up to its first NUL (at most 256 bytes) is the text; it is parsed into
 * two configurations holding different sentinel values. The result is
 * PTC_OK or PTC_E_INVAL, the same for both (the parse is deterministic).
 * After a success every field is either untouched in both (lr and seed
 * always are) or set to the same value in both, within the documented
 * range: layers 0..2^20 (a model may have no blocks), hidden and tokens
 * 1..2^20, vocab 2..2^20. The set fields printed canonically
 * (mlp:layers=L,hidden=H,vocab=V,tokens=N) parse back to the same values,
 * and every text of the documented grammar (mlp: then key=decimal pairs
 * of those keys, each value in range) checked by an independent matcher
 * is accepted with the values it spells. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/exec_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TEXT_CAP 256
#define DIM_MAX (1 << 20)

enum { F_LAYERS, F_HIDDEN, F_VOCAB, F_TOKENS, F_COUNT };

static const char *const keys[F_COUNT] = {"layers", "hidden", "vocab", "tokens"};
static const int lows[F_COUNT] = {0, 1, 2, 1};

static void check(bool ok)
{
    if (!ok)
        abort();
}

static void sentinel(ptc_exec_model_cfg *m, int v)
{
    m->layers = m->hidden = m->vocab = m->tokens = v;
    m->lr = 0.25f * (float)v;
    m->seed = (uint64_t)v * 0x9E3779B97F4A7C15ull;
}

static int *field(ptc_exec_model_cfg *m, int f)
{
    int *const p[F_COUNT] = {&m->layers, &m->hidden, &m->vocab, &m->tokens};
    return p[f];
}

/* The documented grammar: "mlp:" then one or more comma-separated KEY=NUM
 * (later keys win), NUM plain decimal digits within the key's range.
 * @p vals and @p set mean something only when it returns true. */
static bool match(const char *s, int vals[F_COUNT], bool set[F_COUNT])
{
    if (strncmp(s, "mlp:", 4) != 0)
        return false;
    const char *p = s + 4;
    do {
        int f = -1;
        for (int i = 0; i < F_COUNT; i++) {
            size_t kl = strlen(keys[i]);
            if (strncmp(p, keys[i], kl) == 0 && p[kl] == '=') {
                f = i;
                p += kl + 1;
                break;
            }
        }
        if (f < 0 || *p < '0' || *p > '9')
            return false;
        long v = 0;
        for (; *p >= '0' && *p <= '9'; p++)
            if ((v = v * 10 + (*p - '0')) > DIM_MAX)
                return false;
        if (v < lows[f])
            return false;
        vals[f] = (int)v;
        set[f] = true;
    } while (*p++ == ',');
    return p[-1] == '\0';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char text[TEXT_CAP + 1];
    size_t len = 0;
    while (len < size && len < TEXT_CAP && data[len] != 0) {
        text[len] = (char)data[len];
        len++;
    }
    text[len] = '\0';

    ptc_exec_model_cfg a, b, c;
    sentinel(&a, -7);
    sentinel(&b, -9);
    int rc = ptc_exec_model_parse(&a, text);
    check(rc == PTC_OK || rc == PTC_E_INVAL);
    check(ptc_exec_model_parse(&b, text) == rc);

    int want[F_COUNT] = {0};
    bool want_set[F_COUNT] = {false};
    bool strict = match(text, want, want_set);
    if (strict)
        check(rc == PTC_OK);
    if (rc != PTC_OK)
        return 0;

    check(a.lr == 0.25f * -7 && a.seed == (uint64_t)-7 * 0x9E3779B97F4A7C15ull);
    check(b.lr == 0.25f * -9 && b.seed == (uint64_t)-9 * 0x9E3779B97F4A7C15ull);
    char canon[TEXT_CAP] = "mlp:";
    size_t cl = 4;
    for (int f = 0; f < F_COUNT; f++) {
        int va = *field(&a, f), vb = *field(&b, f);
        bool set = va != -7;
        check(set == (vb != -9));
        if (strict && want_set[f])
            check(set && va == want[f]);
        if (!set)
            continue;
        check(va == vb && va >= lows[f] && va <= DIM_MAX);
        int w = snprintf(canon + cl, sizeof canon - cl, "%s%s=%d", cl > 4 ? "," : "", keys[f], va);
        check(w > 0 && (size_t)w < sizeof canon - cl);
        cl += (size_t)w;
    }
    if (cl == 4)
        return 0; /* "mlp:" alone sets nothing, so there is nothing to print */
    sentinel(&c, -7);
    check(ptc_exec_model_parse(&c, canon) == PTC_OK);
    check(a.layers == c.layers && a.hidden == c.hidden && a.vocab == c.vocab &&
          a.tokens == c.tokens && a.lr == c.lr && a.seed == c.seed);
    return 0;
}
