"""Store operations give what the ptc command gives for the same store."""

import json

import numpy as np
import pytest
import torch

import ptc
from conftest import run_ptc


def cli_json(*args):
    return json.loads(run_ptc(*args, "--json").stdout)


@pytest.fixture
def store(tmp_path, synth):
    st = ptc.Store(tmp_path / "st", create=True)
    assert st.import_safetensors([synth], "dp=2,tp=2,pp=2,zero=1", "llama", step=3) == 1
    yield st
    st.close()


def test_versions_and_info_match_the_cli(store):
    vs = store.versions()
    cli = cli_json("versions", "--store", store.path)["versions"]
    assert [{k: v[k] for k in cli[0]} for v in vs] == cli
    assert vs[0]["step"] == "3" and vs[0]["config"] == "dp=2,tp=2,pp=2,zero=1"
    assert store.info() == cli_json("info", "--store", store.path)
    assert store.latest() == 1


@pytest.mark.parametrize("hosts", [None, 2, 3])
def test_plan_matches_the_cli(store, hosts):
    py = store.plan("dp=1,tp=4,pp=2", hosts=hosts)
    args = ["plan", "--store", store.path, "--to", "dp=1,tp=4,pp=2"]
    if hosts:
        args += ["--hosts", hosts]
    cli = cli_json(*args)
    py.pop("plan_seconds"), cli.pop("plan_seconds")
    # the command adds the link model's prediction (docs/search.md) to the plan
    for k in ("predicted_move_seconds", "predicted_network_seconds", "predicted_copy_seconds",
              "busiest_host", "net"):
        cli.pop(k)
    assert py == cli
    assert py["bytes_network"] == py["bytes_network_lower_bound"]


def test_reshard_export_verify_gc(store, tmp_path):
    res = store.reshard("tp=4,pp=1", threads=2, step=9)
    assert res["version"] == 2 and res["parent"] == 1
    assert store.versions()[1]["step"] == "9"
    files = store.export(tmp_path / "r", config="dp=2,tp=1,pp=2")
    run_ptc("export", "--store", store.path, "--config", "dp=2,tp=1,pp=2", "--out-dir",
            tmp_path / "c")
    for f in files:
        assert open(f, "rb").read() == open(tmp_path / "c" / f.split("/")[-1], "rb").read()
    one = store.export(tmp_path / "one.safetensors", config="dp=2,tp=1,pp=2", rank=3)
    assert open(one[0], "rb").read() == open(files[3], "rb").read()
    store.export(tmp_path / "r1.safetensors", version=1, rank=5)
    run_ptc("export", "--store", store.path, "--version", 1, "--rank", 5, "--out",
            tmp_path / "c5.safetensors")
    assert open(tmp_path / "r1.safetensors", "rb").read() == \
        open(tmp_path / "c5.safetensors", "rb").read()
    with pytest.raises(ptc.RangeError, match="rank 8"):
        store.export(tmp_path / "x.safetensors", rank=8)
    assert store.verify() == 2 and store.verify(version=1) == 1
    assert store.gc() == {"files_removed": 0, "dirs_removed": 0, "bytes_removed": 0}


def test_verify_finds_a_flipped_bit(store):
    import glob
    pack = sorted(glob.glob(store.path + "/packs/v1/rank-*.pack"))[0]
    with open(pack, "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 1]))
    with pytest.raises(ptc.ChecksumError) as e:
        store.verify()
    assert "rank-" in e.value.message and e.value.code == -7


def test_ingest_and_datasets_match_the_cli(store, tmp_path):
    (tmp_path / "a.jsonl").write_text("".join('{"i":%d}\n' % i for i in range(50)))
    d = store.ingest("docs", "jsonl", [tmp_path / "a.jsonl"], compress="zstd:3")
    assert d["samples"] == 50 and d["codec"] == "zstd"
    toks = np.arange(4096, dtype=np.uint16)
    toks.tofile(tmp_path / "t.bin")
    store.ingest("tok", "tokens:u16:128", tmp_path / "t.bin")
    assert [x["name"] for x in store.datasets()] == ["docs", "tok"]
    assert store.datasets() == cli_json("dataset", "ls", "--store", store.path)["datasets"]
    assert store.dataset("tok")["samples"] == 32
    with pytest.raises(ptc.ExistsError):
        store.ingest("docs", "jsonl", [tmp_path / "a.jsonl"])
    assert store.ingest("docs", "lines", [tmp_path / "a.jsonl"], replace=True)["format"] == \
        "lines"
    with pytest.raises(ptc.InvalidError, match="dataset name"):
        store.ingest(".x", "lines", [tmp_path / "a.jsonl"])
    with pytest.raises(ptc.InvalidError):
        store.ingest("y", "nope", [tmp_path / "a.jsonl"])
    assert store.audit("tok", 1, 0) == {"samples": 32, "once": 0, "repeated": 0,
                                        "missing": 32}


def test_layout_matches_the_split_rule():
    t = {"model.layers.0.self_attn.q_proj.weight": ("F32", (10, 6)),
         "model.layers.0.self_attn.o_proj.weight": ("BF16", (6, 10)),
         "model.layers.0.self_attn.q_proj.weight.exp_avg": ("F32", (10, 6)),
         "model.layers.1.input_layernorm.weight": ("F32", (6,)),
         "model.embed_tokens.weight": ("F32", (7, 6)),
         # an untied output layer: without it the llama preset treats the
         # embedding as tied and gives the last stage a replica
         "lm_head.weight": ("F32", (7, 6))}
    for tp in (1, 2, 3, 4):
        for r in range(tp):
            sh = ptc.layout(t, "tp=%d" % tp, "llama", rank=r)
            want = torch.arange(60).reshape(10, 6).chunk(tp, 0)
            q = sh["model.layers.0.self_attn.q_proj.weight"]
            exp = want[r].shape if r < len(want) else (0, 6)
            assert q.shape == tuple(exp)
            o = sh["model.layers.0.self_attn.o_proj.weight"]
            assert o.shape[1] == q.shape[0] and o.dtype == "BF16"
    # zero=1: optimizer state is a flat range of the tp-local shard
    sh = ptc.layout(t, "dp=4,tp=2,zero=1", "llama", rank=5)      # tp 1, dp 2
    m = sh["model.layers.0.self_attn.q_proj.weight.exp_avg"]
    assert m.flat and m.shape == (8,) and m.flat_range == (16, 24)
    g = np.arange(60, dtype=np.float32).reshape(10, 6)
    assert m.take(g).tolist() == g[5:].reshape(-1)[16:24].tolist()
    # pp: stage 1 of 2 holds layer 1, not the embedding
    sh = ptc.layout(t, "pp=2", "llama", rank=1)
    assert not sh["model.embed_tokens.weight"].present
    assert sh["model.layers.1.input_layernorm.weight"].present
    del t["lm_head.weight"]
    assert ptc.layout(t, "pp=2", "llama", rank=1)["model.embed_tokens.weight"].present
    # arrays give their dtype and shape; take/place invert each other
    arrays = {"w": torch.randn(9, 4)}
    lay = ptc.Layout(arrays, "tp=2", "match * tp=split(1) pp=first\n")
    back = torch.zeros(9, 4)
    for r in range(2):
        s = lay.shard("w", r)
        s.place(s.take(arrays["w"]), back)
    assert torch.equal(back, arrays["w"])
