#!/usr/bin/env python3
"""Writes the committed hand-made seed corpus under fuzz/corpus/<target>/ (run once by a
developer; CI only reads the files). Small valid inputs plus one bad file per rule that
is easy to write by hand; fixture-derived seeds are added at CI time by fuzz/seeds.sh."""
import json, os, struct, sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")

def put(target, name, data):
    d = os.path.join(root, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)

# ---- gguf ----
def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b
def gguf(kvs, tensors, data, version=3):
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += gstr(k) + struct.pack("<I", t) + v
    for name, ne, typ, off in tensors:
        out += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", x) for x in ne)
        out += struct.pack("<IQ", typ, off)
    out += b"\0" * (-len(out) % 32)
    return out + data
q8 = struct.pack("<H", 0x3c00) + bytes(range(32))
put("gguf", "ok_f32_q8", gguf([("general.architecture", 8, gstr("test")),
    ("a.strs", 9, struct.pack("<IQ", 8, 2) + gstr("x") + gstr("yz")),
    ("a.u32", 4, struct.pack("<I", 7))],
    [("w", [4, 2], 0, 0), ("q", [32, 2], 8, 32)], b"\0" * 32 + q8 * 2))
put("gguf", "ok_orig_shape", gguf([("comfy.gguf.orig_shape.c", 9, struct.pack("<IQii", 5, 2, 2, 2))],
    [("c", [4], 1, 0)], b"\0" * 8))
put("gguf", "ok_empty", gguf([], [], b""))
put("gguf", "bad_offset", gguf([], [("w", [4], 0, 8)], b"\0" * 24))
put("gguf", "bad_nested", gguf([("n", 9, struct.pack("<IQ", 9, 0))], [], b""))
put("gguf", "bad_iq", gguf([], [("w", [256], 16, 0)], b"\0" * 66))

# ---- safetensors ----
def st(header, data=b"", n=None):
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(h) if n is None else n) + h + data
put("safetensors", "ok_f32", st({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8))
put("safetensors", "ok_multi", st({"__metadata__": {"format": "pt"},
    "a": {"dtype": "BF16", "shape": [2, 1], "data_offsets": [0, 4]},
    "b": {"dtype": "F16", "shape": [], "data_offsets": [4, 6]},
    "c": {"dtype": "I64", "shape": [0], "data_offsets": [6, 6]}}, b"\1" * 6))
put("safetensors", "bad_short", b"\x05\0\0")
put("safetensors", "bad_hugelen", st(b"{}", n=1 << 62))
put("safetensors", "bad_overlap", st({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
    "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}, b"\0" * 6))
put("safetensors", "bad_hole", st({"a": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]}}, b"\0" * 4))
put("safetensors", "bad_dup", b'\x5a\0\0\0\0\0\0\0{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}\0')
put("safetensors", "bad_dtype", st({"a": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}}, b"\0"))
put("safetensors", "bad_shape_ovf", st({"a": {"dtype": "F32", "shape": [2**62, 2**62], "data_offsets": [0, 4]}}, b"\0" * 4))
put("safetensors", "bad_neg", st({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4))
put("safetensors", "bad_meta", st({"__metadata__": {"a": 1}}))
put("safetensors", "bad_utf8", st(b'{"\xff":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\0"))
put("safetensors", "ws_header", st(b'  {"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}   ', b"\0"))

# ---- config (first byte picks the file, see fuzz_config.c) ----
zt = {"_class_name": "ZImageTransformer2DModel", "all_f_patch_size": [1], "all_patch_size": [2],
      "axes_dims": [32, 48, 48], "axes_lens": [1024, 512, 512], "cap_feat_dim": 16, "dim": 256,
      "in_channels": 16, "n_heads": 2, "n_kv_heads": 2, "n_layers": 2, "n_refiner_layers": 1,
      "norm_eps": 1e-05, "qk_norm": True, "rope_theta": 256.0, "siglip_feat_dim": None, "t_scale": 1000.0}
def cfg(sel, obj):
    return bytes([sel]) + (obj if isinstance(obj, bytes) else json.dumps(obj).encode())
put("config", "index_zimage", cfg(0, {"_class_name": "ZImagePipeline", "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
    "transformer": ["diffusers", "ZImageTransformer2DModel"], "vae": ["diffusers", "AutoencoderKL"]}))
put("config", "index_dotdot", cfg(0, {"_class_name": "ZImagePipeline", "transformer": ["diffusers", "../x"], "..": ["a", "b"]}))
put("config", "index_flux2", cfg(0, {"_class_name": "Flux2KleinPipeline", "vae": ["diffusers", "AutoencoderKL"]}))
put("config", "zimage_ok", cfg(1, zt))
for k, v in [("dim", 0), ("n_heads", -2), ("n_layers", 10**12), ("dim", 255.5), ("n_kv_heads", 3), ("axes_dims", [1, 2])]:
    z = dict(zt); z[k] = v
    put("config", "zimage_bad_%s_%s" % (k, str(v).replace(" ", "")[:12]), cfg(1, z))
q = {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
     "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2, "vocab_size": 151936, "rms_norm_eps": 1e-6,
     "rope_theta": 1000000, "max_position_embeddings": 40960, "tie_word_embeddings": True, "hidden_act": "silu",
     "model_type": "qwen3", "torch_dtype": "bfloat16"}
put("config", "qwen3_ok", cfg(2, q))
for k, v in [("hidden_size", 0), ("num_attention_heads", 3), ("num_hidden_layers", -1), ("vocab_size", 2**40), ("head_dim", 7.5)]:
    z = dict(q); z[k] = v
    put("config", "qwen3_bad_%s" % k, cfg(2, z))
vae = {"_class_name": "AutoencoderKL", "act_fn": "silu", "block_out_channels": [32, 64], "in_channels": 3,
       "latent_channels": 16, "layers_per_block": 1, "norm_num_groups": 32, "out_channels": 3,
       "scaling_factor": 0.3611, "shift_factor": 0.1159, "down_block_types": ["DownEncoderBlock2D"] * 2,
       "up_block_types": ["UpDecoderBlock2D"] * 2, "sample_size": 64, "use_quant_conv": False, "use_post_quant_conv": False}
put("config", "vae_ok", cfg(3, vae))
for k, v in [("block_out_channels", [0, 64]), ("norm_num_groups", 7), ("latent_channels", 2**31), ("layers_per_block", -1)]:
    z = dict(vae); z[k] = v
    put("config", "vae_bad_%s" % k, cfg(3, z))
sch = {"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000, "shift": 3.0,
       "use_dynamic_shifting": False, "base_shift": 0.5, "max_shift": 1.15, "base_image_seq_len": 256,
       "max_image_seq_len": 4096}
put("config", "sched_ok", cfg(4, sch))
put("config", "sched_dyn", cfg(4, dict(sch, use_dynamic_shifting=True)))
put("config", "sched_bad", cfg(4, dict(sch, num_train_timesteps=0, shift=-1)))
put("config", "index_ok", cfg(5, {"metadata": {"total_size": 8}, "weight_map": {"w": "a.safetensors"}}))
for n, wm in [("abs", "/etc/passwd"), ("dotdot", "../a.safetensors"), ("dir", "."), ("missing", "b.safetensors")]:
    put("config", "index_bad_" + n, cfg(5, {"weight_map": {"w": wm}}))
put("config", "json_nested", cfg(6, b"[" * 5000 + b"]" * 5000))
put("config", "json_dupkey", cfg(6, b'{"a": 1, "a": 2}'))
put("config", "json_types", cfg(6, b'{"a": 1e999, "hidden_size": 9999999999, "_class_name": "x\\u0000y", "shape": [1,-2,3.5]}'))

# FLUX.1: the transformer, CLIP and T5 configs of tests/fixtures/models/flux1-dev-tiny
f1 = {"_class_name": "FluxTransformer2DModel", "attention_head_dim": 16, "axes_dims_rope": [4, 6, 6],
      "guidance_embeds": True, "in_channels": 64, "joint_attention_dim": 8, "num_attention_heads": 2,
      "num_layers": 1, "num_single_layers": 2, "patch_size": 1, "pooled_projection_dim": 16}
put("config", "flux1_ok", cfg(9, f1))
for k, v in (("axes_dims_rope", [4, 6]), ("attention_head_dim", 15), ("num_layers", -1), ("patch_size", 2),
             ("pooled_projection_dim", 0), ("_class_name", "Flux2Transformer2DModel")):
    put("config", "flux1_bad_%s" % k, cfg(9, dict(f1, **{k: v})))
cl = {"architectures": ["CLIPTextModel"], "model_type": "clip_text_model", "hidden_size": 16, "intermediate_size": 32,
      "num_hidden_layers": 2, "num_attention_heads": 2, "max_position_embeddings": 77, "vocab_size": 49408,
      "hidden_act": "quick_gelu", "layer_norm_eps": 1e-05, "eos_token_id": 2}
put("config", "clip_ok", cfg(10, cl))
for k, v in (("num_attention_heads", 3), ("hidden_act", "relu"), ("model_type", "t5"), ("eos_token_id", -1)):
    put("config", "clip_bad_%s" % k, cfg(10, dict(cl, **{k: v})))
put("config", "clip_full_model", cfg(10, {"model_type": "clip", "text_config": cl}))
t5 = {"architectures": ["T5EncoderModel"], "model_type": "t5", "d_model": 8, "d_kv": 8, "d_ff": 16, "num_layers": 2,
      "num_heads": 2, "vocab_size": 32128, "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128,
      "feed_forward_proj": "gated-gelu", "layer_norm_epsilon": 1e-06}
put("config", "t5_ok", cfg(11, t5))
for k, v in (("feed_forward_proj", "relu"), ("relative_attention_num_buckets", 2), ("d_kv", 0), ("num_heads", 1 << 40)):
    put("config", "t5_bad_%s" % k, cfg(11, dict(t5, **{k: v})))

# ---- tokenizer.json ----
def byte_cp(b):
    if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255:
        return b
    n = sum(1 for x in range(b) if not (33 <= x <= 126 or 161 <= x <= 172 or 174 <= x <= 255))
    return 256 + n
vocab = {chr(byte_cp(i)): i for i in range(256)}
vocab.update({"he": 256, "ll": 257, "hell": 258, "\u0120w": 259})
tj = {"version": "1.0", "added_tokens": [{"id": 260, "content": "<|x|>", "special": True, "normalized": False}],
      "normalizer": {"type": "NFC"},
      "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
          {"type": "Split", "pattern": {"Regex": " ?\\p{L}+|\\s+"}, "behavior": "Isolated", "invert": False},
          {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
      "model": {"type": "BPE", "dropout": None, "unk_token": None, "vocab": vocab,
                "merges": ["h e", ["l", "l"], "he ll", "\u0120 w"]}}
put("tokenizer_json", "ok_small", json.dumps(tj, ensure_ascii=False))
def tjv(**kw):
    t = json.loads(json.dumps(tj)); m = t["model"]
    for k, v in kw.items():
        if k in m: m[k] = v
        else: t[k] = v
    return json.dumps(t, ensure_ascii=False)
put("tokenizer_json", "bad_merge", tjv(merges=["h e", "q zz"]))
put("tokenizer_json", "bad_model", tjv(type="WordPiece"))
put("tokenizer_json", "bad_added_dup", tjv(added_tokens=[{"id": 260, "content": "<a>"}, {"id": 260, "content": "<b>"}]))
put("tokenizer_json", "bad_id_big", tjv(vocab=dict(vocab, big=99999999)))
put("tokenizer_json", "bad_regex", tjv(pre_tokenizer={"type": "Split", "pattern": {"Regex": "(("}, "behavior": "Isolated", "invert": False}))
put("tokenizer_json", "no_normalizer", tjv(normalizer=None))

# ---- tokenize (raw prompt bytes) ----
for n, b in [("hello", b"Hello world, a photo of a cat."), ("special", b"<|im_start|>user\nhi<|im_end|>\n<think>\n\n</think>"),
             ("cjk_emoji", "\u4e2d\u6587 \u3053\u3093\u306b\u3061\u306f \U0001F600 caf\u00e9 e\u0301".encode()),
             ("nul", b"a\0b\0\0c"), ("bad_utf8", b"ok \xff\xfe \xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80"),
             ("spaces", b"   \t\n\r\n  x  "), ("digits", b"1234567890 3.14159 0x1F"), ("empty", b"")]:
    put("tokenize", n, b)

# ---- cli (first byte picks generate/tokenize/info; arguments NUL-separated) ----
def cli(sel, *args):
    return bytes([sel]) + b"\0".join(a.encode() if isinstance(a, str) else a for a in args)
put("cli", "gen_ok", cli(0, "-m", "m", "-p", "a cat", "-W", "256", "-H", "256", "--steps", "8", "--seed", "18446744073709551615", "-o", "x.png"))
put("cli", "gen_eq", cli(0, "--model=m", "--prompt=x", "--guidance=3.5", "--cfg-truncation=0.9", "--cfg-normalization=1", "--overwrite", "-q"))
put("cli", "gen_bad_num", cli(0, "-m", "m", "-p", "x", "--steps", "12abc", "-W", "1e999", "--seed", "-1"))
put("cli", "gen_missing", cli(0, "-m", "m", "-p", "x", "--steps"))
put("cli", "gen_dev", cli(0, "-m", "m", "-p", "x", "--device", "cuda", "--rng", "torch-cpu", "--threads", "4", "--vae-tile", "32", "--max-seq-len", "512"))
put("cli", "tok_ok", cli(1, "-m", "m", "--chat", "--", "-text"))
put("cli", "tok_bad", cli(1, "-m", "m", "a", "b", "--x"))
put("cli", "info_ok", cli(2, "--tensors", "p"))
put("cli", "info_bad", cli(2, "a", "b", "-z"))

# ---- tune_cache (first byte: even = the file as is; odd = the file without its checksum,
# which fuzz_tune_cache.c appends; see core/tune_cache.h for the format) ----
def fnv1a64(b):
    h = 0xcbf29ce484222325
    for x in b:
        h = ((h ^ x) * 0x100000001b3) & 0xffffffffffffffff
    return h
def tune_body(entries, version=1, count=None, magic=b"DITTUNE1"):
    out = magic + struct.pack("<II", version, len(entries) if count is None else count)
    for k, v in entries:
        out += struct.pack("<HH", len(k), len(v)) + k + v
    return out
def tune_file(body):
    return body + struct.pack("<Q", fnv1a64(body))
two = [(b"gemm m=4096 n=3072 k=3072 bf16 sm90", b"\x11\0\0\0algo"), (b"conv 3x3 64->64 nhwc", b"")]
put("tune_cache", "ok_empty", b"\0" + tune_file(tune_body([])))
put("tune_cache", "ok_two", b"\0" + tune_file(tune_body(two)))
put("tune_cache", "bad_checksum", b"\0" + tune_body(two) + b"\0" * 8)
put("tune_cache", "bad_magic", b"\0" + tune_file(tune_body(two, magic=b"DITTUNE0")))
put("tune_cache", "body_two", b"\1" + tune_body(two))
put("tune_cache", "body_dup", b"\1" + tune_body([(b"k", b"1"), (b"x", b"y"), (b"k", b"2")]))
put("tune_cache", "body_max", b"\1" + tune_body([(bytes(range(256)), bytes(255 - i for i in range(256)))]))
put("tune_cache", "body_version", b"\1" + tune_body(two, version=2))
put("tune_cache", "body_count_huge", b"\1" + tune_body(two, count=0xffffffff))
put("tune_cache", "body_past_end", b"\1" + tune_body([], count=1) + struct.pack("<HH", 10, 10) + b"short")
