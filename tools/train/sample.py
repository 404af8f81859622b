"""The ZImagePipeline sampler in PyTorch, for scoring milestones during training: chat-templated
prompt -> text encoder hidden_states[-2] -> 8 Euler steps on the shift-3 schedule (guidance 0)
-> VAE decode -> 8-bit images. It follows ditrun's pipeline (src/pipeline/zimage_pipeline.c);
the images that count are ditrun's own (eval_ditrun.py)."""
import torch

import tok


def schedule(steps, shift=3.0):
    s = torch.linspace(1.0, 1.0 / steps, steps)
    s = shift * s / (1 + (shift - 1) * s)
    return torch.cat([s, torch.zeros(1)])


@torch.no_grad()
def generate(te, dit, vae, tk, prompts, scaling, shift, seeds, dev, steps=8, size=128, guidance=0.0, batch=50):
    """-> uint8 numpy [n, size, size, 3]."""
    out = []
    C = dit.cfg["in_channels"]
    h = 2 * (size // 16)
    sig = schedule(steps)
    for b0 in range(0, len(prompts), batch):
        ps, ss = prompts[b0:b0 + batch], seeds[b0:b0 + batch]
        ids = [tk.encode(tok.chat(p)) for p in ps]
        L = max(len(i) for i in ids)
        pad = tk.special["<|endoftext|>"]
        idt = torch.tensor([i + [pad] * (L - len(i)) for i in ids], device=dev)
        lens = torch.tensor([len(i) for i in ids], device=dev)
        cap = te.hidden_last_but_one(idt).float()
        x = torch.cat([torch.randn((1, C, h, h), generator=torch.Generator().manual_seed(s)) for s in ss]).to(dev)
        if guidance > 0:
            e = tk.encode(tok.chat(""))
            ncap = te.hidden_last_but_one(torch.tensor([e], device=dev)).float().expand(len(ps), -1, -1)
        for i in range(steps):
            t = torch.full((len(ps),), 1.0 - float(sig[i]), device=dev)
            v = -dit(x, t, cap, lens)
            if guidance > 0:
                vn = -dit(x, t, ncap, torch.full_like(lens, len(e)))
                v = v + guidance * (v - vn)
            x = x + (float(sig[i + 1]) - float(sig[i])) * v
        img = vae.decode(x / scaling + shift).float()
        img = ((img / 2 + 0.5).clamp(0, 1) * 255).round().to(torch.uint8)
        out.append(img.permute(0, 2, 3, 1).cpu().numpy())
    import numpy as np
    return np.concatenate(out)
