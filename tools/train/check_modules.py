"""Checks modules.py against the diffusers/transformers reference fixtures of zimage-tiny:
the transformer case (two items, run one at a time: batch padding is masked out of the
reference, so each item's output is its own), the VAE decoder case and the text encoder's
hidden_states[-2]. Usage: python3 check_modules.py [../../tests/fixtures/models/zimage-tiny]"""
import json
import os
import sys

import torch

import modules
import st

torch.set_grad_enabled(False)


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def load_into(module, path):
    sd = st.load(path)
    mine = module.state_dict()
    missing = sorted(set(mine) - set(sd))
    extra = sorted(set(sd) - set(mine))
    if missing or extra:
        raise SystemExit(f"{path}: names differ: missing {missing[:5]} extra {extra[:5]}")
    module.load_state_dict(sd)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "../../tests/fixtures/models/zimage-tiny")
    comp = st.load(os.path.join(d, "components.safetensors"))
    worst = 0.0

    cfg = json.load(open(os.path.join(d, "transformer/config.json")))
    dit = modules.ZImageDiT(cfg).eval()
    load_into(dit, os.path.join(d, "transformer/diffusion_pytorch_model.safetensors"))
    for i in range(2):
        x = comp[f"dit_x{i}"][:, 0][None]
        cap = comp[f"dit_cap{i}"][None]
        t = comp["dit_t"][i : i + 1]
        out = dit(x, t, cap, torch.tensor([cap.shape[1]]))[0]
        e = rel(out, comp[f"dit_out{i}"][:, 0])
        worst = max(worst, e)
        print(f"transformer item {i}: relative error {e:.2e}")

    vcfg = json.load(open(os.path.join(d, "vae/config.json")))
    vae = modules.AutoencoderKL(vcfg).eval()
    load_into(vae, os.path.join(d, "vae/diffusion_pytorch_model.safetensors"))
    e = rel(vae.decode(comp["vae_z"]), comp["vae_image"])
    worst = max(worst, e)
    print(f"vae decoder: relative error {e:.2e}")

    tcfg = json.load(open(os.path.join(d, "text_encoder/config.json")))
    te = modules.Qwen3Encoder(tcfg).eval()
    load_into(te, os.path.join(d, "text_encoder/model.safetensors"))
    te.rope_bf16 = True  # the reference ran with its RoPE frequencies rounded to bf16
    ids = comp["te_input_ids"].long()
    n = int(comp["te_attention_mask"].sum())
    h = te.hidden_last_but_one(ids[:, :n])
    e = rel(h, comp["te_hidden_last_but_one"][:, :n])
    worst = max(worst, e)
    print(f"text encoder hidden_states[-2] ({n} real tokens): relative error {e:.2e}")
    ok = worst < 1e-4
    print("OK" if ok else "FAIL", f"(worst {worst:.2e}, bound 1e-4)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
