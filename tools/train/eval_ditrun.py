"""Scores a model folder on the held-out captions with ditrun's own images: runs
`ditrun generate` for each caption (128x128, 8 steps, guidance 0, seed 42 + i), checks the
pixels against the caption (shapes.score: background and shape colors, number and kind of
shapes) and prints the hit rates; --json writes them with every caption's result.
--compare also runs the PyTorch sampler (sample.py) on the same prompts and seeds and reports
how far ditrun's images are from it, in 8-bit levels.

    python3 tools/train/eval_ditrun.py --model models/shapes-128 --ditrun build/ditrun [--json F]"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from PIL import Image

import shapes


def run_ditrun(ditrun, model, prompt, seed, path, extra):
    cmd = [ditrun, "generate", "-m", model, "-p", prompt, "-W", "128", "-H", "128", "--steps", "8", "--seed",
           str(seed), "-o", path, "--overwrite"] + extra
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"ditrun failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr}")
    return np.asarray(Image.open(path).convert("RGB"))


def pytorch_images(model, prompts, seeds):
    import torch
    import modules
    import sample
    import st
    import tok

    torch.set_grad_enabled(False)
    sub = lambda *p: os.path.join(model, *p)
    load = lambda m, f: (m.load_state_dict(st.load(f)), m.eval())[1]
    te = load(modules.Qwen3Encoder(json.load(open(sub("text_encoder", "config.json")))),
              sub("text_encoder", "model.safetensors"))
    dit = load(modules.ZImageDiT(json.load(open(sub("transformer", "config.json")))),
               sub("transformer", "diffusion_pytorch_model.safetensors"))
    vcfg = json.load(open(sub("vae", "config.json")))
    vae = load(modules.AutoencoderKL(vcfg), sub("vae", "diffusion_pytorch_model.safetensors"))
    tj = json.load(open(sub("tokenizer", "tokenizer.json")))
    tk = tok.Tokenizer(tj["model"]["vocab"], [tuple(m) for m in tj["model"]["merges"]])
    return sample.generate(te, dit, vae, tk, prompts, vcfg["scaling_factor"], vcfg["shift_factor"], seeds, "cpu")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--ditrun", default="build/ditrun")
    p.add_argument("--json", help="write the rates and per-caption results here")
    p.add_argument("--save", help="write a contact sheet PNG of the first 40 images here")
    p.add_argument("--compare", action="store_true", help="also compare with the PyTorch sampler")
    p.add_argument("--ditrun-arg", action="append", default=[], help="extra argument for ditrun generate")
    a = p.parse_args()
    scenes = shapes.held_out_scenes()
    seeds = [42 + i for i in range(len(scenes))]
    imgs, t0 = [], time.time()
    with tempfile.TemporaryDirectory() as d:
        for i, (s, seed) in enumerate(zip(scenes, seeds)):
            imgs.append(run_ditrun(a.ditrun, a.model, s["caption"], seed, os.path.join(d, f"{i}.png"), a.ditrun_arg))
    secs = (time.time() - t0) / len(scenes)
    res = [dict(shapes.score(s, im), caption=s["caption"], kind=s["kind"]) for s, im in zip(scenes, imgs)]
    rate = {k: sum(r[k] for r in res) / len(res) for k in ("color", "shape", "count")}
    by_kind = {kind: {k: float(np.mean([r[k] for r in res if r["kind"] == kind])) for k in ("color", "shape", "count")}
               for kind in ("group", "pair")}
    print(f"held-out captions: {len(res)} ({sum(r['kind'] == 'group' for r in res)} group, "
          f"{sum(r['kind'] == 'pair' for r in res)} pair); ditrun {secs:.2f} s per image (whole command)")
    print(f"hit rate: color {rate['color']:.0%}  shape {rate['shape']:.0%}  count {rate['count']:.0%}")
    for kind, r in by_kind.items():
        print(f"  {kind:5s}: color {r['color']:.0%}  shape {r['shape']:.0%}  count {r['count']:.0%}")
    out = {"n": len(res), **rate, "by_kind": by_kind, "seconds_per_image": secs, "results": res}
    if a.compare:
        ref = pytorch_images(a.model, [s["caption"] for s in scenes], seeds)
        diff = np.abs(np.stack(imgs).astype(int) - ref.astype(int))
        print(f"ditrun vs PyTorch sampler: max {diff.max()} levels, mean {diff.mean():.4f}, "
              f"{(diff > 1).mean():.2%} of values off by more than one level")
        out["vs_pytorch"] = {"max": int(diff.max()), "mean": float(diff.mean())}
    if a.save:
        rows = [np.concatenate(imgs[r * 10:(r + 1) * 10], 1) for r in range(min(4, len(imgs) // 10))]
        Image.fromarray(np.concatenate(rows, 0)).save(a.save)
    if a.json:
        json.dump(out, open(a.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
