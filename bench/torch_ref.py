"""PyTorch reference timings for `ditrun bench`: diffusers' ZImageTransformer2DModel
(--arch zimage, Z-Image-Turbo config), Krea2Transformer2DModel (--arch krea2, the released config),
Flux2Transformer2DModel (--arch flux2-klein-4b /
flux2-klein-9b, FLUX.2 [klein]'s published config) or FluxTransformer2DModel (--arch flux1-dev /
flux1-schnell, FLUX.1's published config: 19 double + 38 single blocks, 24 heads of 128) or
LTX2VideoTransformer3DModel (--arch ltx2 / ltx23, the released LTX-2.0 / 2.3 configs; one clip of
RES x HEIGHT pixels and FRAMES frames at 24 fps, video and audio streams) or MiniMaxH3Transformer3DModel
(--arch minimax-h3, the released config; the packed sequence of TEXT_LEN text rows and one latent frame of
(RES / 32)^2 video rows, no audio rows, one timestep 0.5, as `ditrun bench --arch minimax-h3` runs it) at the
same geometry (bf16, random weights, one image of RES x RES pixels and TEXT_LEN text tokens),
eager and torch.compile, timed with CUDA events after warmup (median of ITERS). Run it on the GPU machine in the same job as ditrun (bench/gpu_run.sh).

diffusers is imported from .ref/py (a `git archive` of huggingface/diffusers' src/diffusers,
never committed; see docs/perf/gpu.md "How to benchmark on a GPU"). Based on
the project's first GPU timing script (same FLOP formula, same timing method).

End-to-end mode (--e2e, --arch zimage only): what ZImagePipeline does for one image with
guidance 0 (Z-Image-Turbo), all random bf16 weights: Qwen3-4B text encoder (transformers
Qwen3Model, hidden_states[-2] of TEXT_LEN random token ids, mask all ones) -> STEPS transformer
forwards with the flow-match Euler update -> AutoencoderKL (Flux/Z-Image VAE) decode. Timed per
phase (encode, steps, decode, total; synchronize at each boundary), median of ITERS after WARMUP
runs; torch.compile (of the transformer only) only if --modes names it. Each run is one record in
"runs" with mode "e2e-eager"/"e2e-compile" and median_ms = total_ms.

usage: python3 bench/torch_ref.py [--arch zimage] [--res 512 1024 2048] [--text-len 128|512] [--iters 10]
         [--height H --frames N (ltx2*: e.g. --res 768 --height 512 --frames 121)]
         (--arch minimax-h3: --res a multiple of 32, one image of (RES / 32)^2 video rows, TEXT_LEN 512)
         [--warmup 3] [--modes eager,compile] [--compile-budget-s 300] [--fp8] [--profile] [--out FILE.json]

--fp8: the blocks' linears (ditrun's fp8 policy: numbered blocks, not modulation or norms) as a
PyTorch user runs fp8 on Hopper: e4m3 weights with a per-tensor scale, activations quantized per
row, torch._scaled_mm with rowwise scales (the quantization is part of the timed forward).
       python3 bench/torch_ref.py --arch zimage --e2e [--res 1024] [--text-len 128] [--steps 8]
         [--iters 3] [--warmup 1] [--modes eager[,compile]] [--out FILE.json]
       python3 bench/torch_ref.py --vae [--res 1024] [--modes eager,eager-cl,compile] [--profile]
         (the VAE decoder alone, beside `ditrun bench --vae`)
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, ".ref/py")
import torch  # noqa: E402

T0 = time.time()


def log(*a):
    print(f"[torch_ref {time.time() - T0:6.1f}s]", *a, flush=True)


def zimage_flops(n_img, n_cap, d=3840, h=10240, layers=30, refiners=2):
    """The count: q, k, v, out and the SwiGLU FFN per token per block (2 flop per
    MAC), plus QK^T and PV per block; main layers on the unified stream, refiners on their
    own. Token counts are the padded ones (multiples of 32), as both engines compute."""
    per_tok = 2 * (4 * d * d + 3 * d * h)
    n = n_img + n_cap
    lin = per_tok * (layers * n + refiners * n_img + refiners * n_cap)
    att = 4 * d * (layers * n * n + refiners * n_img**2 + refiners * n_cap**2)
    return lin + att


def flux2_flops(n_img, n_txt, d, blocks, mlp_ratio=3.0):
    """ditrun's count (src/api/bench.c flux2_flops): every double block (both streams) and
    single block does 4 D^2 + 3 D M MACs per token (M = mlp hidden), and QK^T + PV over the
    joint sequence S = text + image tokens; embedders and modulations not counted."""
    m, s = int(d * mlp_ratio), n_img + n_txt
    return blocks * (2 * (4 * d * d + 3 * d * m) * s + 4 * d * s * s)


def flux1_flops(n_img, n_txt, d=3072, blocks=57):
    """ditrun's count (src/api/bench.c): FLUX.1's double blocks (both streams: q, k, v, out and a
    4x GELU MLP) and single blocks (fused qkv + 4x MLP in, attention + MLP out) both do 12 D^2 MACs
    per token, plus QK^T + PV over the joint sequence; embedders and modulations not counted."""
    s = n_img + n_txt
    return blocks * (2 * 12 * d * d * s + 4 * d * s * s)


def krea2_flops(n_img, n_txt, d=6144, dkv=1536, f=16384, blocks=28, td=2560, tf=6912, taps=12, lw=2, rf=2):
    """ditrun's count (src/pipeline/krea2_bench.c): per block q, gate, out (3 D^2), k, v (2 D Dkv) and SwiGLU
    (3 D F) MACs per token plus QK^T and PV over S = text + image; the text fusion's layerwise blocks over each
    token's taps and refiner blocks over the text (q, k, v, gate, out at the text width: 5 td^2), txt_in."""
    s = n_img + n_txt
    blk = 2 * (3 * d * d + 2 * d * dkv + 3 * d * f) * s + 4 * d * s * s
    tblk = 2 * (5 * td * td + 3 * td * tf)
    return (blocks * blk + lw * (tblk * n_txt * taps + 4 * td * taps * taps * n_txt)
            + rf * (tblk * n_txt + 4 * td * n_txt * n_txt) + 2 * (td * d + d * d) * n_txt)


# FLUX.1 transformer: guidance embedding for dev, none for schnell
FLUX1 = {"flux1-dev": True, "flux1-schnell": False}

# FLUX.2 [klein] transformer geometries: (heads, double blocks, single blocks, joint_attention_dim)
KLEIN = {"flux2-klein-4b": (24, 5, 20, 7680), "flux2-klein-9b": (32, 8, 24, 12288)}


def ltx2_flops(n_vid, n_aud, n_txt, v23, layers=48, heads=32, dv=128, da=64, cap=3840, ch=128):
    """ditrun's count (src/pipeline/ltx2_bench.c): per block and stream, self, text and cross-modal attention
    (q, k, v, out projections, 2.3's per-head gate logits, QK^T and PV 4 Sq Sk I; the cross-modal attentions
    at the audio width) and the 4x GELU MLP (16 D^2 per token); proj_in/out and 2.0's caption projections."""
    Dv, Da = heads * dv, heads * da
    S, D = (n_vid, n_aud), (Dv, Da)

    def att(sq, dq, sk, dk, i):
        return 2 * (2 * sq * dq * i + 2 * sk * dk * i + (sq * dq * heads if v23 else 0)) + 4 * sq * sk * i
    blk = rest = 0
    for i in range(2):
        blk += att(S[i], D[i], S[i], D[i], D[i]) + att(S[i], D[i], n_txt, D[i], D[i])
        blk += att(S[i], D[i], S[1 - i], D[1 - i], Da) + 16 * D[i] * D[i] * S[i]
        rest += 2 * S[i] * D[i] * 2 * ch
        if not v23:
            rest += 2 * n_txt * (cap * D[i] + D[i] * D[i])
    return layers * blk + rest


def h3_flops(n_txt, n_vid, n_aud=0, h=5376, i=7168, f=14336, layers=50, refiners=2, td=5120, pd=96, ca=32):
    """ditrun's count (dit_h3_flops, src/models/minimax_h3_forward.c): per row of each block q, k, v, out (4 H I)
    and SwiGLU (3 F H) MACs plus QK^T and PV over the S packed rows; the token refiner's blocks over the text rows;
    proj_in / audio_proj_in / context_embedder over their rows and both output heads over every row. The
    modulation (time MLP, every block's adaln_proj, norm_out.linear: one row per timestep) is not counted: ditrun
    folds it before timing; diffusers computes it in every forward (reading the 13 B adaln_proj weights)."""
    s = n_txt + n_vid + n_aud
    row = 2 * (4 * h * i + 3 * f * h)
    io = 2 * h * (n_txt * td + n_vid * pd + n_aud * ca + s * (pd + ca))
    return refiners * (n_txt * row + 4 * n_txt * n_txt * i) + layers * (s * row + 4 * s * s * i) + io


def h3_image_inputs(res, n_txt, dev, g, vae=16, patch=2, pd=96, td=5120, ca=32):
    """One image as the MiniMax-H3 pipeline packs it (modular_pipelines/minimax_h3/before_denoise.py) with one
    latent frame and no audio: [text | video] rows, text at (i, 0, 0), the frame at rotary time N (the text
    length) and the aspect-normalized spatial grid (left + k ratio / n) * 32 in float64, every row at timestep
    index 0; the forward's keyword arguments and the video row count."""
    import numpy as np
    lat = res // vae
    n = lat // patch
    ratio = lat / np.sqrt(lat * lat)
    grid = torch.from_numpy(np.linspace((1 - ratio) / 2, (1 - ratio) / 2 + ratio, n, endpoint=False) * 32)
    n_vid = n * n
    pos = torch.zeros(n_txt + n_vid, 3, dtype=torch.float64)
    pos[:n_txt, 0] = torch.arange(n_txt, dtype=torch.float64)
    pos[n_txt:, 0] = float(n_txt)
    pos[n_txt:, 1] = grid.repeat_interleave(n)
    pos[n_txt:, 2] = grid.repeat(n)
    tags = torch.cat([torch.ones(n_txt, dtype=torch.long), torch.zeros(n_vid, dtype=torch.long)])
    kw = dict(hidden_states=torch.randn(1, n_vid, pd, device=dev, dtype=torch.bfloat16, generator=g),
              audio_hidden_states=torch.zeros(1, 0, ca, device=dev, dtype=torch.bfloat16),
              encoder_hidden_states=torch.randn(1, n_txt, td, device=dev, dtype=torch.bfloat16, generator=g),
              timestep=torch.tensor([0.5], device=dev), timestep_indices=torch.zeros(n_txt + n_vid, dtype=torch.long,
                                                                                   device=dev),
              token_tags=tags.to(dev), position_ids=pos.to(dev),
              video_indices=torch.arange(n_txt, n_txt + n_vid, device=dev),
              audio_indices=torch.zeros(0, dtype=torch.long, device=dev), text_indices=torch.arange(n_txt, device=dev))
    return kw, n_vid


def ltx2_audio_frames(frames, fps=24.0):
    """LTX2Pipeline's audio latent frames: the clip's duration at 16000 / 160 / 4 = 25 a second."""
    return max(1, round(frames / fps * 16000 / 160 / 4))


def pad32(n):
    return (n + 31) // 32 * 32


def bench(fn, warm, iters):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    med = ts[len(ts) // 2] if len(ts) % 2 else 0.5 * (ts[len(ts) // 2 - 1] + ts[len(ts) // 2])
    return {"median_ms": med, "min_ms": ts[0], "max_ms": ts[-1], "iters": iters}


def build_model(arch, dev):
    """Random-weight bf16 model at the real geometry."""
    if arch == "zimage":
        from diffusers import ZImageTransformer2DModel
        with torch.device(dev):
            m = ZImageTransformer2DModel(axes_lens=[1536, 512, 512])  # Z-Image-Turbo's config; others are defaults
    elif arch == "krea2":
        from diffusers import Krea2Transformer2DModel
        torch.set_default_dtype(torch.bfloat16)  # 12 B parameters: created in bf16 (fp32 first would not fit)
        with torch.device(dev):
            m = Krea2Transformer2DModel()  # the defaults are the released Krea 2 config
        torch.set_default_dtype(torch.float32)
    elif arch in ("ltx2", "ltx23"):
        from diffusers import LTX2VideoTransformer3DModel
        v23 = arch == "ltx23"  # the released configs (scripts/convert_ltx2_to_diffusers.py); 2.0 is the default
        kw = dict(gated_attn=True, cross_attn_mod=True, audio_gated_attn=True, audio_cross_attn_mod=True,
                  use_prompt_embeddings=False, perturbed_attn=True) if v23 else {}
        torch.set_default_dtype(torch.bfloat16)  # 19-22 B parameters: created in bf16
        with torch.device(dev):
            m = LTX2VideoTransformer3DModel(**kw)
        torch.set_default_dtype(torch.float32)
    elif arch == "minimax-h3":
        from diffusers import MiniMaxH3Transformer3DModel
        torch.set_default_dtype(torch.bfloat16)  # 33 B parameters: created in bf16 (fp32 first would not fit)
        with torch.device(dev):
            m = MiniMaxH3Transformer3DModel()  # the defaults are the released config
        torch.set_default_dtype(torch.float32)
        m = m.to(torch.bfloat16).eval()
        for name in m._keep_in_fp32_modules:  # the release's fp32 modules, as from_pretrained keeps them
            getattr(m, name).float()
        r = m.config.rope_freq_dim  # rope.inv_freq went through bf16 above: its fp32 values again
        m.rope.inv_freq.copy_(1.0 / (m.config.rope_theta ** (torch.arange(0, 2 * r, 2, device=dev,
                                                                         dtype=torch.float32) / (2 * r))))
        return m  # not through the bf16 cast below
    elif arch in FLUX1:
        from diffusers import FluxTransformer2DModel
        with torch.device(dev):
            m = FluxTransformer2DModel(guidance_embeds=FLUX1[arch])  # the defaults are FLUX.1's config
    else:
        from diffusers import Flux2Transformer2DModel
        heads, nd, ns, jd = KLEIN[arch]
        with torch.device(dev):
            m = Flux2Transformer2DModel(patch_size=1, in_channels=128, num_layers=nd, num_single_layers=ns,
                                        attention_head_dim=128, num_attention_heads=heads, joint_attention_dim=jd,
                                        mlp_ratio=3.0, axes_dims_rope=(32, 32, 32, 32), rope_theta=2000,
                                        guidance_embeds=False)
    return m.to(torch.bfloat16).eval()


class Fp8Linear(torch.nn.Module):
    """A PyTorch user's fp8 linear at ditrun's granularity (--fp8): the weight as float8_e4m3fn
    with one per-tensor scale (amax / 448), each activation row quantized to e4m3 with its own
    scale (amax / 448) right before torch._scaled_mm (rowwise scales, fp32 sums, bf16 out)."""

    def __init__(self, lin):
        super().__init__()
        w = lin.weight.detach().float()
        sw = (w.abs().amax() / 448.0).clamp(min=1e-12)
        self.register_buffer("wq_t", (w / sw).clamp(-448, 448).to(torch.float8_e4m3fn).t())  # [K, N] column-major
        self.register_buffer("sw", sw.reshape(1, 1).expand(1, w.shape[0]).contiguous())
        self.bias = None if lin.bias is None else lin.bias.detach().to(torch.bfloat16)

    def forward(self, x):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        sx = (x2.abs().amax(dim=-1, keepdim=True).float() / 448.0).clamp(min=1e-12)
        xq = (x2.float() / sx).clamp(-448, 448).to(torch.float8_e4m3fn)
        y = torch._scaled_mm(xq, self.wq_t, scale_a=sx, scale_b=self.sw, bias=self.bias, out_dtype=torch.bfloat16)
        return y.reshape(*shape[:-1], y.shape[-1])


def fp8_policy(name, lin):
    """ditrun's dit_wname_fp8_compute: matrices of numbered blocks (the second name segment a
    number), sizes multiples of 16, not modulation, norms or embedders."""
    parts = name.split(".")
    return (len(parts) > 2 and parts[1].isdigit()
            and not any(k in name for k in ("modulation", "adaLN", "_mod.", "norm", "embed"))
            and lin.in_features % 16 == 0 and lin.out_features % 16 == 0)


def to_fp8(m):
    """Replaces the linears fp8_policy names by Fp8Linear; returns how many."""
    todo = [(n, mod) for n, mod in m.named_modules() if isinstance(mod, torch.nn.Linear) and fp8_policy(n, mod)]
    for n, mod in todo:
        parent, _, leaf = n.rpartition(".")
        setattr(m.get_submodule(parent) if parent else m, leaf, Fp8Linear(mod))
    return len(todo)


# Z-Image-Turbo's text encoder (Qwen3-4B) and VAE (the Flux one)
QWEN3_4B = dict(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True)
ZIMAGE_VAE = dict(in_channels=3, out_channels=3, latent_channels=16, block_out_channels=[128, 256, 512, 512],
                  layers_per_block=2, norm_num_groups=32, down_block_types=["DownEncoderBlock2D"] * 4,
                  up_block_types=["UpDecoderBlock2D"] * 4, scaling_factor=0.3611, shift_factor=0.1159,
                  use_quant_conv=False, use_post_quant_conv=False, mid_block_add_attention=True)
ZIMAGE_SHIFT = 3.0  # Z-Image-Turbo's FlowMatchEulerDiscreteScheduler: shift 3, no dynamic shifting


def build_e2e(dev, seed):
    """(text encoder, transformer, vae), random bf16 weights, one seed each (the transformer's
    is --seed, so it gets the same weights as the plain zimage run)."""
    torch.manual_seed(seed)
    tr = build_model("zimage", dev)
    from transformers import Qwen3Config, Qwen3Model
    torch.manual_seed(seed + 1)
    with torch.device(dev):
        te = Qwen3Model(Qwen3Config(**QWEN3_4B))
    te = te.to(torch.bfloat16).eval()
    from diffusers import AutoencoderKL
    torch.manual_seed(seed + 2)
    with torch.device(dev):
        vae = AutoencoderKL(**ZIMAGE_VAE)
    vae = vae.to(torch.bfloat16).eval()
    return te, tr, vae


def zimage_sigmas(steps, shift=ZIMAGE_SHIFT):
    """ZImagePipeline's schedule: linspace(1, 1/steps, steps) (get_default_z_image_sigmas), shifted
    by the scheduler as shift*s / (1 + (shift-1)*s), then the terminal 0 appended: steps+1 values."""
    s = [1.0 - i * (1.0 - 1.0 / steps) / max(steps - 1, 1) for i in range(steps)]
    return [shift * x / (1 + (shift - 1) * x) for x in s] + [0.0]


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def run_e2e(args, modes, dev, env):
    """--e2e: one image per run as ZImagePipeline.__call__ does it with guidance_scale 0 (no CFG
    branch), minus tokenization and the image postprocess (to PIL/numpy), which stay on the CPU."""
    te, tr, vae = build_e2e(dev, args.seed)
    comps = {}
    for name, mod in (("text_encoder", te), ("transformer", tr), ("vae", vae)):
        comps[name] = {"class": type(mod).__name__, "params": sum(p.numel() for p in mod.parameters()),
                       "weight_bytes": sum(p.numel() * p.element_size() for p in mod.parameters())}
        log(f"{name} {comps[name]['class']}: params {comps[name]['params'] / 1e9:.3f} B, "
            f"weights {comps[name]['weight_bytes'] / 2**30:.2f} GiB")
    rope = getattr(te.config, "rope_parameters", None) or getattr(te.config, "rope_theta", None)
    log(f"text encoder rope: {rope}")
    sig = zimage_sigmas(args.steps)
    results = {"env": env, "arch": args.arch, "e2e": True, "steps": args.steps, "text_len": args.text_len,
               "params": sum(c["params"] for c in comps.values()),
               "weight_bytes": sum(c["weight_bytes"] for c in comps.values()), "components": comps,
               "sigmas": sig, "scheduler": f"flow-match Euler, shift {ZIMAGE_SHIFT}, linspace(1, 1/steps, steps) + 0",
               "runs": []}
    scale, shift = vae.config.scaling_factor, vae.config.shift_factor
    L = args.text_len

    plan = [(mode, res) for mode in modes
            for res in (sorted(args.res, key=lambda r: (r != 1024, r)) if mode == "compile" else args.res)]
    compiled = {}
    for mode, res in plan:
        name = f"e2e-{mode}"
        if mode == "compile" and time.time() - T0 > args.compile_budget_s:
            log(f"res {res}: {name} skipped (past the {args.compile_budget_s:.0f} s budget)")
            results["runs"].append({"res": res, "mode": name, "skipped": "time budget"})
            continue
        if mode == "compile" and "tr" not in compiled:
            compiled["tr"] = torch.compile(tr)
        trf = compiled["tr"] if mode == "compile" else tr
        lat = res // 8
        n_img, n_cap = pad32((lat // 2) ** 2), pad32(L)
        fl = zimage_flops(n_img, n_cap)
        g = torch.Generator(device=dev).manual_seed(args.seed + res)
        ids = torch.randint(0, QWEN3_4B["vocab_size"], (1, L), device=dev, generator=g)
        mask = torch.ones(1, L, dtype=torch.bool, device=dev)  # the pipeline passes the bool mask
        noise = torch.randn(1, 16, lat, lat, device=dev, dtype=torch.float32, generator=g)
        # the pipeline's timestep (1000 - sigma*1000)/1000, one [1] float32 tensor per step, made up front
        tsteps = [torch.tensor([1.0 - s], device=dev, dtype=torch.float32) for s in sig[:-1]]

        def one_run():
            t0 = time.perf_counter()
            hs = te(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[-2]
            cap = [hs[i][mask[i]] for i in range(hs.shape[0])]  # unpadded per-prompt features, [L, 2560]
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            latents = noise.clone()  # float32, as prepare_latents makes them
            for i in range(args.steps):
                x = list(latents.to(torch.bfloat16).unsqueeze(2).unbind(dim=0))  # [16, 1, H/8, W/8] each
                out = trf(x, tsteps[i], cap, return_dict=False)[0]
                pred = -torch.stack([o.float() for o in out], dim=0).squeeze(2)
                latents = latents + (sig[i + 1] - sig[i]) * pred  # FlowMatchEulerDiscreteScheduler.step
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            z = latents.to(torch.bfloat16) / scale + shift
            img = vae.decode(z, return_dict=False)[0]
            torch.cuda.synchronize()
            t3 = time.perf_counter()
            ms = lambda a, b: (b - a) * 1e3
            return {"encode_ms": ms(t0, t1), "steps_ms": ms(t1, t2), "decode_ms": ms(t2, t3),
                    "total_ms": ms(t0, t3)}, list(img.shape)

        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        rec = {"res": res, "mode": name, "steps": args.steps, "text_len": L}
        try:
            warm = max(args.warmup, 1) if mode == "compile" else args.warmup  # the first compiled run compiles
            with torch.inference_mode():
                for w in range(warm):
                    r, shape = one_run()
                    if w == 0:
                        rec["first_run_ms"] = r["total_ms"]
                    log(f"res {res} {name} warm-up {w + 1}/{warm}: {r['total_ms']:.1f} ms")
                runs = []
                for _ in range(args.iters):
                    r, shape = one_run()
                    runs.append(r)
            med = {k: median([r[k] for r in runs]) for k in runs[0]}
            rec.update({"encode_ms": med["encode_ms"], "steps_ms": med["steps_ms"],
                        "step_ms": med["steps_ms"] / args.steps, "decode_ms": med["decode_ms"],
                        "total_ms": med["total_ms"], "median_ms": med["total_ms"],
                        "min_ms": min(r["total_ms"] for r in runs), "max_ms": max(r["total_ms"] for r in runs),
                        "iters": args.iters, "warmup": warm, "peak_mem_bytes": torch.cuda.max_memory_allocated(),
                        "img_tokens": n_img, "cap_tokens": n_cap, "image_shape": shape,
                        "dit_flops_per_step": fl, "dit_tflops": fl * args.steps / med["steps_ms"] / 1e9,
                        "runs_ms": runs})
        except Exception as e:  # report and go on with the other sizes
            rec["error"] = repr(e)[:400]
        log(json.dumps({k: v for k, v in rec.items() if k != "runs_ms"}))
        results["runs"].append(rec)
        with open(args.out, "w") as fh:
            json.dump(results, fh, indent=1)

    print(f"{'res':>6} {'mode':>11} {'steps':>5} {'encode ms':>10} {'steps ms':>10} {'ms/step':>8} "
          f"{'decode ms':>10} {'total ms':>10} {'peak GiB':>9}")
    for r in results["runs"]:
        if "total_ms" in r:
            print(f"{r['res']:>6} {r['mode']:>11} {r['steps']:>5} {r['encode_ms']:>10.2f} {r['steps_ms']:>10.2f} "
                  f"{r['step_ms']:>8.2f} {r['decode_ms']:>10.2f} {r['total_ms']:>10.2f} "
                  f"{r['peak_mem_bytes'] / 2**30:>9.2f}")
        else:
            print(f"{r['res']:>6} {r['mode']:>11} {r.get('error', r.get('skipped', '?'))[:60]}")
    print(f"text encoder {L} tokens, guidance 0, sigmas {', '.join(f'{s:.3f}' for s in sig)}; "
          f"median of {args.iters} runs each field, tokenization and image postprocess not included")


def run_vae(args, modes, dev, env):
    """--vae: the Flux / Z-Image AutoencoderKL decoder alone, vae.decode(z) of a random bf16 latent
    [1, 16, res/8, res/8] as ZImagePipeline calls it (z on the GPU, the image left there), timed
    with CUDA events. Modes: eager (NCHW, what the pipeline runs), eager-cl (the model and z in
    channels_last, what a PyTorch user can switch on), compile (torch.compile of the channels_last
    decoder). --profile: the top CUDA kernels of one eager decode per size (torch.profiler)."""
    from diffusers import AutoencoderKL
    torch.manual_seed(args.seed + 2)
    with torch.device(dev):
        vae = AutoencoderKL(**ZIMAGE_VAE)
    vae = vae.to(torch.bfloat16).eval()
    results = {"env": env, "vae": True, "runs": []}
    for res in args.res:
        g = torch.Generator(device=dev).manual_seed(args.seed + res)
        z = torch.randn(1, 16, res // 8, res // 8, device=dev, dtype=torch.bfloat16, generator=g)
        for mode in modes:
            cl = mode != "eager"
            vae = vae.to(memory_format=torch.channels_last if cl else torch.contiguous_format)
            zin = z.contiguous(memory_format=torch.channels_last) if cl else z
            fn = torch.compile(vae.decode) if mode == "compile" else vae.decode
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            rec = {"res": res, "mode": f"vae-{mode}"}
            try:
                with torch.inference_mode():
                    rec.update(bench(lambda: fn(zin, return_dict=False), args.warmup, args.iters))
                rec["peak_mem_bytes"] = torch.cuda.max_memory_allocated()
            except Exception as e:  # report and go on
                rec["error"] = repr(e)[:400]
            log(json.dumps(rec))
            results["runs"].append(rec)
        if args.profile:
            vae = vae.to(memory_format=torch.contiguous_format)
            profile_call(lambda: vae.decode(z, return_dict=False), f"res {res}: eager decode")
        with open(args.out, "w") as fh:
            json.dump(results, fh, indent=1)
    print(f"{'res':>6} {'mode':>13} {'median ms':>10} {'peak GiB':>9}")
    for r in results["runs"]:
        if "median_ms" in r:
            print(f"{r['res']:>6} {r['mode']:>13} {r['median_ms']:>10.2f} {r['peak_mem_bytes'] / 2**30:>9.2f}")
        else:
            print(f"{r['res']:>6} {r['mode']:>13} {r.get('error', '?')[:60]}")


def profile_call(call, title):
    """One more call under torch.profiler: its CUDA kernels by total time, and the kernel sum."""
    from torch.profiler import ProfilerActivity, profile
    with torch.inference_mode(), profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    ev = prof.key_averages()
    total = sum(e.device_time_total for e in ev) / 1e3
    print(f"{title}: CUDA kernels by total time (sum of kernel times {total:.2f} ms)")
    print(ev.table(sort_by="cuda_time_total", row_limit=40, max_name_column_width=100))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="zimage",
                    choices=["zimage", "krea2", "ltx2", "ltx23", "minimax-h3"] + sorted(KLEIN) + sorted(FLUX1))
    ap.add_argument("--res", type=int, nargs="+", default=[1024])
    ap.add_argument("--height", type=int, default=0, help="ltx2*: the frames' height (--res is their width; "
                    "default: --res)")
    ap.add_argument("--frames", type=int, default=121, help="ltx2*: frames of the clip at 24 fps (default 121)")
    ap.add_argument("--text-len", type=int, default=None,
                    help="default 128 (zimage), 512 (flux2-klein-*, flux1-*, krea2, minimax-h3), 1024 (ltx2*)")
    ap.add_argument("--ref-res", type=int, default=0, help="flux2-klein-*: a reference image of this side in the "
                    "sequence, as an edit runs (ditrun bench --ref-res)")
    ap.add_argument("--iters", type=int, default=None, help="default 10 (3 with --e2e)")
    ap.add_argument("--warmup", type=int, default=None, help="default 3 (1 with --e2e)")
    ap.add_argument("--modes", default=None, help="default eager,compile (eager with --e2e)")
    ap.add_argument("--e2e", action="store_true",
                    help="zimage only: time the whole text-to-image run (Qwen3-4B encode, --steps DiT steps, VAE decode)")
    ap.add_argument("--steps", type=int, default=8, help="denoising steps of an --e2e run (Z-Image-Turbo: 8)")
    ap.add_argument("--compile-budget-s", type=float, default=300.0,
                    help="skip torch.compile for further sizes once the script has run this long")
    ap.add_argument("--vae", action="store_true", help="the VAE decoder alone (modes eager, eager-cl, compile)")
    ap.add_argument("--profile", action="store_true",
                    help="top CUDA kernels of one more call (--vae: an eager decode; forwards: each mode's)")
    ap.add_argument("--fp8", action="store_true", help="the transformer blocks' linears in fp8 (Fp8Linear)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "torch_ref.json"))
    args = ap.parse_args()
    if args.text_len is None:
        args.text_len = 128 if args.arch == "zimage" else 1024 if args.arch.startswith("ltx2") else 512
    if args.e2e and args.arch != "zimage":
        sys.exit("torch_ref: --e2e is only for --arch zimage")
    if args.ref_res and (args.arch not in KLEIN or args.ref_res % 16 or args.e2e):
        sys.exit("torch_ref: --ref-res (a multiple of 16) is for the flux2-klein-* forward")
    if args.iters is None:
        args.iters = 3 if args.e2e else 10
    if args.warmup is None:
        args.warmup = 1 if args.e2e else 3
    if args.modes is None:
        args.modes = "eager" if args.e2e else "eager,eager-cl" if args.vae else "eager,compile"
    modes = [m for m in args.modes.split(",") if m]
    if args.e2e and (set(modes) - {"eager", "compile"} or args.steps < 1 or args.iters < 1):
        sys.exit("torch_ref: --e2e takes --modes eager and/or compile, --steps >= 1, --iters >= 1")
    for r in args.res:
        if r % 16 or (args.arch == "minimax-h3" and r % 32):
            sys.exit(f"torch_ref: --res {r} is not a multiple of 16 (32 for minimax-h3)")

    import diffusers

    dev = "cuda"
    torch.manual_seed(args.seed)
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "diffusers": diffusers.__version__,
           "gpu": torch.cuda.get_device_name(0)}
    log(env)
    if args.e2e:
        return run_e2e(args, modes, dev, env)
    if args.vae:
        if set(modes) - {"eager", "eager-cl", "compile"}:
            sys.exit("torch_ref: --vae takes --modes eager, eager-cl and/or compile")
        return run_vae(args, modes, dev, env)
    m = build_model(args.arch, dev)
    if args.fp8:
        log(f"fp8: {to_fp8(m)} linears through torch._scaled_mm")
    params = sum(p.numel() for p in m.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in m.parameters())
    log(f"params {params / 1e9:.3f} B, weights {weight_bytes / 2**30:.2f} GiB")
    results = {"env": env, "arch": args.arch, "fp8": args.fp8, "params": params, "weight_bytes": weight_bytes, "text_len": args.text_len,
               "ref_res": args.ref_res, "runs": []}
    # LTX-2: torch.compile of the whole model did not finish within 4 min on an H100 (2026-12-06), so
    # its blocks are compiled one by one (regional compilation, diffusers' recipe for large DiTs:
    # the 48 identical blocks share one compiled graph), in place, after the eager runs
    regional = args.arch.startswith("ltx2") or args.arch == "minimax-h3"  # H3: 50 identical blocks, 33 B
    compiled = None if regional or "compile" not in modes else torch.compile(m)
    results["compile_kind"] = "regional (each transformer block)" if regional else "whole model"

    def inputs(res):
        """(the model forward's positional args, or keyword args for ltx2*; image tokens, text tokens, FLOPs)"""
        g = torch.Generator(device=dev).manual_seed(args.seed + res)
        if args.arch == "zimage":
            lat = res // 8
            x = [torch.randn(16, 1, lat, lat, device=dev, dtype=torch.bfloat16, generator=g)]
            cap = [torch.randn(args.text_len, 2560, device=dev, dtype=torch.bfloat16, generator=g)]
            n_img, n_cap = pad32((lat // 2) ** 2), pad32(args.text_len)
            return (x, torch.tensor([0.5], device=dev), cap), n_img, n_cap, zimage_flops(n_img, n_cap)
        if args.arch == "krea2":  # every text token real, the mask passed as the pipeline always does
            gs, n_txt = res // 16, args.text_len
            hs = torch.randn(1, gs * gs, 64, device=dev, dtype=torch.bfloat16, generator=g)
            enc = torch.randn(1, n_txt, 12, 2560, device=dev, dtype=torch.bfloat16, generator=g)
            pos = torch.zeros(n_txt + gs * gs, 3, device=dev)
            pos[n_txt:, 1] = torch.arange(gs, device=dev).repeat_interleave(gs).float()
            pos[n_txt:, 2] = torch.arange(gs, device=dev).repeat(gs).float()
            mask = torch.ones(1, n_txt, dtype=torch.bool, device=dev)
            t = torch.tensor([0.5], device=dev, dtype=torch.bfloat16)
            return (hs, enc, t, pos, mask), gs * gs, n_txt, krea2_flops(gs * gs, n_txt)
        if args.arch.startswith("ltx2"):  # one item as LTX2Pipeline calls it (t = 0.5), every text token real
            v23, h = args.arch == "ltx23", args.height or res
            nf, nh, nw = (args.frames - 1) // 8 + 1, h // 32, res // 32
            n_vid, n_aud, n_txt = nf * nh * nw, ltx2_audio_frames(args.frames), args.text_len
            hs = torch.randn(1, n_vid, 128, device=dev, dtype=torch.bfloat16, generator=g)
            ahs = torch.randn(1, n_aud, 128, device=dev, dtype=torch.bfloat16, generator=g)
            tw = (4096, 2048) if v23 else (3840, 3840)
            enc = torch.randn(1, n_txt, tw[0], device=dev, dtype=torch.bfloat16, generator=g)
            aenc = torch.randn(1, n_txt, tw[1], device=dev, dtype=torch.bfloat16, generator=g)
            t = torch.tensor([500.0], device=dev)
            kw = dict(hidden_states=hs, audio_hidden_states=ahs, encoder_hidden_states=enc,
                      audio_encoder_hidden_states=aenc, timestep=t, sigma=t, num_frames=nf, height=nh, width=nw,
                      fps=24.0, audio_num_frames=n_aud, use_cross_timestep=True)
            return kw, n_vid, n_txt, ltx2_flops(n_vid, n_aud, n_txt, v23)
        if args.arch == "minimax-h3":  # the forward as ditrun bench makes it: one frame, no audio, t = 0.5
            kw, n_vid = h3_image_inputs(res, args.text_len, dev, g)
            return kw, n_vid, args.text_len, h3_flops(args.text_len, n_vid)
        if args.arch in FLUX1:
            gs, n_txt = res // 16, args.text_len
            hs = torch.randn(1, gs * gs, 64, device=dev, dtype=torch.bfloat16, generator=g)
            enc = torch.randn(1, n_txt, 4096, device=dev, dtype=torch.bfloat16, generator=g)
            pooled = torch.randn(1, 768, device=dev, dtype=torch.bfloat16, generator=g)
            img_ids = torch.zeros(gs, gs, 3, device=dev)
            img_ids[..., 1] += torch.arange(gs, device=dev)[:, None]
            img_ids[..., 2] += torch.arange(gs, device=dev)[None, :]
            img_ids = img_ids.reshape(-1, 3)
            txt_ids = torch.zeros(n_txt, 3, device=dev)
            t = torch.tensor([0.5], device=dev, dtype=torch.bfloat16)
            guid = torch.tensor([3.5], device=dev, dtype=torch.bfloat16) if FLUX1[args.arch] else None
            # positional order of FluxTransformer2DModel.forward
            return (hs, enc, pooled, t, img_ids, txt_ids, guid), gs * gs, n_txt, flux1_flops(gs * gs, n_txt)
        heads, nd, ns, jd = KLEIN[args.arch]
        gs, gr, n_txt = res // 16, args.ref_res // 16, args.text_len
        n_img = gs * gs + gr * gr
        hs = torch.randn(1, n_img, 128, device=dev, dtype=torch.bfloat16, generator=g)
        enc = torch.randn(1, n_txt, jd, device=dev, dtype=torch.bfloat16, generator=g)

        def ids(t0, n):  # Flux2KleinPipeline's (T, h, w, 0): the image at T = 0, a reference at T = 10
            return torch.stack(torch.meshgrid(torch.full((1,), t0), torch.arange(float(n)), torch.arange(float(n)),
                                              torch.zeros(1), indexing="ij"), -1).reshape(-1, 4)
        img_ids = torch.cat([ids(0.0, gs)] + ([ids(10.0, gr)] if gr else [])).to(dev)
        txt_ids = torch.zeros(n_txt, 4, device=dev)
        txt_ids[:, 3] = torch.arange(n_txt)
        t = torch.tensor([0.5], device=dev, dtype=torch.bfloat16)
        fl = flux2_flops(n_img, n_txt, heads * 128, nd + ns)
        return (hs, enc, t, img_ids, txt_ids), n_img, n_txt, fl

    # eager at every size first; then compile, 1024 first (the acceptance size), as time allows
    plan = [(mode, res) for mode in modes
            for res in (sorted(args.res, key=lambda r: (r != 1024, r)) if mode == "compile" else args.res)]
    for mode, res in plan:
        if mode == "compile" and time.time() - T0 > args.compile_budget_s:
            log(f"res {res}: compile skipped (past the {args.compile_budget_s:.0f} s budget)")
            results["runs"].append({"res": res, "mode": mode, "skipped": "time budget"})
            continue
        fargs, n_img, n_cap, fl = inputs(res)
        if mode == "compile" and regional and compiled is None:
            for blk in m.transformer_blocks:
                blk.compile()
            compiled = m
        fn_m = m if mode == "eager" else compiled
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        rec = {"res": res, "mode": mode, "img_tokens": n_img, "cap_tokens": n_cap, "flops": fl}
        try:
            call = (lambda: fn_m(**fargs, return_dict=False)) if isinstance(fargs, dict) else \
                (lambda: fn_m(*fargs, return_dict=False))
            with torch.inference_mode():
                if mode == "compile":
                    tc = time.time()
                    call()
                    torch.cuda.synchronize()
                    rec["compile_s"] = time.time() - tc
                rec.update(bench(call, args.warmup, args.iters))
            rec["tflops"] = fl / rec["median_ms"] / 1e9
            rec["peak_mem_bytes"] = torch.cuda.max_memory_allocated()
            if args.profile:
                profile_call(call, f"res {res}: {mode} forward")
        except Exception as e:  # report and go on with the other sizes
            rec["error"] = repr(e)[:400]
        log(json.dumps(rec))
        results["runs"].append(rec)
        with open(args.out, "w") as fh:
            json.dump(results, fh, indent=1)

    print(f"{'res':>6} {'mode':>8} {'median ms':>10} {'TFLOP/s':>8} {'peak GiB':>9}")
    for r in results["runs"]:
        if "median_ms" in r:
            print(f"{r['res']:>6} {r['mode']:>8} {r['median_ms']:>10.2f} {r['tflops']:>8.1f} "
                  f"{r['peak_mem_bytes'] / 2**30:>9.2f}")
        else:
            print(f"{r['res']:>6} {r['mode']:>8} {r.get('error', r.get('skipped', '?'))[:60]}")


if __name__ == "__main__":
    main()
