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
