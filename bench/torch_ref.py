"""PyTorch reference timings for `ditrun bench`: diffusers' ZImageTransformer2DModel
(--arch zimage, Z-Image-Turbo config) or Flux2Transformer2DModel (--arch flux2-klein-4b /
flux2-klein-9b, FLUX.2 [klein]'s config as anchors.py's flux2_klein4b_dit builds it) at the
same geometry (bf16, random weights, one image of RES x RES pixels and TEXT_LEN text tokens),
eager and torch.compile, timed with CUDA events after warmup (median of ITERS). Run it on the GPU machine in the same job as ditrun (bench/gpu_run.sh).

diffusers is imported from .ref/py (a `git archive` of huggingface/diffusers' src/diffusers,
never committed; see docs/PERF.md "How to benchmark on a GPU"). Based on
../shared/tools/refgen/anchors.py (same FLOP formula, same timing method).

usage: python3 bench/torch_ref.py [--arch zimage] [--res 512 1024 2048] [--text-len 128|512] [--iters 10]
         [--warmup 3] [--modes eager,compile] [--compile-budget-s 300] [--out FILE.json]
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
    """anchors.py's count: q, k, v, out and the SwiGLU FFN per token per block (2 flop per
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


# FLUX.2 [klein] transformer geometries: (heads, double blocks, single blocks, joint_attention_dim)
KLEIN = {"flux2-klein-4b": (24, 5, 20, 7680), "flux2-klein-9b": (32, 8, 24, 12288)}


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
    """Random-weight bf16 model at the real geometry (construction as anchors.py's parts)."""
    if arch == "zimage":
        from diffusers import ZImageTransformer2DModel
        with torch.device(dev):
            m = ZImageTransformer2DModel(axes_lens=[1536, 512, 512])  # Z-Image-Turbo's config; others are defaults
    else:
        from diffusers import Flux2Transformer2DModel
        heads, nd, ns, jd = KLEIN[arch]
        with torch.device(dev):
            m = Flux2Transformer2DModel(patch_size=1, in_channels=128, num_layers=nd, num_single_layers=ns,
                                        attention_head_dim=128, num_attention_heads=heads, joint_attention_dim=jd,
                                        mlp_ratio=3.0, axes_dims_rope=(32, 32, 32, 32), rope_theta=2000,
                                        guidance_embeds=False)
    return m.to(torch.bfloat16).eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="zimage", choices=["zimage"] + sorted(KLEIN))
    ap.add_argument("--res", type=int, nargs="+", default=[1024])
    ap.add_argument("--text-len", type=int, default=None, help="default 128 (zimage), 512 (flux2-klein-*)")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--compile-budget-s", type=float, default=300.0,
                    help="skip torch.compile for further sizes once the script has run this long")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "torch_ref.json"))
    args = ap.parse_args()
    if args.text_len is None:
        args.text_len = 128 if args.arch == "zimage" else 512
    modes = [m for m in args.modes.split(",") if m]
    for r in args.res:
        if r % 16:
            sys.exit(f"torch_ref: --res {r} is not a multiple of 16")

    import diffusers

    dev = "cuda"
    torch.manual_seed(args.seed)
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "diffusers": diffusers.__version__,
           "gpu": torch.cuda.get_device_name(0)}
    log(env)
    m = build_model(args.arch, dev)
    params = sum(p.numel() for p in m.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in m.parameters())
    log(f"params {params / 1e9:.3f} B, weights {weight_bytes / 2**30:.2f} GiB")
    results = {"env": env, "arch": args.arch, "params": params, "weight_bytes": weight_bytes, "text_len": args.text_len, "runs": []}
    compiled = torch.compile(m) if "compile" in modes else None

    def inputs(res):
        """(positional args of the model's forward, image tokens, text tokens, FLOPs)"""
        g = torch.Generator(device=dev).manual_seed(args.seed + res)
        if args.arch == "zimage":
            lat = res // 8
            x = [torch.randn(16, 1, lat, lat, device=dev, dtype=torch.bfloat16, generator=g)]
            cap = [torch.randn(args.text_len, 2560, device=dev, dtype=torch.bfloat16, generator=g)]
            n_img, n_cap = pad32((lat // 2) ** 2), pad32(args.text_len)
            return (x, torch.tensor([0.5], device=dev), cap), n_img, n_cap, zimage_flops(n_img, n_cap)
        heads, nd, ns, jd = KLEIN[args.arch]
        gs, n_txt = res // 16, args.text_len
        hs = torch.randn(1, gs * gs, 128, device=dev, dtype=torch.bfloat16, generator=g)
        enc = torch.randn(1, n_txt, jd, device=dev, dtype=torch.bfloat16, generator=g)
        img_ids = torch.stack(torch.meshgrid(torch.zeros(1), torch.arange(float(gs)), torch.arange(float(gs)),
                                             torch.zeros(1), indexing="ij"), -1).reshape(-1, 4).to(dev)
        txt_ids = torch.zeros(n_txt, 4, device=dev)
        txt_ids[:, 3] = torch.arange(n_txt)
        t = torch.tensor([0.5], device=dev, dtype=torch.bfloat16)
        fl = flux2_flops(gs * gs, n_txt, heads * 128, nd + ns)
        return (hs, enc, t, img_ids, txt_ids), gs * gs, n_txt, fl

    # eager at every size first; then compile, 1024 first (the acceptance size), as time allows
    plan = [(mode, res) for mode in modes
            for res in (sorted(args.res, key=lambda r: (r != 1024, r)) if mode == "compile" else args.res)]
    for mode, res in plan:
        if mode == "compile" and time.time() - T0 > args.compile_budget_s:
            log(f"res {res}: compile skipped (past the {args.compile_budget_s:.0f} s budget)")
            results["runs"].append({"res": res, "mode": mode, "skipped": "time budget"})
            continue
        fargs, n_img, n_cap, fl = inputs(res)
        fn_m = m if mode == "eager" else compiled
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        rec = {"res": res, "mode": mode, "img_tokens": n_img, "cap_tokens": n_cap, "flops": fl}
        try:
            with torch.inference_mode():
                if mode == "compile":
                    tc = time.time()
                    fn_m(*fargs, return_dict=False)
                    torch.cuda.synchronize()
                    rec["compile_s"] = time.time() - tc
                rec.update(bench(lambda: fn_m(*fargs, return_dict=False), args.warmup, args.iters))
            rec["tflops"] = fl / rec["median_ms"] / 1e9
            rec["peak_mem_bytes"] = torch.cuda.max_memory_allocated()
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
