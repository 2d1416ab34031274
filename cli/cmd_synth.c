/* ptc synth: a random model with real Hugging Face naming, for demos,
 * tests and benchmarks. Deterministic in the seed. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "ptc/convert.h"
#include "ptc/safetensors.h"

const char ptc_cmd_synth_help[] =
    "write a random model with real Hugging Face tensor names\n"
    "\n"
    "usage: ptc synth --preset llama-tiny|gpt2-tiny --seed S --out FILE.safetensors\n"
    "                 [--layers L] [--hidden H] [--vocab V] [--dtype F32|BF16|F16]\n"
    "                 [--optim] [--ids]\n"
    "\n"
    "  llama-tiny  HF Llama naming: 3 layers, hidden 64, intermediate 176 (uneven\n"
    "              splits), grouped KV heads, untied lm_head\n"
    "  gpt2-tiny   HF GPT-2 naming: 2 layers, n_embd 48, Conv1D [in,out] weights,\n"
    "              fused c_attn, tied embeddings (no lm_head tensor)\n"
    "  --hidden H  model width (intermediate = 11H/4 for llama, 4H for gpt2)\n"
    "  --optim     add F32 optimizer state <param>.exp_avg and <param>.exp_avg_sq\n"
    "  --ids       I32 tensors whose elements hold their own global element id\n"
    "              (unique over the model), for exact data-movement tests\n"
    "Tensors are written in name order with __metadata__ {\"format\":\"pt\"}.\n";

#define MAX_TENSORS 4096

struct model {
    ptc_st_tensor t[MAX_TENSORS];
    char *names[MAX_TENSORS];
    size_t n;
};

static int add(struct model *m, ptc_dtype dt, const char *name, int ndim, int64_t d0, int64_t d1)
{
    if (m->n >= MAX_TENSORS)
        return ptc_cli_error("synth: too many tensors");
    ptc_st_tensor *t = &m->t[m->n];
    memset(t, 0, sizeof *t);
    m->names[m->n] = strdup(name);
    t->name = m->names[m->n];
    t->dtype = dt;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
    m->n++;
    return PTC_CLI_OK;
}

static int cmp_tensor(const void *a, const void *b)
{
    return strcmp(((const ptc_st_tensor *)a)->name, ((const ptc_st_tensor *)b)->name);
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void build_llama(struct model *m, ptc_dtype dt, int L, int64_t H, int64_t V, bool optim)
{
    int64_t I = H * 11 / 4, KV = H / 2;
    char b[256];
    add(m, dt, "model.embed_tokens.weight", 2, V, H);
    add(m, dt, "lm_head.weight", 2, V, H);
    add(m, dt, "model.norm.weight", 1, H, 0);
    for (int l = 0; l < L; l++) {
        static const char *const mats[] = {"self_attn.q_proj", "self_attn.k_proj",
                                           "self_attn.v_proj", "self_attn.o_proj",
                                           "mlp.gate_proj",    "mlp.up_proj",
                                           "mlp.down_proj"};
        int64_t rows[] = {H, KV, KV, H, I, I, H}, cols[] = {H, H, H, H, H, H, I};
        for (int k = 0; k < 7; k++) {
            snprintf(b, sizeof b, "model.layers.%d.%s.weight", l, mats[k]);
            add(m, dt, b, 2, rows[k], cols[k]);
        }
        snprintf(b, sizeof b, "model.layers.%d.input_layernorm.weight", l);
        add(m, dt, b, 1, H, 0);
        snprintf(b, sizeof b, "model.layers.%d.post_attention_layernorm.weight", l);
        add(m, dt, b, 1, H, 0);
    }
    if (optim) {
        size_t np = m->n;
        for (size_t i = 0; i < np; i++) {
            static const char *const sfx[] = {".exp_avg", ".exp_avg_sq"};
            for (int k = 0; k < 2; k++) {
                snprintf(b, sizeof b, "%s%s", m->t[i].name, sfx[k]);
                add(m, dt == PTC_DTYPE_I32 ? dt : PTC_DTYPE_F32, b, m->t[i].ndim,
                    m->t[i].shape[0], m->t[i].shape[1]);
            }
        }
    }
}

static void build_gpt2(struct model *m, ptc_dtype dt, int L, int64_t H, int64_t V, bool optim)
{
    char b[256];
    add(m, dt, "transformer.wte.weight", 2, V, H);
    add(m, dt, "transformer.wpe.weight", 2, 64, H);
    add(m, dt, "transformer.ln_f.weight", 1, H, 0);
    add(m, dt, "transformer.ln_f.bias", 1, H, 0);
    for (int l = 0; l < L; l++) {
        struct { const char *n; int nd; int64_t a, b; } ts[] = {
            {"ln_1.weight", 1, H, 0},          {"ln_1.bias", 1, H, 0},
            {"attn.c_attn.weight", 2, H, 3 * H}, {"attn.c_attn.bias", 1, 3 * H, 0},
            {"attn.c_proj.weight", 2, H, H},   {"attn.c_proj.bias", 1, H, 0},
            {"ln_2.weight", 1, H, 0},          {"ln_2.bias", 1, H, 0},
            {"mlp.c_fc.weight", 2, H, 4 * H},  {"mlp.c_fc.bias", 1, 4 * H, 0},
            {"mlp.c_proj.weight", 2, 4 * H, H}, {"mlp.c_proj.bias", 1, H, 0},
        };
        for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) {
            snprintf(b, sizeof b, "transformer.h.%d.%s", l, ts[k].n);
            add(m, dt, b, ts[k].nd, ts[k].a, ts[k].b);
        }
    }
    (void)optim;
}

static int write_model(struct model *m, const char *path, uint64_t seed, bool ids)
{
    static const ptc_st_kv meta[] = {{"format", "pt"}};
    ptc_st_writer *w = NULL;
    int rc = ptc_st_writer_create(&w, path, m->t, m->n, meta, 1);
    if (rc)
        return ptc_cli_lib_error(rc);
    enum { CHUNK = 1 << 20 };
    float *f32 = malloc(CHUNK * sizeof(float));
    uint8_t *out = malloc(CHUNK * 8);
    uint64_t state = seed, id = 0;
    if (!f32 || !out) {
        rc = ptc_error_set(PTC_E_NOMEM, "out of memory");
        goto out_free;
    }
    uint64_t total = 0, done = 0;
    for (size_t i = 0; i < m->n; i++) {
        int64_t nel = 1;
        for (int d = 0; d < m->t[i].ndim; d++)
            nel *= m->t[i].shape[d];
        total += (uint64_t)nel * ptc_dtype_size(m->t[i].dtype);
    }
    for (size_t i = 0; i < m->n && rc == PTC_OK; i++) {
        const ptc_st_tensor *t = &m->t[i];
        int64_t nel = 1;
        for (int d = 0; d < t->ndim; d++)
            nel *= t->shape[d];
        size_t es = ptc_dtype_size(t->dtype);
        for (int64_t a = 0; a < nel && rc == PTC_OK; a += CHUNK) {
            size_t k = (size_t)(nel - a < CHUNK ? nel - a : CHUNK);
            if (ids) {
                int32_t *p = (int32_t *)out;
                for (size_t j = 0; j < k; j++)
                    p[j] = (int32_t)(id++ & 0x7fffffff);
            } else {
                for (size_t j = 0; j < k; j++) {
                    uint64_t r = splitmix(&state);
                    f32[j] = (float)((double)(r >> 11) * 0x1.0p-53 - 0.5) * 0.2f;
                }
                rc = ptc_dtype_convert(out, t->dtype, f32, PTC_DTYPE_F32, k);
            }
            if (rc == PTC_OK)
                rc = ptc_st_writer_write(w, out, k * es);
            done += k * es;
            ptc_cli_progress("synth", done, total, NULL);
        }
    }
out_free:
    free(f32);
    free(out);
    ptc_cli_progress_done();
    if (rc) {
        ptc_st_writer_abort(w);
        return ptc_cli_lib_error(rc);
    }
    rc = ptc_st_writer_finish(w);
    return rc ? ptc_cli_lib_error(rc) : PTC_CLI_OK;
}

/* --hidden (dest: int *): a multiple of 4. */
static int parse_hidden(const char *v, void *dest)
{
    int *h = dest;
    if (!ptc_cli_parse_int(v, 4, 65536, h) || *h % 4)
        return ptc_cli_usage_error("--hidden must be a multiple of 4 in 4..65536");
    return PTC_CLI_OK;
}

/* --dtype (dest: ptc_dtype *): a floating-point type of 2 or 4 bytes. */
static int parse_dtype(const char *v, void *dest)
{
    ptc_dtype *dt = dest;
    if (ptc_dtype_parse(v, strlen(v), dt) || !ptc_dtype_is_float(*dt) || *dt == PTC_DTYPE_F64 ||
        *dt == PTC_DTYPE_F8_E4M3 || *dt == PTC_DTYPE_F8_E5M2)
        return ptc_cli_usage_error("--dtype must be F32, BF16 or F16");
    return PTC_CLI_OK;
}

int ptc_cmd_synth(int argc, char **argv)
{
    const char *preset = NULL, *out = NULL;
    uint64_t seed = 0;
    bool have_seed = false, optim = false, ids = false;
    int layers = -1, hidden = -1, vocab = -1;
    ptc_dtype dt = PTC_DTYPE_F32;
    const ptc_cli_opt opts[] = {
        PTC_CLI_OPT_STR("preset", &preset),
        {.name = "seed", .kind = PTC_CLI_U64, .dest = &seed, .given = &have_seed,
         .bad = "--seed: '%s' is not a non-negative integer"},
        PTC_CLI_OPT_STR("out", &out),
        PTC_CLI_OPT_INT("layers", &layers, 1, 1000, "--layers must be 1..1000"),
        PTC_CLI_OPT_CALL("hidden", parse_hidden, &hidden),
        PTC_CLI_OPT_INT("vocab", &vocab, 1, 1 << 22, "--vocab must be 1..4194304"),
        PTC_CLI_OPT_CALL("dtype", parse_dtype, &dt), PTC_CLI_OPT_FLAG("optim", &optim),
        PTC_CLI_OPT_FLAG("ids", &ids), PTC_CLI_OPT_END};
    int ret = ptc_cli_parse(argc, argv, 1, opts, ptc_cmd_synth_help, 0, NULL);
    if (ret != PTC_CLI_CONTINUE)
        return ret;
    if (!preset || !out || !have_seed)
        return ptc_cli_usage_error("synth needs --preset, --seed and --out");
    if (ids)
        dt = PTC_DTYPE_I32;
    struct model *m = calloc(1, sizeof *m);
    if (!m)
        return ptc_cli_error("out of memory");
    if (!strcmp(preset, "llama-tiny")) {
        build_llama(m, dt, layers > 0 ? layers : 3, hidden > 0 ? hidden : 64,
                    vocab > 0 ? vocab : 320, optim);
    } else if (!strcmp(preset, "gpt2-tiny")) {
        build_gpt2(m, dt, layers > 0 ? layers : 2, hidden > 0 ? hidden : 48,
                   vocab > 0 ? vocab : 320, optim);
    } else {
        free(m);
        return ptc_cli_usage_error("unknown preset '%s' (llama-tiny or gpt2-tiny)", preset);
    }
    qsort(m->t, m->n, sizeof m->t[0], cmp_tensor);
    ret = write_model(m, out, seed, ids);
    for (size_t i = 0; i < m->n; i++)
        free(m->names[i]);
    free(m);
    return ret;
}
