"""Real transformers models built from small configs: save_pretrained with
several shard files and an index -> Store.import_safetensors -> reshard
through a chain of configurations -> export -> from_pretrained gives
identical logits."""

import json
import os
import shutil

import pytest
import torch

import ptc

transformers = pytest.importorskip("transformers")

# (model, preset, chain of configurations after the import's)
CHAINS = {
    "llama": ("tp=2", ["dp=2,tp=4,pp=3", "tp=3,pp=2,zero=1", "dp=3,tp=1,pp=1"]),
    "gpt2": ("tp=2,pp=2", ["tp=3", "dp=2,tp=4,pp=3", "tp=1"]),
}


def build(kind):
    torch.manual_seed(0)
    if kind == "llama":
        cfg = transformers.LlamaConfig(
            vocab_size=131, hidden_size=64, intermediate_size=88, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
            tie_word_embeddings=False)
        model = transformers.LlamaForCausalLM(cfg)
    else:
        cfg = transformers.GPT2Config(vocab_size=131, n_positions=64, n_embd=48, n_layer=3,
                                      n_head=4)
        model = transformers.GPT2LMHeadModel(cfg)
    # random weights everywhere (norms and biases too), so every tensor matters
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.05)
    return model.eval()


@pytest.mark.parametrize("kind", sorted(CHAINS))
def test_pretrained_through_a_reshard_chain(tmp_path, kind):
    model = build(kind)
    src = tmp_path / "src"
    model.save_pretrained(src, max_shard_size="40KB", safe_serialization=True)
    index = src / "model.safetensors.index.json"
    assert index.exists()
    shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    assert len(shards) >= 3

    first, chain = CHAINS[kind]
    with ptc.Store(tmp_path / "st", create=True) as st:
        assert st.import_safetensors([index], first, kind, compress="zstd") == 1
        for cfg in chain:
            res = st.reshard(cfg, threads=2)
            assert res["parent"] == res["version"] - 1
        assert len(st.versions()) == 1 + len(chain)
        st.verify(all=True)
        out = tmp_path / "out"
        out.mkdir()
        st.export(out / "model.safetensors")
        # and one rank file of the last configuration holds that rank's shards
        st.export(tmp_path / "r0.safetensors", rank=0)
    shutil.copy(src / "config.json", out / "config.json")
    if (src / "generation_config.json").exists():
        shutil.copy(src / "generation_config.json", out / "generation_config.json")
    cls = type(model)
    again = cls.from_pretrained(out).eval()
    ids = torch.randint(0, 131, (2, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(ids).logits
        got = again(ids).logits
    assert torch.equal(want, got)
    sd, sd2 = model.state_dict(), again.state_dict()
    for k in sd:
        assert torch.equal(sd[k], sd2[k]), k


def gqa_model(tie=False):
    """8 query heads, 2 key/value heads of head_dim 8: tp=4 and tp=8 exceed the kv heads."""
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=131, hidden_size=64, intermediate_size=88, num_hidden_layers=3,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=64,
        tie_word_embeddings=tie)
    model = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.05)
    return model.eval()


def load_safetensors(path):
    from safetensors.torch import load_file
    return load_file(str(path))


def logits_equal(model, out_dir, src):
    shutil.copy(src / "config.json", out_dir / "config.json")
    again = type(model).from_pretrained(out_dir).eval()
    ids = torch.randint(0, 131, (2, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(model(ids).logits, again(ids).logits)


def test_gqa_kv_heads_replicated_when_tp_exceeds_them(tmp_path):
    model = gqa_model()
    src = tmp_path / "src"
    model.save_pretrained(src, max_shard_size="40KB", safe_serialization=True)
    index = src / "model.safetensors.index.json"
    sd = model.state_dict()
    k0 = "model.layers.0.self_attn.k_proj.weight"
    with ptc.Store(tmp_path / "st", create=True) as st:
        assert st.import_safetensors([index], "tp=4", "llama", params="auto") == 1
        # the shards' __metadata__ survives an index import, as a single file's does
        assert st.versions()[0]["metadata"].get("format") == "pt"
        pl = dict((n, p) for n, _, _, p in st.tensors())
        assert pl[k0].startswith("tp=split(0,kv_heads=2,head_dim=8)"), pl[k0]
        assert pl["model.layers.0.self_attn.q_proj.weight"].startswith(
            "tp=split(0,heads=8,head_dim=8)")
        # each tp rank holds one whole kv head: ranks 0,1 head 0, ranks 2,3 head 1
        for r in range(4):
            st.export(tmp_path / ("r%d.safetensors" % r), rank=r)
            got = load_safetensors(tmp_path / ("r%d.safetensors" % r))
            h = r * 2 // 4
            for name in (k0, "model.layers.0.self_attn.v_proj.weight"):
                assert torch.equal(got[name], sd[name][h * 8:(h + 1) * 8]), (r, name)
            q = got["model.layers.0.self_attn.q_proj.weight"]
            assert torch.equal(q, sd["model.layers.0.self_attn.q_proj.weight"][r * 16:(r + 1) * 16])
        # a degree that would cut the 8 query heads (and the 2 kv heads) is refused
        with pytest.raises(ptc.RuleError, match="q_proj|k_proj|v_proj|o_proj"):
            st.reshard("tp=3", threads=2)
        for cfg in ["dp=2,tp=8", "tp=2,pp=2", "tp=8,pp=3,zero=1", "tp=1"]:
            st.reshard(cfg, threads=2)
        st.verify(all=True)
        out = tmp_path / "out"
        out.mkdir()
        st.export(out / "model.safetensors")
        # rank 5 of tp=8: kv head 5*2//8 = 1, query head 5
        st.export(tmp_path / "t8.safetensors", config="tp=8", rank=5)
    from safetensors import safe_open
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert f.metadata().get("format") == "pt"
    t8 = load_safetensors(tmp_path / "t8.safetensors")
    assert torch.equal(t8[k0], sd[k0][8:16])
    assert torch.equal(t8["model.layers.2.self_attn.o_proj.weight"],
                       sd["model.layers.2.self_attn.o_proj.weight"][:, 40:48])
    logits_equal(model, out, src)


def test_tied_embeddings_reach_the_last_stage(tmp_path):
    model = gqa_model(tie=True)
    src = tmp_path / "src"
    model.save_pretrained(src, safe_serialization=True)
    files = sorted(src.glob("*.safetensors"))
    assert "lm_head.weight" not in load_safetensors(files[0])
    emb = "model.embed_tokens.weight"
    with ptc.Store(tmp_path / "st", create=True) as st:
        st.import_safetensors(files, "tp=2,pp=2", "llama")
        # rank 2 is tp 0 of the last stage: it needs the output embedding
        st.export(tmp_path / "r2.safetensors", rank=2)
        r2 = load_safetensors(tmp_path / "r2.safetensors")
        assert torch.equal(r2[emb], model.state_dict()[emb][:66])
        st.reshard("tp=1,pp=3", threads=2)
        st.export(tmp_path / "last.safetensors", rank=2)
        assert emb in load_safetensors(tmp_path / "last.safetensors")
        out = tmp_path / "out"
        out.mkdir()
        st.export(out / "model.safetensors")
    logits_equal(model, out, src)


def test_qwen2_tied_gqa_with_qkv_biases(tmp_path):
    """Qwen2: tied embeddings, grouped-query attention and biases on q/k/v:
    the llama preset with the model's config.json; at tp=4 over 2 KV heads
    each rank holds one whole KV head and its bias; identical logits after
    a chain of reshards."""
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(
        vocab_size=131, hidden_size=64, intermediate_size=88, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=64,
        tie_word_embeddings=True)
    model = transformers.Qwen2ForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.05)
    model.eval()
    src = tmp_path / "src"
    model.save_pretrained(src, safe_serialization=True)
    files = sorted(src.glob("*.safetensors"))
    sd = model.state_dict()
    kb = "model.layers.0.self_attn.k_proj.bias"
    with ptc.Store(tmp_path / "st", create=True) as st:
        st.import_safetensors(files, "tp=4", "llama", params="auto")
        for r in range(4):
            st.export(tmp_path / ("r%d.safetensors" % r), rank=r)
            got = load_safetensors(tmp_path / ("r%d.safetensors" % r))
            h = r * 2 // 4
            assert torch.equal(got[kb], sd[kb][h * 8:(h + 1) * 8]), r
            qb = "model.layers.0.self_attn.q_proj.bias"
            assert torch.equal(got[qb], sd[qb][r * 16:(r + 1) * 16]), r
        for c in ["tp=2,pp=2", "dp=2,tp=8,zero=1", "tp=1,pp=2"]:
            st.reshard(c, threads=2)
        # the last stage of pp=2 holds the (tied) output embedding
        st.export(tmp_path / "last.safetensors", rank=1)
        assert "model.embed_tokens.weight" in load_safetensors(tmp_path / "last.safetensors")
        st.verify(all=True)
        out = tmp_path / "out"
        out.mkdir()
        st.export(out / "model.safetensors")
    logits_equal(model, out, src)


def test_phi3_fused_qkv_by_heads(tmp_path):
    """Phi-3's fused qkv_proj ([q; k; v] rows) through the phi3 preset: at tp=4
    each rank holds 2 query heads and one whole (replicated) key and value head."""
    torch.manual_seed(0)
    cfg = transformers.Phi3Config(
        vocab_size=131, hidden_size=64, intermediate_size=88, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=64,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    model = transformers.Phi3ForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.05)
    model.eval()
    src = tmp_path / "src"
    model.save_pretrained(src, safe_serialization=True)
    files = sorted(str(f) for f in src.glob("*.safetensors"))
    qkv = "model.layers.1.self_attn.qkv_proj.weight"
    w = model.state_dict()[qkv]  # rows: 8 q heads, 2 k heads, 2 v heads, 8 rows each
    with ptc.Store(tmp_path / "st", create=True) as st:
        st.import_safetensors(files, "tp=4", "phi3", params="auto")
        st.export(tmp_path / "r3.safetensors", rank=3)
        got = load_safetensors(tmp_path / "r3.safetensors")[qkv]
        want = torch.cat([w[48:64], w[64 + 8:64 + 16], w[80 + 8:80 + 16]])
        assert torch.equal(got, want)
        for c in ["tp=8,pp=2", "tp=2"]:
            st.reshard(c, threads=2)
        out = tmp_path / "out"
        out.mkdir()
        st.export(out / "model.safetensors")
    logits_equal(model, out, src)


def test_sharded_export_loads_in_transformers(tmp_path, ptc_bin):
    """ptc export --max-shard-size --params-only writes what save_pretrained
    writes: shards plus an index that from_pretrained and safetensors load;
    the optimizer state of the store is left out; logits are identical."""
    from safetensors.torch import load_file, save_file

    from conftest import run_ptc

    model = build("llama")
    src = tmp_path / "src"
    model.save_pretrained(src, safe_serialization=True)
    # a training checkpoint: parameters plus AdamW moments (kind=optim)
    sd = load_file(src / "model.safetensors")
    full = dict(sd)
    for k, v in sd.items():
        full[k + ".exp_avg"] = torch.randn_like(v)
        full[k + ".exp_avg_sq"] = torch.rand_like(v)
    save_file(full, tmp_path / "train.safetensors", metadata={"format": "pt"})
    st = tmp_path / "st"
    run_ptc("import", "--store", st, "--config", "tp=2,pp=2", "--rules", "llama",
            "--hf-config", src / "config.json", tmp_path / "train.safetensors")
    out = tmp_path / "out"
    run_ptc("export", "--store", st, "--max-shard-size", "40KB", "--params-only",
            "--out-dir", out)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert len(files) >= 3
    assert files == sorted(p.name for p in out.glob("model-*.safetensors"))
    n = len(files)
    assert files == ["model-%05d-of-%05d.safetensors" % (k + 1, n) for k in range(n)]
    assert set(index["weight_map"]) == set(sd)  # no .exp_avg*
    total = 0
    for f in files:
        part = load_file(out / f)
        for k, v in part.items():
            assert index["weight_map"][k] == f
            assert torch.equal(v, sd[k]), k
            total += v.numel() * v.element_size()
        sizes = [v.numel() * v.element_size() for v in part.values()]
        assert len(sizes) == 1 or sum(sizes) <= 40_000
    assert index["metadata"]["total_size"] == total
    shutil.copy(src / "config.json", out / "config.json")
    again = transformers.LlamaForCausalLM.from_pretrained(out).eval()
    ids = torch.randint(0, 131, (2, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(model(ids).logits, again(ids).logits)
    # without --params-only the optimizer state stays; one shard: no index
    run_ptc("export", "--store", st, "--max-shard-size", "5GB", "--out-dir", tmp_path / "one")
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == ["model.safetensors"]
    assert set(load_file(tmp_path / "one" / "model.safetensors")) == set(full)


def test_rank_files_of_a_gqa_model_import_back(tmp_path, ptc_bin):
    """tp=4 over 2 kv heads (replicated kv heads): the rank files of ptc
    export --config import back under the same config (their ptc.layout gives
    the global shapes) and the whole model loads with identical logits."""
    from conftest import run_ptc

    model = build("llama")
    src = tmp_path / "src"
    model.save_pretrained(src, safe_serialization=True)
    st, st2, ranks = tmp_path / "st", tmp_path / "st2", tmp_path / "ranks"
    run_ptc("import", "--store", st, "--config", "tp=4,pp=2", "--rules", "llama",
            src / "model.safetensors")
    run_ptc("export", "--store", st, "--config", "tp=4,pp=2", "--out-dir", ranks)
    files = sorted(ranks.glob("rank-*.safetensors"))
    assert len(files) == 8
    run_ptc("import", "--store", st2, "--config", "tp=4,pp=2", "--rules", "llama",
            "--hf-config", src / "config.json", *files)
    out = tmp_path / "out"
    out.mkdir()
    run_ptc("export", "--store", st2, "--out", out / "model.safetensors")
    run_ptc("export", "--store", st, "--out", tmp_path / "first.safetensors")
    assert (out / "model.safetensors").read_bytes() == (tmp_path / "first.safetensors").read_bytes()
    shutil.copy(src / "config.json", out / "config.json")
    again = transformers.LlamaForCausalLM.from_pretrained(out).eval()
    ids = torch.randint(0, 131, (2, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(model(ids).logits, again(ids).logits)
