/* Placement rules: every line kind, glob semantics, first match, optimizer
 * suffixes, the presets on real checkpoint names, every error. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/fault_testing.h"
#include "ptc/rules.h"

static ptc_rules *parse_ok(const char *text)
{
    ptc_rules *r = NULL;
    int rc = ptc_rules_parse(&r, text, strlen(text), "t.rules");
    if (rc != PTC_OK)
        fail_msg("parse failed (%d): %s\n--\n%s", rc, ptc_last_error(), text);
    return r;
}

static void expect_parse_error(const char *text, const char *needle)
{
    ptc_rules *r = (ptc_rules *)1;
    int rc = ptc_rules_parse(&r, text, strlen(text), "t.rules");
    if (rc != PTC_E_RULE || !strstr(ptc_last_error(), needle))
        fail_msg("rules '%s': rc %d, message '%s' (wanted '%s')", text, rc, ptc_last_error(),
                 needle);
    assert_null(r);
}

/* Resolve @p name and compare its formatted placement with @p want. */
static void expect_place(const ptc_rules *r, const char *name, const char *want)
{
    ptc_placement p;
    char buf[256];
    int rc = ptc_rules_resolve(r, name, &p);
    if (rc != PTC_OK)
        fail_msg("resolve '%s' failed: %s", name, ptc_last_error());
    assert_int_equal(ptc_placement_format(&p, buf, sizeof buf), PTC_OK);
    if (strcmp(buf, want) != 0)
        fail_msg("'%s': got '%s', want '%s'", name, buf, want);
    /* the text parses back to the same placement */
    ptc_placement q;
    assert_int_equal(ptc_placement_parse(&q, buf), PTC_OK);
    assert_true(ptc_placement_equal(&p, &q));
}

static void expect_resolve_error(const ptc_rules *r, const char *name, const char *needle)
{
    ptc_placement p;
    int rc = ptc_rules_resolve(r, name, &p);
    if (rc != PTC_E_RULE || !strstr(ptc_last_error(), needle))
        fail_msg("resolve '%s': rc %d, message '%s' (wanted '%s')", name, rc, ptc_last_error(),
                 needle);
}

static void test_line_kinds(void **state)
{
    (void)state;
    ptc_rules *r = parse_ok("# a comment line\n"
                            "\n"
                            "   \t \n"
                            "layer  blocks.{L}.   # trailing comment\r\n"
                            "optim .m .v\n"
                            "optim .master\n"
                            "match\tblocks.*.w\ttp=split(1)\n"
                            "match head tp=split(0,blocks=3) pp=last\n"
                            "match emb tp=split(0,blocks=2:6) pp=first+last\n"
                            "match opt kind=optim pp=all\n"
                            "match * pp=first tp=replicate\n");
    expect_place(r, "blocks.3.w", "tp=split(1) pp=layer layer=3 kind=param");
    expect_place(r, "blocks.3.w.m", "tp=split(1) pp=layer layer=3 kind=optim");
    expect_place(r, "blocks.12.w.master", "tp=split(1) pp=layer layer=12 kind=optim");
    expect_place(r, "head", "tp=split(0,blocks=3) pp=last kind=param");
    expect_place(r, "emb", "tp=split(0,blocks=2:6) pp=first+last kind=param");
    expect_place(r, "opt", "tp=replicate pp=all kind=optim");
    expect_place(r, "anything", "tp=replicate pp=first kind=param");
    /* the catch-all says pp=first, which beats the layer default */
    expect_place(r, "blocks.0.other", "tp=replicate pp=first kind=param");
    assert_string_equal(ptc_rules_text(r),
                        "layer blocks.{L}.\n"
                        "optim .m .v .master\n"
                        "match blocks.*.w tp=split(1)\n"
                        "match head tp=split(0,blocks=3) pp=last\n"
                        "match emb tp=split(0,blocks=2:6) pp=first+last\n"
                        "match opt tp=replicate pp=all kind=optim\n"
                        "match * tp=replicate pp=first\n");
    ptc_rules_destroy(r);
    ptc_rules_destroy(NULL);
}

static void test_glob(void **state)
{
    (void)state;
    ptc_rules *r = parse_ok("match a*b tp=split(0) pp=first\n"
                            "match x?z tp=split(1) pp=first\n"
                            "match lit\\*eral tp=split(2) pp=first\n"
                            "match q\\?.\\\\ tp=split(3) pp=first\n"
                            "match **.end tp=split(4) pp=first\n"
                            "match ?? tp=split(5) pp=first\n"
                            "match * tp=replicate pp=last\n");
    const char *R = "tp=replicate pp=last kind=param";
    expect_place(r, "ab", "tp=split(0) pp=first kind=param");
    expect_place(r, "a.b.c.b", "tp=split(0) pp=first kind=param"); /* '*' crosses dots */
    expect_place(r, "a.b.c", R);                                    /* whole name */
    expect_place(r, "xab", R);
    expect_place(r, "x.z", "tp=split(1) pp=first kind=param");
    expect_place(r, "xz", "tp=split(5) pp=first kind=param");
    expect_place(r, "xyz1", R);
    expect_place(r, "xyyz", R);
    expect_place(r, "x\xc3\xa9z", "tp=split(1) pp=first kind=param"); /* one UTF-8 char */
    expect_place(r, "lit*eral", "tp=split(2) pp=first kind=param");
    expect_place(r, "litXeral", R);
    expect_place(r, "q?.\\", "tp=split(3) pp=first kind=param");
    expect_place(r, "qa.\\", R);
    expect_place(r, "a.end", "tp=split(4) pp=first kind=param"); /* before the catch-all */
    expect_place(r, ".end", "tp=split(4) pp=first kind=param");
    expect_place(r, "zz.end.end", "tp=split(4) pp=first kind=param");
    expect_place(r, "\xe2\x82\xac\xe2\x82\xac", "tp=split(5) pp=first kind=param");
    expect_place(r, "\xe2\x82\xac", R);
    expect_place(r, "", R);
    ptc_rules_destroy(r);
}

static void test_first_match_and_optim(void **state)
{
    (void)state;
    ptc_rules *r = parse_ok("layer layers.{L}.\n"
                            "optim .exp_avg .exp_avg_sq\n"
                            "match *.q.weight tp=split(0)\n"
                            "match *.weight tp=split(1)\n"
                            "match *.exp_avg tp=replicate pp=all\n"
                            "match * tp=replicate pp=first\n");
    expect_place(r, "layers.0.q.weight", "tp=split(0) pp=layer layer=0 kind=param");
    expect_place(r, "layers.0.k.weight", "tp=split(1) pp=layer layer=0 kind=param");
    /* the longest suffix wins: .exp_avg_sq, not .exp_avg */
    expect_place(r, "layers.7.q.weight.exp_avg_sq", "tp=split(0) pp=layer layer=7 kind=optim");
    /* suffixes are stripped before matching, so '*.exp_avg' never sees them */
    expect_place(r, "layers.7.k.weight.exp_avg", "tp=split(1) pp=layer layer=7 kind=optim");
    expect_place(r, "step", "tp=replicate pp=first kind=param");
    expect_place(r, "step.exp_avg", "tp=replicate pp=first kind=optim");
    /* a name that is only a suffix has no parameter: matched as it is */
    expect_place(r, ".exp_avg", "tp=replicate pp=all kind=param");
    /* the layer index comes from the parameter name, not the suffix */
    expect_place(r, "layers.3.x.exp_avg", "tp=replicate pp=first kind=optim");
    /* leftmost occurrence, maximal digit run, leading zeros allowed */
    expect_place(r, "a.layers.12.layers.5.q.weight", "tp=split(0) pp=layer layer=12 kind=param");
    expect_place(r, "layers.007.q.weight", "tp=split(0) pp=layer layer=7 kind=param");
    /* not a layer index: no digits, or digits not followed by '.' */
    expect_resolve_error(r, "layers..q.weight", "has no layer index");
    expect_resolve_error(r, "layers.3x.q.weight", "has no layer index");
    expect_resolve_error(r, "layers.99999999999.q.weight", "layer index too large");
    ptc_rules_destroy(r);
}

static void test_multiple_layer_patterns(void **state)
{
    (void)state;
    ptc_rules *r = parse_ok("layer enc.{L}.\nlayer dec{L}\nmatch * tp=replicate\n");
    expect_place(r, "enc.4.w", "tp=replicate pp=layer layer=4 kind=param");
    expect_place(r, "x.dec12", "tp=replicate pp=layer layer=12 kind=param");
    expect_place(r, "dec3.enc.5.w", "tp=replicate pp=layer layer=5 kind=param");
    ptc_rules_destroy(r);
    r = parse_ok("layer {L}\nmatch * tp=replicate\n");
    expect_place(r, "w42x", "tp=replicate pp=layer layer=42 kind=param");
    expect_resolve_error(r, "nodigits", "must give pp=");
    ptc_rules_destroy(r);
}

static void test_resolve_errors(void **state)
{
    (void)state;
    ptc_rules *r = parse_ok("layer model.layers.{L}.\n"
                            "optim .exp_avg\n"
                            "match model.layers.* tp=split(0)\n"
                            "match emb pp=layer\n"
                            "match noPP tp=replicate\n");
    expect_resolve_error(r, "lm_head.weight", "no placement rule matches tensor 'lm_head.weight'");
    expect_resolve_error(r, "lm_head.weight.exp_avg", "parameter 'lm_head.weight'");
    expect_resolve_error(r, "emb", "pp=layer (t.rules:4) but the name has no layer index");
    expect_resolve_error(r, "noPP", "tensor 'noPP' has no layer index, so its rule (t.rules:5)");
    /* a control character in a name is shown as '?' in the one-line message */
    expect_resolve_error(r, "bad\nname", "'bad?name'");
    ptc_rules_destroy(r);
}

static void test_parse_errors(void **state)
{
    (void)state;
    expect_parse_error("frob x\n", "t.rules:1: unknown directive 'frob'");
    expect_parse_error("match * tp=replicate pp=first\nlayer a\n", "t.rules:2: layer pattern 'a'");
    expect_parse_error("layer a{L}b{L}\nmatch * tp=replicate\n", "exactly once");
    expect_parse_error("layer\n", "exactly one pattern");
    expect_parse_error("layer a{L} b\n", "exactly one pattern");
    expect_parse_error("optim\n", "at least one suffix");
    expect_parse_error("optim .a .a\n", "given twice");
    expect_parse_error("match\n", "needs a glob");
    expect_parse_error("match * tp\n", "expected key=value");
    expect_parse_error("match * foo=1\n", "unknown key 'foo'");
    expect_parse_error("match * tp=replicate tp=replicate pp=first\n", "tp= given twice");
    expect_parse_error("match * pp=first pp=last\n", "pp= given twice");
    expect_parse_error("match * kind=optim kind=optim pp=all\n", "kind= given twice");
    expect_parse_error("match * kind=grad pp=all\n", "bad kind=");
    expect_parse_error("match * pp=middle\n", "bad pp=");
    expect_parse_error("match * pp=layer\n", "pp=layer needs a 'layer' pattern");
    expect_parse_error("match * tp=shard(0) pp=all\n", "bad tp=");
    expect_parse_error("match * tp=split() pp=all\n", "bad tp=");
    expect_parse_error("match * tp=split(x) pp=all\n", "split dimension");
    expect_parse_error("match * tp=split(8) pp=all\n", "split dimension");
    expect_parse_error("match * tp=split(-1) pp=all\n", "split dimension");
    expect_parse_error("match * tp=split(0 pp=all\n", "bad tp=");
    expect_parse_error("match * tp=split(0,block=2) pp=all\n", "expected blocks=");
    expect_parse_error("match * tp=split(0,blocks=0) pp=all\n", "N from 1 to 64");
    expect_parse_error("match * tp=split(0,blocks=65) pp=all\n", "N from 1 to 64");
    expect_parse_error("match * tp=split(0,blocks=) pp=all\n", "N from 1 to 64");
    expect_parse_error("match * tp=split(0,blocks=2:) pp=all\n", "block sizes");
    expect_parse_error("match * tp=split(0,blocks=:2) pp=all\n", "block sizes");
    expect_parse_error("match * tp=split(0,blocks=1:x) pp=all\n", "block sizes");
    expect_parse_error("match * tp=split(0,blocks=1:99999999999999999999) pp=all\n",
                       "block sizes");
    expect_parse_error("match ab\\ pp=all\n", "lone backslash");
    expect_parse_error("# nothing\n", "no 'match' rules");
    expect_parse_error("", "no 'match' rules");
    char many[400] = "match * tp=split(0,blocks=1";
    for (int i = 0; i < 64; i++)
        strcat(many, ":1");
    strcat(many, ") pp=all\n");
    expect_parse_error(many, "more than 64 blocks");
    char toks[400] = "optim";
    for (int i = 0; i < 70; i++)
        strcat(toks, " .x");
    expect_parse_error(toks, "too many items");
    /* a NUL byte inside the text */
    ptc_rules *r = NULL;
    assert_int_equal(ptc_rules_parse(&r, "match *\0 pp=all", 15, "t.rules"), PTC_E_RULE);
    assert_non_null(strstr(ptc_last_error(), "NUL"));
    /* origin defaults to "rules" */
    assert_int_equal(ptc_rules_parse(&r, "bogus", 5, NULL), PTC_E_RULE);
    assert_non_null(strstr(ptc_last_error(), "rules:1:"));
}

static void test_placement_text(void **state)
{
    (void)state;
    ptc_placement p;
    char buf[64];
    assert_int_equal(ptc_placement_parse(&p, "tp=split(1,blocks=3) pp=layer layer=4 kind=optim"),
                     PTC_OK);
    assert_true(p.tp == PTC_TP_SPLIT && p.dim == 1 && p.nblocks == 3 && p.blocks_equal);
    assert_true(p.pp == PTC_PP_LAYER && p.layer == 4 && p.kind == PTC_KIND_OPTIM);
    assert_int_equal(ptc_placement_format(&p, buf, sizeof buf), PTC_OK);
    assert_string_equal(buf, "tp=split(1,blocks=3) pp=layer layer=4 kind=optim");
    assert_int_equal(ptc_placement_format(&p, buf, 49), PTC_OK);
    assert_int_equal(ptc_placement_format(&p, buf, 48), PTC_E_RANGE);
    assert_int_equal(ptc_placement_parse(&p, "tp=split(0,blocks=4:8:8) pp=all kind=param"),
                     PTC_OK);
    assert_true(p.nblocks == 3 && !p.blocks_equal && p.blocks[0] == 4 && p.blocks[2] == 8);
    const char *bad[] = {"tp=replicate pp=first",          /* no kind */
                         "tp=replicate pp=layer kind=param", /* no layer */
                         "tp=replicate pp=first layer=1 kind=param",
                         "tp=replicate pp=first kind=param kind=param",
                         "tp=replicate  pp=first kind=param",
                         "tp=replicate pp=first kind=param ",
                         "tp=replicate pp=first kind=param x=1",
                         "tp=replicate pp=first kind",
                         "tp=split(9) pp=first kind=param",
                         "tp=replicate pp=layer layer=-1 kind=param",
                         ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (ptc_placement_parse(&p, bad[i]) != PTC_E_INVAL)
            fail_msg("placement '%s' was accepted", bad[i]);
    ptc_placement a, b;
    assert_int_equal(ptc_placement_parse(&a, "tp=split(0) pp=layer layer=1 kind=param"), PTC_OK);
    assert_int_equal(ptc_placement_parse(&b, "tp=split(0) pp=layer layer=2 kind=param"), PTC_OK);
    assert_false(ptc_placement_equal(&a, &b));
    assert_int_equal(ptc_placement_parse(&b, "tp=split(1) pp=layer layer=1 kind=param"), PTC_OK);
    assert_false(ptc_placement_equal(&a, &b));
    assert_int_equal(ptc_placement_parse(&b, "tp=split(0) pp=layer layer=1 kind=optim"), PTC_OK);
    assert_false(ptc_placement_equal(&a, &b));
}

static void test_canonical_round_trip(void **state)
{
    (void)state;
    for (const char *const *n = ptc_rules_preset_names(); *n; n++) {
        ptc_rules *a = NULL, *b = NULL;
        assert_int_equal(ptc_rules_load(&a, *n), PTC_OK);
        const char *text = ptc_rules_text(a);
        assert_null(strchr(text, '#')); /* comments dropped */
        assert_int_equal(ptc_rules_parse(&b, text, strlen(text), "canonical"), PTC_OK);
        assert_string_equal(ptc_rules_text(b), text);
        ptc_rules_destroy(a);
        ptc_rules_destroy(b);
    }
    const char *t;
    assert_int_equal(ptc_rules_preset_text("none", &t), PTC_OK);
    assert_non_null(strstr(t, "match * tp=replicate pp=first"));
    assert_int_equal(ptc_rules_preset_text("gpt3", &t), PTC_E_NOTFOUND);
    assert_null(t);
}

static void test_load_file(void **state)
{
    (void)state;
    char path[] = "/tmp/ptc_rules_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "layer l.{L}.\nmatch * tp=split(0)\nbogus\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    ptc_rules *r = NULL;
    assert_int_equal(ptc_rules_load(&r, path), PTC_E_RULE);
    char want[64];
    snprintf(want, sizeof want, "%s:3: unknown directive", path);
    assert_non_null(strstr(ptc_last_error(), want));
    assert_null(r);
    assert_int_equal(truncate(path, (off_t)strlen("layer l.{L}.\nmatch * tp=split(0)\n")), 0);
    assert_int_equal(ptc_rules_load(&r, path), PTC_OK);
    expect_place(r, "l.5.x", "tp=split(0) pp=layer layer=5 kind=param");
    ptc_rules_destroy(r);
    unlink(path);
    assert_int_equal(ptc_rules_load(&r, path), PTC_E_IO);
    assert_non_null(strstr(ptc_last_error(), "no preset"));
    assert_int_equal(ptc_rules_load(&r, "/tmp"), PTC_E_IO);
}

static void test_preset_llama(void **state)
{
    (void)state;
    ptc_rules *r = NULL;
    assert_int_equal(ptc_rules_load(&r, "llama"), PTC_OK);
    expect_place(r, "model.embed_tokens.weight", "tp=split(0) pp=first kind=param");
    expect_place(r, "lm_head.weight", "tp=split(0) pp=last kind=param");
    expect_place(r, "model.norm.weight", "tp=replicate pp=last kind=param");
    for (int L = 0; L < 2; L++) {
        char n[128], w[128];
        static const char *const rows[][2] = {
            {"input_layernorm.weight", "tp=replicate"},
            {"self_attn.q_proj.weight", "tp=split(0)"},
            {"self_attn.k_proj.weight", "tp=split(0)"},
            {"self_attn.v_proj.weight", "tp=split(0)"},
            {"self_attn.q_proj.bias", "tp=split(0)"},
            {"self_attn.o_proj.weight", "tp=split(1)"},
            {"self_attn.rotary_emb.inv_freq", "tp=replicate"},
            {"post_attention_layernorm.weight", "tp=replicate"},
            {"mlp.gate_proj.weight", "tp=split(0)"},
            {"mlp.up_proj.weight", "tp=split(0)"},
            {"mlp.down_proj.weight", "tp=split(1)"},
        };
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
            snprintf(n, sizeof n, "model.layers.%d.%s", L, rows[i][0]);
            snprintf(w, sizeof w, "%s pp=layer layer=%d kind=param", rows[i][1], L);
            expect_place(r, n, w);
            snprintf(n, sizeof n, "model.layers.%d.%s.exp_avg_sq", L, rows[i][0]);
            snprintf(w, sizeof w, "%s pp=layer layer=%d kind=optim", rows[i][1], L);
            expect_place(r, n, w);
        }
    }
    expect_place(r, "model.embed_tokens.weight.master", "tp=split(0) pp=first kind=optim");
    expect_resolve_error(r, "model.layers.0.mlp.fc1.weight", "no placement rule");
    ptc_rules_destroy(r);
}

static void test_preset_gpt2(void **state)
{
    (void)state;
    ptc_rules *r = NULL;
    assert_int_equal(ptc_rules_load(&r, "gpt2"), PTC_OK);
    const char *prefixes[] = {"transformer.", ""};
    for (int k = 0; k < 2; k++) {
        const char *p = prefixes[k];
        char n[128], w[128];
#define NAME(s) (snprintf(n, sizeof n, "%s%s", p, s), n)
        expect_place(r, NAME("wte.weight"), "tp=split(0) pp=first+last kind=param");
        expect_place(r, NAME("wpe.weight"), "tp=replicate pp=first kind=param");
        expect_place(r, NAME("ln_f.weight"), "tp=replicate pp=last kind=param");
        expect_place(r, NAME("ln_f.bias"), "tp=replicate pp=last kind=param");
        static const char *const rows[][2] = {
            {"ln_1.weight", "tp=replicate"},
            {"ln_1.bias", "tp=replicate"},
            {"attn.c_attn.weight", "tp=split(1,blocks=3)"},
            {"attn.c_attn.bias", "tp=split(0,blocks=3)"},
            {"attn.c_proj.weight", "tp=split(0)"},
            {"attn.c_proj.bias", "tp=replicate"},
            {"attn.bias", "tp=replicate"},
            {"attn.masked_bias", "tp=replicate"},
            {"ln_2.weight", "tp=replicate"},
            {"mlp.c_fc.weight", "tp=split(1)"},
            {"mlp.c_fc.bias", "tp=split(0)"},
            {"mlp.c_proj.weight", "tp=split(0)"},
            {"mlp.c_proj.bias", "tp=replicate"},
        };
        for (int L = 0; L < 2; L++)
            for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
                snprintf(n, sizeof n, "%sh.%d.%s", p, L, rows[i][0]);
                snprintf(w, sizeof w, "%s pp=layer layer=%d kind=param", rows[i][1], L);
                expect_place(r, n, w);
            }
#undef NAME
    }
    expect_place(r, "lm_head.weight", "tp=split(0) pp=last kind=param");
    expect_place(r, "transformer.h.1.attn.c_attn.weight.exp_avg",
                 "tp=split(1,blocks=3) pp=layer layer=1 kind=optim");
    ptc_rules_destroy(r);
}

static void test_preset_megatron(void **state)
{
    (void)state;
    ptc_rules *r = NULL;
    assert_int_equal(ptc_rules_load(&r, "megatron-gpt"), PTC_OK);
    expect_place(r, "language_model.embedding.word_embeddings.weight",
                 "tp=split(0) pp=first+last kind=param");
    expect_place(r, "language_model.embedding.position_embeddings.weight",
                 "tp=replicate pp=first kind=param");
    expect_place(r, "language_model.encoder.final_layernorm.weight",
                 "tp=replicate pp=last kind=param");
    expect_place(r, "language_model.encoder.final_layernorm.bias",
                 "tp=replicate pp=last kind=param");
    expect_place(r, "language_model.output_layer.weight", "tp=split(0) pp=last kind=param");
    static const char *const rows[][2] = {
        {"input_layernorm.weight", "tp=replicate"},
        {"input_layernorm.bias", "tp=replicate"},
        {"self_attention.query_key_value.weight", "tp=split(0)"},
        {"self_attention.query_key_value.bias", "tp=split(0)"},
        {"self_attention.dense.weight", "tp=split(1)"},
        {"self_attention.dense.bias", "tp=replicate"},
        {"post_attention_layernorm.weight", "tp=replicate"},
        {"mlp.dense_h_to_4h.weight", "tp=split(0)"},
        {"mlp.dense_h_to_4h.bias", "tp=split(0)"},
        {"mlp.dense_4h_to_h.weight", "tp=split(1)"},
        {"mlp.dense_4h_to_h.bias", "tp=replicate"},
    };
    for (int L = 0; L < 2; L++)
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
            char n[160], w[128];
            snprintf(n, sizeof n, "language_model.encoder.layers.%d.%s", L, rows[i][0]);
            snprintf(w, sizeof w, "%s pp=layer layer=%d kind=param", rows[i][1], L);
            expect_place(r, n, w);
        }
    ptc_rules_destroy(r);
}

static void test_preset_none(void **state)
{
    (void)state;
    ptc_rules *r = NULL;
    assert_int_equal(ptc_rules_load(&r, "none"), PTC_OK);
    expect_place(r, "model.layers.3.mlp.up_proj.weight", "tp=replicate pp=first kind=param");
    expect_place(r, "x.exp_avg", "tp=replicate pp=first kind=param");
    expect_place(r, "", "tp=replicate pp=first kind=param");
    assert_string_equal(ptc_rules_text(r), "match * tp=replicate pp=first\n");
    ptc_rules_destroy(r);
}

static void test_alloc_failures(void **state)
{
    (void)state;
    const char *text = "layer a.{L}.\noptim .x .y\nmatch a.* tp=split(0,blocks=1:2)\n"
                       "match * tp=replicate pp=all\n";
    ptc_fault_alloc_at(0);
    ptc_rules *r = NULL;
    assert_int_equal(ptc_rules_parse(&r, text, strlen(text), "f"), PTC_OK);
    ptc_rules_destroy(r);
    ptc_fault_alloc_at(0);
    /* count allocations of one parse, then fail each in turn */
    ptc_fault_alloc_at(1000000);
    assert_int_equal(ptc_rules_parse(&r, text, strlen(text), "f"), PTC_OK);
    long total = ptc_fault_alloc_count();
    ptc_rules_destroy(r);
    ptc_fault_alloc_at(0);
    assert_true(total > 5);
    for (long i = 1; i <= total; i++) {
        ptc_fault_alloc_at(i);
        r = (ptc_rules *)1;
        int rc = ptc_rules_parse(&r, text, strlen(text), "f");
        ptc_fault_alloc_at(0);
        assert_int_equal(rc, PTC_E_NOMEM);
        assert_null(r);
    }
}


static void test_heads_params_include(void **state)
{
    (void)state;
    /* head-aware splits: canonical item order, placement text round trip */
    ptc_rules *r = parse_ok("param H 8\nparam KV 2\n"
                            "match q tp=split(0,head_dim=4,heads=$H) pp=all\n"
                            "match k tp=split(0,kv_heads=$KV) pp=all\n"
                            "match qkv tp=split(0,heads=$H,kv_heads=$KV:$KV,cut) pp=all\n"
                            "match c tp=split(1,blocks=3,heads=$H) pp=all\n");
    expect_place(r, "q", "tp=split(0,heads=8,head_dim=4) pp=all kind=param");
    expect_place(r, "k", "tp=split(0,kv_heads=2) pp=all kind=param");
    expect_place(r, "qkv", "tp=split(0,heads=8,kv_heads=2:2,cut) pp=all kind=param");
    expect_place(r, "c", "tp=split(1,blocks=3,heads=8) pp=all kind=param");
    assert_string_equal(ptc_rules_text(r),
                        "match q tp=split(0,heads=8,head_dim=4) pp=all\n"
                        "match k tp=split(0,kv_heads=2) pp=all\n"
                        "match qkv tp=split(0,heads=8,kv_heads=2:2,cut) pp=all\n"
                        "match c tp=split(1,blocks=3,heads=8) pp=all\n");
    ptc_rules_destroy(r);

    /* caller parameters; a param line of the text overrides them */
    const char *txt = "param KV 4\nmatch k tp=split(0,kv_heads=$KV,head_dim=$D) pp=all\n"
                      "match e tp=split(0) pp=first+last if=$tied\nmatch e tp=split(0) pp=first\n";
    const ptc_rules_param pv[] = {{"KV", 1}, {"D", 16}, {"tied", 1}};
    assert_int_equal(ptc_rules_parse_params(&r, txt, strlen(txt), "p", pv, 3), PTC_OK);
    expect_place(r, "k", "tp=split(0,kv_heads=4,head_dim=16) pp=all kind=param");
    expect_place(r, "e", "tp=split(0) pp=first+last kind=param");
    assert_string_equal(ptc_rules_missing_params(r), "");
    ptc_rules_destroy(r);
    /* unset: the heads go (a plain row split), the if= line is left out */
    assert_int_equal(ptc_rules_parse_params(&r, txt + 11, strlen(txt + 11), "p", NULL, 0), PTC_OK);
    expect_place(r, "k", "tp=split(0) pp=all kind=param");
    expect_place(r, "e", "tp=split(0) pp=first kind=param");
    assert_string_equal(ptc_rules_missing_params(r), "KV");
    ptc_rules_destroy(r);
    /* blocks that need an unset parameter: an error when a tensor resolves */
    r = parse_ok("match f tp=split(0,blocks=$N) pp=all\nmatch g pp=all\n");
    expect_resolve_error(r, "f", "needs the parameter 'N'");
    expect_place(r, "g", "tp=replicate pp=all kind=param");
    ptc_rules_destroy(r);

    /* include: the preset's lines at that place; lines above override */
    r = parse_ok("match model.norm.weight tp=replicate pp=all\ninclude llama\n");
    expect_place(r, "model.norm.weight", "tp=replicate pp=all kind=param");
    expect_place(r, "model.layers.3.mlp.down_proj.weight",
                 "tp=split(1) pp=layer layer=3 kind=param");
    expect_place(r, "lm_head.weight", "tp=split(0) pp=last kind=param");
    ptc_rules_destroy(r);

    /* unless=: kept in the canonical text; left out by name-only resolution */
    r = parse_ok("match e tp=split(0) pp=first+last unless=head\nmatch e tp=split(0) pp=first\n");
    assert_string_equal(ptc_rules_text(r), "match e tp=split(0) pp=first+last unless=head\n"
                                           "match e tp=split(0) pp=first\n");
    expect_place(r, "e", "tp=split(0) pp=first kind=param");
    ptc_rules_destroy(r);

    expect_parse_error("match q tp=split(0,heads=0)\n", "at least 1");
    expect_parse_error("match q tp=split(0,heads=2,heads=2)\n", "heads= given twice");
    expect_parse_error("match q tp=split(0,cut)\n", "go with heads=");
    expect_parse_error("match q tp=split(0,blocks=3,heads=1:2)\n", "one per block");
    expect_parse_error("match q tp=split(0,sideways)\n", "expected blocks=");
    expect_parse_error("param 9x 3\nmatch q\n", "bad parameter name");
    expect_parse_error("param a 1\nparam a 2\nmatch q\n", "given twice");
    expect_parse_error("include llamas\n", "no rules preset 'llamas'");
    expect_parse_error("match q unless=\n", "needs a tensor name");
    expect_parse_error("match q if=yes\n", "bad if=");
}


static int64_t param_of(const ptc_rules_param *p, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(p[i].name, name) == 0)
            return p[i].value;
    return -1;
}

static void test_params_from_config_json(void **state)
{
    (void)state;
    char path[] = "/tmp/ptc_rules_cfg_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *js = "{\"num_attention_heads\": 4, \"hidden_size\": 32, \"tie_word_embeddings\": "
                     "true, \"rope_theta\": 10000.0, \"model_type\": \"llama\", \"bad\": -3, "
                     "\"head-dim\": 7, \"rope_scaling\": {\"factor\": 2}}";
    assert_int_equal(write(fd, js, strlen(js)), (ssize_t)strlen(js));
    close(fd);
    ptc_rules_param *p = NULL;
    size_t n = 0;
    assert_int_equal(ptc_rules_params_read(path, &p, &n), PTC_OK);
    assert_int_equal(param_of(p, n, "num_attention_heads"), 4);
    assert_int_equal(param_of(p, n, "num_key_value_heads"), 4); /* derived: = heads */
    assert_int_equal(param_of(p, n, "head_dim"), 8);            /* derived: 32 / 4 */
    assert_int_equal(param_of(p, n, "tie_word_embeddings"), 1);
    assert_int_equal(param_of(p, n, "rope_theta"), -1);  /* not an integer */
    assert_int_equal(param_of(p, n, "bad"), -1);         /* negative */
    assert_int_equal(param_of(p, n, "head-dim"), -1);    /* not a parameter name */
    assert_int_equal(n, 5);
    /* the values feed the llama preset */
    ptc_rules *r = NULL;
    assert_int_equal(ptc_rules_load_params(&r, "llama", p, n), PTC_OK);
    expect_place(r, "model.layers.0.self_attn.v_proj.weight",
                 "tp=split(0,kv_heads=4,head_dim=8) pp=layer layer=0 kind=param");
    ptc_rules_destroy(r);
    ptc_rules_params_free(p, n);
    ptc_rules_params_free(NULL, 0);
    /* not JSON, not an object, missing */
    fd = open(path, O_WRONLY | O_TRUNC);
    assert_int_equal(write(fd, "[1]", 3), 3);
    close(fd);
    assert_int_equal(ptc_rules_params_read(path, &p, &n), PTC_E_FORMAT);
    assert_null(p);
    fd = open(path, O_WRONLY | O_TRUNC);
    assert_int_equal(write(fd, "{oops", 5), 5);
    close(fd);
    assert_int_equal(ptc_rules_params_read(path, &p, &n), PTC_E_FORMAT);
    unlink(path);
    assert_int_equal(ptc_rules_params_read(path, &p, &n), PTC_E_IO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_line_kinds),
        cmocka_unit_test(test_glob),
        cmocka_unit_test(test_first_match_and_optim),
        cmocka_unit_test(test_multiple_layer_patterns),
        cmocka_unit_test(test_resolve_errors),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_placement_text),
        cmocka_unit_test(test_canonical_round_trip),
        cmocka_unit_test(test_load_file),
        cmocka_unit_test(test_preset_llama),
        cmocka_unit_test(test_preset_gpt2),
        cmocka_unit_test(test_preset_megatron),
        cmocka_unit_test(test_preset_none),
        cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_heads_params_include),
        cmocka_unit_test(test_params_from_config_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
