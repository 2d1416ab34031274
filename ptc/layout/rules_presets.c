/* The built-in placement-rule presets, by name; their text is parsed like
 * any rules file (rules.c). Each line is documented in docs/rules.md; the
 * comments here say why. The $parameters are Hugging Face config.json keys
 * (ptc import reads them). */
#include <string.h>

#include "ptc/layout/rules_internal.h"

static const char preset_llama[] =
    "# HF Llama / Mistral / Qwen2 / Qwen3 / Gemma naming, Megatron-LM tensor\n"
    "# parallelism. Parameters (config.json): num_attention_heads,\n"
    "# num_key_value_heads, head_dim.\n"
    "layer model.layers.{L}.\n"
    "# Adam moments, fp32 master weights and Adam's step follow their parameter.\n"
    "optim .exp_avg .exp_avg_sq .master .step\n"
    "# VocabParallelEmbedding: vocabulary rows split over tp. Tied embeddings\n"
    "# (no lm_head.weight in the collection: Qwen2, Gemma, small Llamas): the\n"
    "# last stage uses the embedding as its output layer, so it holds a replica.\n"
    "match model.embed_tokens.weight tp=split(0) pp=first+last unless=lm_head.weight\n"
    "match model.embed_tokens.weight tp=split(0) pp=first\n"
    "# Output layer: ColumnParallelLinear over the vocabulary.\n"
    "match lm_head.weight tp=split(0) pp=last\n"
    "match model.norm.weight tp=replicate pp=last\n"
    "# q: column parallel by whole query heads (nn.Linear is [out,in]).\n"
    "match *.self_attn.q_proj.weight tp=split(0,heads=$num_attention_heads,head_dim=$head_dim)\n"
    "# k/v: by whole key/value heads; with more tp ranks than kv heads every\n"
    "# head is replicated on the ranks that share it (vLLM QKVParallelLinear).\n"
    "match *.self_attn.k_proj.weight tp=split(0,kv_heads=$num_key_value_heads,head_dim=$head_dim)\n"
    "match *.self_attn.v_proj.weight tp=split(0,kv_heads=$num_key_value_heads,head_dim=$head_dim)\n"
    "# Qwen2 carries q/k/v biases: split with their rows.\n"
    "match *.self_attn.q_proj.bias tp=split(0,heads=$num_attention_heads,head_dim=$head_dim)\n"
    "match *.self_attn.k_proj.bias tp=split(0,kv_heads=$num_key_value_heads,head_dim=$head_dim)\n"
    "match *.self_attn.v_proj.bias tp=split(0,kv_heads=$num_key_value_heads,head_dim=$head_dim)\n"
    "# o_proj: row parallel (input features = the query heads); a bias is\n"
    "# added after the all-reduce, so it is replicated.\n"
    "match *.self_attn.o_proj.weight tp=split(1,heads=$num_attention_heads,head_dim=$head_dim)\n"
    "match *.self_attn.o_proj.bias tp=replicate\n"
    "# Qwen3 / Gemma3 per-head q/k norms act on head_dim: replicated.\n"
    "match *.self_attn.q_norm.weight tp=replicate\n"
    "match *.self_attn.k_norm.weight tp=replicate\n"
    "# Old checkpoints store the rotary buffer.\n"
    "match *.self_attn.rotary_emb.inv_freq tp=replicate\n"
    "# SwiGLU MLP: gate/up column parallel, down row parallel.\n"
    "match *.mlp.gate_proj.weight tp=split(0)\n"
    "match *.mlp.up_proj.weight tp=split(0)\n"
    "match *.mlp.down_proj.weight tp=split(1)\n"
    "match *.input_layernorm.weight tp=replicate\n"
    "match *.post_attention_layernorm.weight tp=replicate\n"
    "# Gemma2/3 sandwich norms.\n"
    "match *.pre_feedforward_layernorm.weight tp=replicate\n"
    "match *.post_feedforward_layernorm.weight tp=replicate\n";

static const char preset_gpt2[] =
    "# HF GPT-2 naming, with or without the 'transformer.' prefix.\n"
    "# Conv1D weights are [in,out]: column parallel splits dim 1.\n"
    "# Parameter (config.json): n_head.\n"
    "layer transformer.h.{L}.\n"
    "layer h.{L}.\n"
    "optim .exp_avg .exp_avg_sq .master .step\n"
    "# Tied input/output embedding: a replica on the first and last stage.\n"
    "match transformer.wte.weight tp=split(0) pp=first+last\n"
    "match wte.weight tp=split(0) pp=first+last\n"
    "match transformer.wpe.weight tp=replicate pp=first\n"
    "match wpe.weight tp=replicate pp=first\n"
    "match transformer.ln_f.* tp=replicate pp=last\n"
    "match ln_f.* tp=replicate pp=last\n"
    "# Untied copy of the output embedding, if a checkpoint has one.\n"
    "match lm_head.weight tp=split(0) pp=last\n"
    "# Fused [q;k;v] columns: each of the three blocks split by whole heads.\n"
    "match *.attn.c_attn.weight tp=split(1,blocks=3,heads=$n_head)\n"
    "match *.attn.c_attn.bias tp=split(0,blocks=3,heads=$n_head)\n"
    "# Row parallel projections: input rows split, bias replicated.\n"
    "match *.attn.c_proj.weight tp=split(0,heads=$n_head)\n"
    "match *.attn.c_proj.bias tp=replicate\n"
    "match *.mlp.c_fc.weight tp=split(1)\n"
    "match *.mlp.c_fc.bias tp=split(0)\n"
    "match *.mlp.c_proj.weight tp=split(0)\n"
    "match *.mlp.c_proj.bias tp=replicate\n"
    "match *.ln_1.* tp=replicate\n"
    "match *.ln_2.* tp=replicate\n"
    "# Causal-mask buffers of older checkpoints.\n"
    "match *.attn.bias tp=replicate\n"
    "match *.attn.masked_bias tp=replicate\n";

static const char preset_megatron_gpt[] =
    "# Megatron-LM legacy GPT naming (language_model.*), GELU MLP.\n"
    "layer language_model.encoder.layers.{L}.\n"
    "optim .exp_avg .exp_avg_sq .master .step\n"
    "# Embeddings are tied by default: the last stage holds a replica.\n"
    "match language_model.embedding.word_embeddings.weight tp=split(0) pp=first+last\n"
    "match language_model.embedding.position_embeddings.weight tp=replicate pp=first\n"
    "match word_embeddings_for_head.weight tp=split(0) pp=last\n"
    "match language_model.output_layer.weight tp=split(0) pp=last\n"
    "match language_model.encoder.final_layernorm.* tp=replicate pp=last\n"
    "# query_key_value rows are interleaved per head group\n"
    "# ([groups, q heads + k + v, head_dim]), so a plain row split keeps\n"
    "# each rank's q, k and v together.\n"
    "match *.self_attention.query_key_value.weight tp=split(0)\n"
    "match *.self_attention.query_key_value.bias tp=split(0)\n"
    "match *.self_attention.dense.weight tp=split(1)\n"
    "match *.self_attention.dense.bias tp=replicate\n"
    "match *.mlp.dense_h_to_4h.weight tp=split(0)\n"
    "match *.mlp.dense_h_to_4h.bias tp=split(0)\n"
    "match *.mlp.dense_4h_to_h.weight tp=split(1)\n"
    "match *.mlp.dense_4h_to_h.bias tp=replicate\n"
    "match *.input_layernorm.* tp=replicate\n"
    "match *.post_attention_layernorm.* tp=replicate\n";

static const char preset_bert[] =
    "# HF BERT naming (BertModel, BertForMaskedLM, BertForPreTraining, with or\n"
    "# without the 'bert.' prefix; sentence-transformers checkpoints too).\n"
    "# Parameters (config.json): num_attention_heads, tie_word_embeddings.\n"
    "layer encoder.layer.{L}.\n"
    "optim .exp_avg .exp_avg_sq .master .step\n"
    "# VocabParallelEmbedding; the MLM decoder is tied to it, so a tied model\n"
    "# keeps a replica on the last stage.\n"
    "match *embeddings.word_embeddings.weight tp=split(0) pp=first+last if=$tie_word_embeddings\n"
    "match *embeddings.word_embeddings.weight tp=split(0) pp=first\n"
    "match *embeddings.position_embeddings.weight tp=replicate pp=first\n"
    "match *embeddings.token_type_embeddings.weight tp=replicate pp=first\n"
    "match *embeddings.LayerNorm.* tp=replicate pp=first\n"
    "match *embeddings.position_ids tp=replicate pp=first\n"
    "match *embeddings.token_type_ids tp=replicate pp=first\n"
    "# Self-attention: q/k/v column parallel by whole heads, output row parallel.\n"
    "match *.attention.self.query.weight tp=split(0,heads=$num_attention_heads)\n"
    "match *.attention.self.query.bias tp=split(0,heads=$num_attention_heads)\n"
    "match *.attention.self.key.weight tp=split(0,heads=$num_attention_heads)\n"
    "match *.attention.self.key.bias tp=split(0,heads=$num_attention_heads)\n"
    "match *.attention.self.value.weight tp=split(0,heads=$num_attention_heads)\n"
    "match *.attention.self.value.bias tp=split(0,heads=$num_attention_heads)\n"
    "match *.attention.output.dense.weight tp=split(1,heads=$num_attention_heads)\n"
    "match *.attention.output.dense.bias tp=replicate\n"
    "match *.attention.output.LayerNorm.* tp=replicate\n"
    "# GELU MLP: intermediate column parallel, output row parallel.\n"
    "match *.intermediate.dense.weight tp=split(0)\n"
    "match *.intermediate.dense.bias tp=split(0)\n"
    "match *.output.dense.weight tp=split(1)\n"
    "match *.output.dense.bias tp=replicate\n"
    "match *.output.LayerNorm.* tp=replicate\n"
    "# Heads on the last stage: the pooler and NSP head replicated, the MLM\n"
    "# decoder split over the vocabulary like the embedding.\n"
    "match *pooler.dense.* tp=replicate pp=last\n"
    "match cls.predictions.bias tp=split(0) pp=last\n"
    "match cls.predictions.decoder.weight tp=split(0) pp=last\n"
    "match cls.predictions.decoder.bias tp=split(0) pp=last\n"
    "match cls.predictions.transform.* tp=replicate pp=last\n"
    "match cls.seq_relationship.* tp=replicate pp=last\n";

static const char preset_phi3[] =
    "# HF Phi-3 naming: Llama's, with fused qkv_proj ([q; k; v] rows: the\n"
    "# query heads, then the key heads, then the value heads) and gate_up_proj\n"
    "# ([gate; up] rows). Parameters: those of llama.\n"
    "match *.self_attn.qkv_proj.weight tp=split(0,heads=$num_attention_heads,kv_heads=$num_key_value_heads:$num_key_value_heads,head_dim=$head_dim)\n"
    "match *.self_attn.qkv_proj.bias tp=split(0,heads=$num_attention_heads,kv_heads=$num_key_value_heads:$num_key_value_heads,head_dim=$head_dim)\n"
    "match *.mlp.gate_up_proj.weight tp=split(0,blocks=2)\n"
    "include llama\n";

static const char preset_none[] =
    "# Everything replicated, every tensor on stage 0.\n"
    "match * tp=replicate pp=first\n";

/* The demo model of `ptc train` (exec/model/): exactly the placement it
 * runs with, so a running job's shards are the stored shards. No catch-all:
 * every tensor, biases included, has its rule. */
static const char preset_ptc_mlp[] =
    "# The demo model of ptc train: Megatron-style MLP blocks.\n"
    "layer model.layers.{L}.\n"
    "optim .exp_avg .exp_avg_sq\n"
    "# Embedding and head replicated over tp (every shard computes them).\n"
    "match model.embed_tokens.weight tp=replicate pp=first\n"
    "match lm_head.weight tp=replicate pp=last\n"
    "match model.norm.weight tp=replicate pp=last\n"
    "match model.norm.bias tp=replicate pp=last\n"
    "match *.input_layernorm.weight tp=replicate\n"
    "match *.input_layernorm.bias tp=replicate\n"
    "# up_proj column parallel (rows = the 4H outputs), down_proj row parallel\n"
    "# (columns = the 4H inputs); down_proj's bias is added after the all-reduce.\n"
    "match *.mlp.up_proj.weight tp=split(0)\n"
    "match *.mlp.up_proj.bias tp=split(0)\n"
    "match *.mlp.down_proj.weight tp=split(1)\n"
    "match *.mlp.down_proj.bias tp=replicate\n";

static const char *const preset_names[] = {"llama", "gpt2", "megatron-gpt", "ptc-mlp", "bert",
                                           "phi3", "none", NULL};
static const char *const preset_texts[] = {preset_llama,   preset_gpt2, preset_megatron_gpt,
                                           preset_ptc_mlp, preset_bert, preset_phi3,
                                           preset_none};

const char *const *ptc_rules_preset_names(void)
{
    return preset_names;
}

const char *ptc_rules_preset_find(const char *name, size_t n)
{
    for (size_t i = 0; preset_names[i]; i++)
        if (strlen(preset_names[i]) == n && memcmp(name, preset_names[i], n) == 0)
            return preset_texts[i];
    return NULL;
}

int ptc_rules_preset_text(const char *name, const char **text)
{
    *text = ptc_rules_preset_find(name, strlen(name));
    if (*text)
        return PTC_OK;
    return ptc_error_set(PTC_E_NOTFOUND,
                         "no rules preset '%.64s' (presets: llama, gpt2, megatron-gpt, ptc-mlp, "
                         "bert, phi3, none)", name);
}
