"""Trains a LoRA for a model folder that train.py wrote (the shipped models/shapes-128): the same
captions drawn in another style (shapes.render's "outlined": each shape as its outline, the
background showing through), learned by low-rank updates of the transformer's attention and
feed-forward projections while every base weight and the text encoder stay frozen. Writes the
LoRA in the diffusers/PEFT layout ("transformer.<module>.lora_A.weight" [r, in] and
".lora_B.weight" [out, r], alpha / r folded into B), which ditrun's --lora reads.

    python3 lora.py --model ../../models/shapes-128 --out /tmp/outline [--steps 1500] [--rank 16]

Scores on the held-out captions with the PyTorch sampler, with and without the LoRA: the share
of shapes whose middle shows the background (shapes.hollow) and the caption checks
(shapes.score: colors, count; a hollow shape is not judged by its kind)."""
import argparse
import json
import math
import os
import re
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import modules
import sample
import shapes
import st
import tok
import train

# the projections the LoRA changes, by their module names (diffusers' names)
TARGETS = re.compile(r"^(noise_refiner|context_refiner|layers)\.\d+\.(attention\.(to_q|to_k|to_v|to_out\.0)|"
                     r"feed_forward\.(w1|w2|w3))$")


class LoRALinear(nn.Module):
    """base(x) + scale * B(A(x)), base frozen; B starts at zero so training starts at the base."""

    def __init__(self, base, rank, alpha):
        super().__init__()
        self.base = base.requires_grad_(False)
        self.A = nn.Parameter(torch.randn(rank, base.in_features) / math.sqrt(base.in_features))
        self.B = nn.Parameter(torch.zeros(base.out_features, rank))
        self.scale = alpha / rank

    def forward(self, x):
        return self.base(x) + F.linear(F.linear(x, self.A.to(x.dtype)), self.B.to(x.dtype)) * self.scale


def add_lora(dit, rank, alpha):
    """Wraps every target projection of dit; returns {module name: LoRALinear}."""
    wrapped = {}
    for name, mod in list(dit.named_modules()):
        if isinstance(mod, nn.Linear) and TARGETS.match(name):
            parent, child = name.rsplit(".", 1)
            w = LoRALinear(mod, rank, alpha)
            setattr(dit.get_submodule(parent), child, w)
            wrapped[name] = w
    return wrapped


def export(path, wrapped):
    out = {}
    for name, w in wrapped.items():
        out[f"transformer.{name}.lora_A.weight"] = w.A.detach().float()
        out[f"transformer.{name}.lora_B.weight"] = w.B.detach().float() * w.scale
    st.save(path, out, dtype="BF16")  # as LoRAs are published; half the bytes of F32
    return sum(t.numel() for t in out.values())


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


@torch.no_grad()
def evaluate(te, dit, vae, tk, vcfg, dev, n=100):
    scenes = shapes.held_out_scenes()[:n]
    imgs = sample.generate(te, dit, vae, tk, [s["caption"] for s in scenes], vcfg["scaling_factor"],
                           vcfg["shift_factor"], seeds=[42 + i for i in range(len(scenes))], dev=dev)
    hol = [shapes.hollow(im)[0] for im in imgs]
    res = [shapes.score(s, im) for s, im in zip(scenes, imgs)]
    return {"hollow": float(np.mean(hol)), "color": float(np.mean([r["color"] for r in res])),
            "count": float(np.mean([r["count"] for r in res])), "n": len(scenes)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="the model folder train.py wrote")
    p.add_argument("--out", required=True, help="folder for outline.safetensors and its scores")
    p.add_argument("--style", default="outlined")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--alpha", type=float, default=16.0)
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--n-data", type=int, default=50000)
    p.add_argument("--cap-dropout", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--eval-n", type=int, default=100, help="held-out captions scored with and without the LoRA")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = p.parse_args()
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    torch.backends.cuda.matmul.allow_tf32 = True
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    tk = tok.load(os.path.join(a.model, "tokenizer"))
    vae, vcfg = train.load_vae(a.model, dev)
    tcfg = train.read_json(a.model, "text_encoder", "config.json")
    dcfg = train.read_json(a.model, "transformer", "config.json")
    te = train.load_weights(modules.Qwen3Encoder(tcfg), a.model, "text_encoder", "model.safetensors").to(dev).eval()
    dit = train.load_weights(modules.ZImageDiT(dcfg), a.model, "transformer",
                             "diffusion_pytorch_model.safetensors").to(dev)
    te.requires_grad_(False)
    dit.requires_grad_(False)
    base = evaluate(te, dit, vae, tk, vcfg, dev, a.eval_n)
    log(f"base model on held-out captions: {base}")
    wrapped = add_lora(dit, a.rank, a.alpha)
    params = [q for w in wrapped.values() for q in (w.A, w.B)]
    log(f"LoRA rank {a.rank} on {len(wrapped)} projections: {sum(q.numel() for q in params)} parameters")
    data_args = argparse.Namespace(seed=a.seed, n_data=a.n_data)
    lat, ids, lens, _, _ = train.build_dataset(data_args, vae, tk, dev, (vcfg["shift_factor"], vcfg["scaling_factor"]),
                                               style=a.style)
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.99), weight_decay=0.0)
    g = torch.Generator(device=dev).manual_seed(a.seed)
    empty = torch.tensor(tk.encode(tok.chat("")), dtype=torch.int32, device=dev)
    pad = tk.special["<|endoftext|>"]
    t1 = time.time()
    for step in range(a.steps):
        x0, cid, clen, sigma, noise, xt = train.draw_batch(lat, ids, lens, a.batch, g, dev, empty, pad, a.cap_dropout)
        for gr in opt.param_groups:
            gr["lr"] = train.lr_at(step, a.lr, a.warmup)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            with torch.no_grad():
                cap = te.hidden_last_but_one(cid)
            out = dit(xt, 1 - sigma, cap, clen)
        loss = F.mse_loss(out.float(), x0 - noise)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % 250 == 0 or step == a.steps - 1:
            log(f"lora step {step}: loss {loss.item():.4f} ({time.time() - t1:.0f} s)")
    path = os.path.join(a.out, f"{a.style.replace('outlined', 'outline')}.safetensors")
    n = export(path, wrapped)
    with torch.no_grad():  # score what was written: the update as the file holds it (fp32)
        for w in wrapped.values():
            w.scale = 1.0
            w.B.mul_(a.alpha / a.rank)
    lora = evaluate(te, dit, vae, tk, vcfg, dev, a.eval_n)
    log(f"with the LoRA on held-out captions: {lora}")
    json.dump({"base": base, "lora": lora, "args": vars(a), "params": n, "train_s": time.time() - t1,
               "torch": torch.__version__,
               "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
               "command": "python3 tools/train/lora.py " + " ".join(sys.argv[1:])},
              open(os.path.join(a.out, "lora_eval.json"), "w"), indent=2)
    log(f"wrote {path} ({n} values) in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
