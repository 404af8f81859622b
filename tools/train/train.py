"""Trains ditrun's default model, a small text-to-image model of the Z-Image family, on the
procedural shapes data set (shapes.py), and writes it as a diffusers ZImagePipeline folder.

Stages: (1) a byte-level BPE tokenizer on the caption corpus; (2) the AutoencoderKL on rendered
scenes; (3) a data set of latents and token ids; (4) the Z-Image transformer and the Qwen3
text encoder together, with flow matching, keeping an exponential moving average of their
weights. The EMA weights, rounded to bf16, are what gets written. Milestone folders are written
on the way (--milestones), each the same as a run stopped at that step (constant learning rate
after warm-up), and scored on the held-out captions with the PyTorch sampler (sample.py).

--resume DIR continues from a folder this script wrote: its tokenizer, VAE (weights, latent
shift/scale) and architecture are kept, stages 1-2 are skipped, and stage 4 starts from its text
encoder and transformer weights (the EMA too) for --dit-steps more steps.

    python3 train.py --out OUT_DIR [--seed 0] [--device cuda]      (see --help; README.md)"""
import argparse
import json
import math
import os
import shutil
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

import modules
import sample
import shapes
import st
import tok

CAP_TOKENS = 32  # every training caption fits one caption block of the transformer


def te_config(n_ids, a):
    L = a.te_layers
    return {
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": None, "dtype": "bfloat16", "eos_token_id": None, "head_dim": a.te_hidden // a.te_heads,
        "hidden_act": "silu", "hidden_size": a.te_hidden, "initializer_range": 0.02,
        "intermediate_size": 3 * a.te_hidden, "layer_types": ["full_attention"] * L,
        "max_position_embeddings": 1024, "max_window_layers": L, "model_type": "qwen3",
        "num_attention_heads": a.te_heads, "num_hidden_layers": L, "num_key_value_heads": a.te_heads // 2,
        "pad_token_id": None, "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}, "sliding_window": None,
        "tie_word_embeddings": True, "transformers_version": "5.17.0", "use_cache": True,
        "use_sliding_window": False, "vocab_size": (n_ids + 63) // 64 * 64,
    }


def dit_config(a, latent_channels):
    hd = a.dit_dim // a.dit_heads
    third = hd // 8 * 2  # axes (t, h, w): a quarter of the head to the sequence axis, the rest split
    axes = [third, (hd - third) // 2, hd - third - (hd - third) // 2]
    return {
        "_class_name": "ZImageTransformer2DModel", "_diffusers_version": "0.40.0.dev0",
        "all_f_patch_size": [1], "all_patch_size": [2], "axes_dims": axes, "axes_lens": [1024, 64, 64],
        "cap_feat_dim": a.te_hidden, "dim": a.dit_dim, "in_channels": latent_channels, "n_heads": a.dit_heads,
        "n_kv_heads": a.dit_heads, "n_layers": a.dit_layers, "n_refiner_layers": 1, "norm_eps": 1e-05,
        "qk_norm": True, "rope_theta": 256.0, "siglip_feat_dim": None, "t_scale": 1000.0,
    }


def vae_config(a):
    return {
        "_class_name": "AutoencoderKL", "_diffusers_version": "0.40.0.dev0", "act_fn": "silu",
        "block_out_channels": [32, 64, 64, 64], "down_block_types": ["DownEncoderBlock2D"] * 4,
        "force_upcast": True, "in_channels": 3, "latent_channels": a.latent_channels, "latents_mean": None,
        "latents_std": None, "layers_per_block": 1, "mid_block_add_attention": True, "norm_num_groups": 16,
        "out_channels": 3, "sample_size": shapes.SIZE, "scaling_factor": 1.0, "shift_factor": 0.0,
        "up_block_types": ["UpDecoderBlock2D"] * 4, "use_post_quant_conv": False, "use_quant_conv": False,
    }


SCHEDULER = {
    "_class_name": "FlowMatchEulerDiscreteScheduler", "_diffusers_version": "0.40.0.dev0",
    "base_image_seq_len": 256, "base_shift": 0.5, "invert_sigmas": False, "max_image_seq_len": 4096,
    "max_shift": 1.15, "num_train_timesteps": 1000, "shift": 3.0, "shift_terminal": None,
    "stochastic_sampling": False, "time_shift_type": "exponential", "use_beta_sigmas": False,
    "use_dynamic_shifting": False, "use_exponential_sigmas": False, "use_karras_sigmas": False,
}
MODEL_INDEX = {
    "_class_name": "ZImagePipeline", "_diffusers_version": "0.40.0.dev0",
    "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"], "text_encoder": ["transformers", "Qwen3ForCausalLM"],
    "tokenizer": ["transformers", "Qwen2Tokenizer"], "transformer": ["diffusers", "ZImageTransformer2DModel"],
    "vae": ["diffusers", "AutoencoderKL"],
}


# options that --resume ignores: the tokenizer, the VAE and the architecture come from the folder
RESUME_KEEPS = ("latent_channels", "vae_steps", "vae_batch", "vae_lr", "kl_weight", "te_hidden", "te_heads",
                "te_layers", "dit_dim", "dit_heads", "dit_layers")


def all_captions():
    S = shapes
    caps = [S.group_caption(n, c, s, bg) for n in (1, 2, 3) for c in S.COLOR_NAMES for s in S.SHAPES
            for bg in S.COLOR_NAMES if bg != c]
    caps += [S.pair_caption(c1, s1, r, c2, s2, bg) for c1 in S.COLOR_NAMES for s1 in S.SHAPES for r in S.RELATIONS
             for c2 in S.COLOR_NAMES for s2 in S.SHAPES for bg in S.COLOR_NAMES if bg not in (c1, c2)]
    return caps + [""]


def init_weights(module, std=0.02):
    for name, p in module.named_parameters():
        if p.dim() >= 2 or "pad_token" in name:
            torch.nn.init.normal_(p, std=std)
        elif name.endswith("bias"):
            torch.nn.init.zeros_(p)
    return module


def lr_at(step, base, warmup):
    return base * min(1.0, (step + 1) / max(warmup, 1))


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def read_json(*path):
    with open(os.path.join(*path)) as f:
        return json.load(f)


def load_weights(module, *path):
    module.load_state_dict(st.load(os.path.join(*path)))
    return module


def load_vae(folder, dev):
    """--resume: the folder's autoencoder and its config (with the latent shift/scale it holds)."""
    cfg = read_json(folder, "vae", "config.json")
    vae = load_weights(modules.AutoencoderKL(cfg), folder, "vae", "diffusion_pytorch_model.safetensors")
    return vae.to(dev).eval(), cfg


# ---------------------------------------------------------------------------------------------


def train_vae(a, dev):
    cfg = vae_config(a)
    vae = modules.AutoencoderKL(cfg).to(dev)
    opt = torch.optim.AdamW(vae.parameters(), lr=a.vae_lr, betas=(0.9, 0.99), weight_decay=0.0)
    rng = np.random.default_rng(a.seed + 1)
    t0 = time.time()
    for step in range(a.vae_steps):
        scenes = [shapes.random_training_scene(rng) for _ in range(a.vae_batch)]
        x = shapes.render([(s["bg"], shapes.layout(s, rng)) for s in scenes], dev)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a.vae_lr, 200)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            mean, logvar = vae.encode(x)
            z = mean + torch.randn_like(mean) * (0.5 * logvar).exp()
            y = vae.decode(z).float()
        rec = F.mse_loss(y, x) + 0.5 * (y - x).abs().mean()
        kl = 0.5 * (mean.float() ** 2 + logvar.float().exp() - 1 - logvar.float()).mean()
        loss = rec + a.kl_weight * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(vae.parameters(), 1.0)
        opt.step()
        if step % 500 == 0 or step == a.vae_steps - 1:
            psnr = -10 * math.log10(max(F.mse_loss(y.clamp(-1, 1), x).item() / 4, 1e-12))
            log(f"vae step {step}: rec {rec.item():.5f} kl {kl.item():.3f} psnr {psnr:.1f} dB ({time.time() - t0:.0f} s)")
    return vae.eval(), cfg


@torch.no_grad()
def build_dataset(a, vae, tk, dev, norm=None, style="filled"):
    """N training scenes -> latents (the encoder's mean), their scale/shift, token ids and lengths.
    norm = (shift, scale) to use instead of the data set's own (--resume keeps the folder's);
    style: how the scenes are drawn (shapes.render)."""
    rng = np.random.default_rng(a.seed + 2)
    lat, ids, lens = [], torch.full((a.n_data, CAP_TOKENS), tk.special["<|endoftext|>"], dtype=torch.int32), []
    t0 = time.time()
    for start in range(0, a.n_data, 1024):
        n = min(1024, a.n_data - start)
        scenes = [shapes.random_training_scene(rng) for _ in range(n)]
        x = shapes.render([(s["bg"], shapes.layout(s, rng)) for s in scenes], dev, style)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            mean, _ = vae.encode(x)
        lat.append(mean.float())
        for j, s in enumerate(scenes):
            t = tk.encode(tok.chat(s["caption"]))
            assert len(t) <= CAP_TOKENS, s["caption"]
            ids[start + j, : len(t)] = torch.tensor(t, dtype=torch.int32)
            lens.append(len(t))
        if start == 0:  # what the autoencoder alone keeps: the check on its reconstructions
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
                y = vae.decode(mean[:200]).float()
            u8 = ((y / 2 + 0.5).clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
            res = [shapes.score(s, im) for s, im in zip(scenes[:200], u8)]
            log("vae reconstructions of 200 training scenes: " +
                " ".join(f"{k} {np.mean([r[k] for r in res]):.0%}" for k in ("color", "shape", "count")))
    lat = torch.cat(lat)
    shift = lat.mean().item()
    scale = 1.0 / (lat - shift).std().item()
    log(f"data: {a.n_data} scenes encoded in {time.time() - t0:.0f} s; latent shift {shift:.4f} scale {scale:.4f}")
    if norm:
        shift, scale = norm
        log(f"data: normalized with the resumed folder's shift {shift:.4f} scale {scale:.4f}")
    return ((lat - shift) * scale).to(torch.bfloat16), ids.to(dev), torch.tensor(lens, device=dev), shift, scale


def sample_sigmas(n, dev, g):
    """Training noise levels: logit-normal, shifted like the sampling schedule (shift 3)."""
    s = torch.sigmoid(torch.randn(n, device=dev, generator=g))
    return 3.0 * s / (1.0 + 2.0 * s)


def draw_batch(lat, ids, lens, n, g, dev, empty, pad, cap_dropout):
    """A flow-matching batch: clean latents x0, caption ids and lengths (cap_dropout of them the
    empty prompt, for classifier-free guidance), noise levels, the noise and the noised latents."""
    idx = torch.randint(0, lat.shape[0], (n,), device=dev, generator=g)
    x0 = lat[idx].float()
    cid, clen = ids[idx].long(), lens[idx].clone()
    drop = torch.rand(n, device=dev, generator=g) < cap_dropout
    if drop.any():
        cid[drop] = pad
        cid[drop, : len(empty)] = empty.long()
        clen[drop] = len(empty)
    sigma = sample_sigmas(n, dev, g)
    noise = torch.randn(x0.shape, device=dev, generator=g)
    xt = (1 - sigma[:, None, None, None]) * x0 + sigma[:, None, None, None] * noise
    return x0, cid, clen, sigma, noise, xt


class EMA:
    def __init__(self, mods, decay):
        self.decay = decay
        self.params = [p for m in mods for p in m.parameters()]
        self.shadow = [p.detach().clone().float() for p in self.params]

    @torch.no_grad()
    def update(self, decay):
        if hasattr(torch, "_foreach_lerp_"):
            torch._foreach_lerp_(self.shadow, [p.detach().float() for p in self.params], 1 - decay)
            return
        for s, p in zip(self.shadow, self.params):
            s.lerp_(p.detach().float(), 1 - decay)

    @torch.no_grad()
    def copy_to(self, mods_copy):
        for p, s in zip([p for m in mods_copy for p in m.parameters()], self.shadow):
            p.copy_(s)


def train_dit(a, data, tk, vae, vcfg, dev):
    lat, ids, lens, shift, scale = data
    done = 0  # transformer steps already trained (--resume)
    if a.resume:
        tcfg = read_json(a.resume, "text_encoder", "config.json")
        dcfg = read_json(a.resume, "transformer", "config.json")
        te = load_weights(modules.Qwen3Encoder(tcfg), a.resume, "text_encoder", "model.safetensors").to(dev)
        dit = load_weights(modules.ZImageDiT(dcfg), a.resume, "transformer",
                           "diffusion_pytorch_model.safetensors").to(dev)
        done = read_json(a.resume, "training_config.json")["dit_steps_done"]
        log(f"resumed from {a.resume} at transformer step {done}")
    else:
        tcfg = te_config(tk.n_ids, a)
        dcfg = dit_config(a, a.latent_channels)
        te = init_weights(modules.Qwen3Encoder(tcfg)).to(dev)
        dit = init_weights(modules.ZImageDiT(dcfg)).to(dev)
        with torch.no_grad():  # adaLN-zero: every modulated block starts as the identity, the output at 0
            for n, p in dit.named_parameters():
                if "adaLN_modulation" in n or n.startswith("all_final_layer.2-1.linear"):
                    p.zero_()
    params = list(te.parameters()) + list(dit.parameters())
    log(f"text encoder {sum(p.numel() for p in te.parameters()) / 1e6:.2f} M params, transformer "
        f"{sum(p.numel() for p in dit.parameters()) / 1e6:.2f} M params")
    fused = {"fused": True} if dev.type == "cuda" else {}
    opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.99), weight_decay=0.0, **fused)
    ema = EMA([te, dit], a.ema)
    g = torch.Generator(device=dev).manual_seed(a.seed + 3 + done)  # new batches and noise after a resume
    empty = torch.tensor(tk.encode(tok.chat("")), dtype=torch.int32, device=dev)
    milestones = sorted(set(int(m) for m in a.milestones.split(",") if m) | {a.dit_steps})
    t0 = time.time()
    for step in range(a.dit_steps):
        x0, cid, clen, sigma, noise, xt = draw_batch(lat, ids, lens, a.batch, g, dev, empty,
                                                     tk.special["<|endoftext|>"], a.cap_dropout)
        for gr in opt.param_groups:
            gr["lr"] = lr_at(step, a.lr, a.warmup)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            cap = te.hidden_last_but_one(cid)
            out = dit(xt, 1 - sigma, cap, clen)
        loss = F.mse_loss(out.float(), x0 - noise)  # the model predicts x0 - noise (ditrun negates it)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        ema.update(min(a.ema, (1 + done + step) / (10 + done + step)))
        if step % 500 == 0:
            log(f"dit step {done + step}: loss {loss.item():.4f} ({time.time() - t0:.0f} s)")
        if step + 1 in milestones:  # folders and logs count all the steps, those before a resume too
            folder = f"{a.out.rstrip('/')}-step{done + step + 1}" if step + 1 != a.dit_steps else a.out
            te_e, dit_e = modules.Qwen3Encoder(tcfg).to(dev), modules.ZImageDiT(dcfg).to(dev)
            ema.copy_to([te_e, dit_e])
            export(folder, a, tk, te_e, tcfg, dit_e, dcfg, vae, vcfg, shift, scale, done + step + 1)
            evaluate(folder, te_e, dit_e, vae, tk, shift, scale, dev, done + step + 1)
            del te_e, dit_e


def export(folder, a, tk, te, tcfg, dit, dcfg, vae, vcfg, shift, scale, step):
    for sub in ("scheduler", "text_encoder", "tokenizer", "transformer", "vae"):
        os.makedirs(os.path.join(folder, sub), exist_ok=True)
    for m in (te, dit, vae):
        st.round_bf16_(m)
    dump = lambda obj, *p: json.dump(obj, open(os.path.join(folder, *p), "w"), indent=2)
    dump(MODEL_INDEX, "model_index.json")
    dump(SCHEDULER, "scheduler", "scheduler_config.json")
    tk.save(os.path.join(folder, "tokenizer"))
    dump(tcfg, "text_encoder", "config.json")
    st.save(os.path.join(folder, "text_encoder", "model.safetensors"), te.state_dict())
    dump(dcfg, "transformer", "config.json")
    st.save(os.path.join(folder, "transformer", "diffusion_pytorch_model.safetensors"), dit.state_dict())
    vc = dict(vcfg, scaling_factor=round(scale, 4), shift_factor=round(shift, 4))
    dump(vc, "vae", "config.json")
    st.save(os.path.join(folder, "vae", "diffusion_pytorch_model.safetensors"), vae.state_dict())
    unused = RESUME_KEEPS if a.resume else ()  # taken from the resumed folder, not from these options
    args = {k: v for k, v in vars(a).items() if k not in ("out", "device", *unused)}
    flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in args.items() if v != "")
    dump({"command": f"python3 tools/train/train.py --out {folder} {flags}",
          "args": args, "dit_steps_done": step, "torch": torch.__version__,
          "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
          **({"resumed_from": read_json(a.resume, "training_config.json")} if a.resume else {})},
         "training_config.json")
    log(f"wrote {folder} (step {step})")


@torch.no_grad()
def evaluate(folder, te, dit, vae, tk, shift, scale, dev, step):
    """Held-out hit rates with the PyTorch sampler (8 steps, guidance 0, seed 42 + i)."""
    vcfg = json.load(open(os.path.join(folder, "vae", "config.json")))
    scenes = shapes.held_out_scenes()
    imgs = sample.generate(te, dit, vae, tk, [s["caption"] for s in scenes], vcfg["scaling_factor"],
                           vcfg["shift_factor"], seeds=[42 + i for i in range(len(scenes))], dev=dev)
    res = [shapes.score(s, im) for s, im in zip(scenes, imgs)]
    rate = {k: sum(r[k] for r in res) / len(res) for k in ("color", "shape", "count")}
    log(f"held-out ({len(res)} captions) at step {step}: color {rate['color']:.0%} shape {rate['shape']:.0%} "
        f"count {rate['count']:.0%}")
    json.dump({"step": step, "n": len(res), **rate}, open(os.path.join(folder, "eval_pytorch.json"), "w"))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="model folder to write")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--latent-channels", type=int, default=8)
    p.add_argument("--vae-steps", type=int, default=3000)
    p.add_argument("--vae-batch", type=int, default=64)
    p.add_argument("--vae-lr", type=float, default=3e-4)
    p.add_argument("--kl-weight", type=float, default=1e-6)
    p.add_argument("--n-data", type=int, default=200000)
    p.add_argument("--te-hidden", type=int, default=128)
    p.add_argument("--te-heads", type=int, default=4)
    p.add_argument("--te-layers", type=int, default=3)
    p.add_argument("--dit-dim", type=int, default=256)
    p.add_argument("--dit-heads", type=int, default=4)
    p.add_argument("--dit-layers", type=int, default=4)
    p.add_argument("--dit-steps", type=int, default=3000)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--warmup", type=int, default=500)
    p.add_argument("--ema", type=float, default=0.999)
    p.add_argument("--cap-dropout", type=float, default=0.1)
    p.add_argument("--milestones", default="", help="comma-separated steps at which to also write step<N>/")
    p.add_argument("--resume", default="", help="model folder to continue training from (its tokenizer, VAE, architecture, weights)")
    a = p.parse_args()
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    if a.resume:  # the folder's tokenizer and autoencoder, so token ids and latents stay what they were
        tk = tok.load(os.path.join(a.resume, "tokenizer"))
        log(f"tokenizer: {len(tk.vocab)} entries, {len(tk.merges)} merges, from {a.resume}")
        vae, vcfg = load_vae(a.resume, dev)
        norm = (vcfg["shift_factor"], vcfg["scaling_factor"])
    else:
        tk = tok.train([tok.chat(c) for c in all_captions()])
        log(f"tokenizer: {len(tk.vocab)} entries, {len(tk.merges)} merges")
        vae, vcfg = train_vae(a, dev)
        norm = None
    data = build_dataset(a, vae, tk, dev, norm)
    train_dit(a, data, tk, vae, vcfg, dev)
    log(f"done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
