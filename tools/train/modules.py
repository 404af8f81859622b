"""PyTorch modules of the three components of a ZImagePipeline folder, written for training:
a Qwen3 text encoder, the Z-Image transformer and an AutoencoderKL. Parameter names are the
tensor names of the diffusers/transformers checkpoints (and of ditrun's loaders), so
state_dict() is what gets written to the model folder. The forward passes follow ditrun's C
implementation (src/models/qwen3.c, zimage_forward.c, zimage_rope.c, vae_kl_decode.c), which
is itself checked against diffusers; check_modules.py compares these modules with the
reference fixtures in tests/fixtures/models/zimage-tiny.

The transformer takes a batch of equally sized latents and captions that all pad to the same
length (a multiple of 32), which is what training needs; items that pad to different lengths
are handled through a key mask, as in the reference."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

SEQ_MULTI_OF = 32


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).to(x.dtype)


def _attention(q, k, v, am=None, is_causal=False):
    """Scaled dot-product attention; the fused torch op where this torch has it (>= 2.0)."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=am, is_causal=is_causal)
    s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if is_causal:
        S = q.shape[-2]
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    if am is not None:
        s = s.masked_fill(~am, float("-inf"))
    return (s.softmax(-1) @ v.float()).to(q.dtype)


def _sdpa(q, k, v, mask=None, causal=False):
    """q, k, v: [B, H, S, hd]; mask: [B, S] bool (True = key present)."""
    am = None
    if mask is not None:
        am = mask[:, None, None, :]
    return _attention(q, k, v, am, causal and am is None)


# ---------------------------------------------------------------------------------------------
# Qwen3 text encoder (Qwen3ForCausalLM's body; hidden_states[-2] is the caption feature)


class Qwen3Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, KV, hd, D = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["hidden_size"]
        self.H, self.KV, self.hd = H, KV, hd
        self.q_proj = nn.Linear(D, H * hd, bias=False)
        self.k_proj = nn.Linear(D, KV * hd, bias=False)
        self.v_proj = nn.Linear(D, KV * hd, bias=False)
        self.o_proj = nn.Linear(H * hd, D, bias=False)
        self.q_norm = RMSNorm(hd, c["rms_norm_eps"])
        self.k_norm = RMSNorm(hd, c["rms_norm_eps"])

    def forward(self, x, cos, sin):
        B, S, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(B, S, self.H, self.hd)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, S, self.KV, self.hd)).transpose(1, 2)
        v = self.v_proj(x).view(B, S, self.KV, self.hd).transpose(1, 2)
        q, k = _rope_half(q, cos, sin), _rope_half(k, cos, sin)
        rep = self.H // self.KV
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        o = _sdpa(q, k, v, causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(B, S, self.H * self.hd))


def _rope_half(x, cos, sin):
    """Rotate-half RoPE (the Llama/Qwen layout): cos/sin [S, hd]."""
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], dim=-1)
    return (x.float() * cos + rot.float() * sin).to(x.dtype)


class Qwen3MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        D, I = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(D, I, bias=False)
        self.up_proj = nn.Linear(D, I, bias=False)
        self.down_proj = nn.Linear(I, D, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Qwen3Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = Qwen3Attention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = Qwen3MLP(c)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen3Body(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([Qwen3Layer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class Qwen3Encoder(nn.Module):
    """Qwen3ForCausalLM with tied embeddings: state_dict names model.*."""

    def __init__(self, c):
        super().__init__()
        self.cfg = c
        self.rope_bf16 = False
        self.model = Qwen3Body(c)

    def rope(self, S, device):
        hd, theta = self.cfg["head_dim"], self.cfg["rope_parameters"]["rope_theta"]
        inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64, device=device).float() / hd))
        if self.rope_bf16:  # a model loaded in bf16 holds its frequencies rounded to bf16
            inv = inv.to(torch.bfloat16).float()
        ang = torch.arange(S, device=device).float()[:, None] * inv[None, :]
        emb = torch.cat([ang, ang], dim=-1)
        return emb.cos(), emb.sin()

    def hidden_last_but_one(self, ids):
        """ids [B, S] (right-padded: causal attention keeps real tokens independent of padding)."""
        x = self.model.embed_tokens(ids)
        cos, sin = self.rope(ids.shape[1], ids.device)
        layers = self.model.layers
        for layer in layers[: len(layers) - 1]:
            x = layer(x, cos, sin)
        return x


# ---------------------------------------------------------------------------------------------
# Z-Image transformer


def timestep_embedding(t, dim, max_period=10000.0):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class TimestepEmbedder(nn.Module):
    def __init__(self, out_size, mid_size=1024, freq_size=256):
        super().__init__()
        self.freq_size = freq_size
        self.mlp = nn.Sequential(nn.Linear(freq_size, mid_size), nn.SiLU(), nn.Linear(mid_size, out_size))

    def forward(self, t):
        return self.mlp(timestep_embedding(t, self.freq_size).to(self.mlp[0].weight.dtype))


class ZAttention(nn.Module):
    def __init__(self, dim, heads, eps=1e-5):
        super().__init__()
        self.H, self.hd = heads, dim // heads
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_k = nn.Linear(dim, dim, bias=False)
        self.to_v = nn.Linear(dim, dim, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(dim, dim, bias=False)])
        self.norm_q = RMSNorm(self.hd, eps)
        self.norm_k = RMSNorm(self.hd, eps)

    def forward(self, x, cos, sin, mask):
        B, S, D = x.shape
        q = self.norm_q(self.to_q(x).view(B, S, self.H, self.hd))
        k = self.norm_k(self.to_k(x).view(B, S, self.H, self.hd))
        v = self.to_v(x).view(B, S, self.H, self.hd)
        q, k = _rope_pairs(q, cos, sin), _rope_pairs(k, cos, sin)
        o = _sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), mask)
        return self.to_out[0](o.transpose(1, 2).reshape(B, S, D))


def _rope_pairs(x, cos, sin):
    """Interleaved RoPE: pairs (2j, 2j+1) rotated by angle j. x [B, S, H, hd], cos/sin [B, S, hd/2]."""
    xf = x.float().unflatten(-1, (-1, 2))
    a, b = xf[..., 0], xf[..., 1]
    c, s = cos[:, :, None, :], sin[:, :, None, :]
    return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2).to(x.dtype)


class FeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class ZBlock(nn.Module):
    def __init__(self, dim, heads, eps, modulation, adaln_dim):
        super().__init__()
        self.attention = ZAttention(dim, heads)
        self.feed_forward = FeedForward(dim, int(dim / 3 * 8))
        self.attention_norm1 = RMSNorm(dim, eps)
        self.ffn_norm1 = RMSNorm(dim, eps)
        self.attention_norm2 = RMSNorm(dim, eps)
        self.ffn_norm2 = RMSNorm(dim, eps)
        self.modulation = modulation
        if modulation:
            self.adaLN_modulation = nn.ModuleList([nn.Linear(adaln_dim, 4 * dim)])

    def forward(self, x, cos, sin, mask, adaln=None):
        if self.modulation:
            sm, gm, sf, gf = self.adaLN_modulation[0](adaln)[:, None, :].chunk(4, dim=-1)
            a = self.attention(self.attention_norm1(x) * (1 + sm), cos, sin, mask)
            x = x + gm.tanh() * self.attention_norm2(a)
            f = self.feed_forward(self.ffn_norm1(x) * (1 + sf))
            return x + gf.tanh() * self.ffn_norm2(f)
        a = self.attention(self.attention_norm1(x), cos, sin, mask)
        x = x + self.attention_norm2(a)
        return x + self.ffn_norm2(self.feed_forward(self.ffn_norm1(x)))


class FinalLayer(nn.Module):
    def __init__(self, dim, out, adaln_dim):
        super().__init__()
        self.linear = nn.Linear(dim, out)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(adaln_dim, dim))

    def forward(self, x, adaln):
        scale = 1 + self.adaLN_modulation(adaln)[:, None, :]
        return self.linear(F.layer_norm(x, x.shape[-1:], eps=1e-6) * scale)


class ZImageDiT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.cfg = c
        D, H, eps = c["dim"], c["n_heads"], c["norm_eps"]
        A = min(D, 256)
        self.p = c["all_patch_size"][0]
        P = self.p * self.p * c["in_channels"]
        self.all_x_embedder = nn.ModuleDict({"2-1": nn.Linear(P, D)})
        self.all_final_layer = nn.ModuleDict({"2-1": FinalLayer(D, P, A)})
        self.noise_refiner = nn.ModuleList([ZBlock(D, H, eps, True, A) for _ in range(c["n_refiner_layers"])])
        self.context_refiner = nn.ModuleList([ZBlock(D, H, eps, False, A) for _ in range(c["n_refiner_layers"])])
        self.t_embedder = TimestepEmbedder(A)
        self.cap_embedder = nn.Sequential(RMSNorm(c["cap_feat_dim"], eps), nn.Linear(c["cap_feat_dim"], D))
        self.x_pad_token = nn.Parameter(torch.zeros(1, D))
        self.cap_pad_token = nn.Parameter(torch.zeros(1, D))
        self.layers = nn.ModuleList([ZBlock(D, H, eps, True, A) for _ in range(c["n_layers"])])

    def rope(self, pos):
        """pos [..., 3] int64 -> cos, sin [..., hd/2] (frequencies in float64, angles in float32)."""
        theta, dims = self.cfg["rope_theta"], self.cfg["axes_dims"]
        angs = []
        for k, d in enumerate(dims):
            f = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64, device=pos.device) / d)
            angs.append((pos[..., k : k + 1].double() * f).float())
        a = torch.cat(angs, dim=-1)
        return a.cos(), a.sin()

    def forward(self, x, t, cap, cap_lens):
        """x [B, C, h, w] latents; t [B] in [0, 1] (1 = clean); cap [B, Lmax, cap_feat_dim] right-padded
        caption features with cap_lens [B] real lengths. Returns [B, C, h, w]."""
        B, C, h, w = x.shape
        p, dev = self.p, x.device
        Ht, Wt = h // p, w // p
        n_img = Ht * Wt
        x_len = n_img + (-n_img) % SEQ_MULTI_OF
        cap_pad = [int(L) + (-int(L)) % SEQ_MULTI_OF for L in cap_lens.tolist()]
        Sc = max(cap_pad)
        adaln = self.t_embedder(t * self.cfg["t_scale"])
        # image tokens: patches (ph, pw, c) in row-major (h, w) order
        patches = x.view(B, C, Ht, p, Wt, p).permute(0, 2, 4, 3, 5, 1).reshape(B, n_img, p * p * C)
        xs = self.all_x_embedder["2-1"](patches)
        if x_len > n_img:
            xs = torch.cat([xs, self.x_pad_token.expand(B, x_len - n_img, -1).to(xs.dtype)], dim=1)
        # caption tokens, each item padded to a multiple of 32 with the pad token
        if cap.shape[1] < Sc:
            cap = F.pad(cap, (0, 0, 0, Sc - cap.shape[1]))
        cs = self.cap_embedder(cap[:, :Sc])
        j = torch.arange(Sc, device=dev)
        real = j[None, :] < cap_lens[:, None]
        present = j[None, :] < torch.tensor(cap_pad, device=dev)[:, None]
        cs = torch.where(real[..., None], cs, self.cap_pad_token.to(cs.dtype))
        # positions: caption (1 + j, 0, 0); image (cap_pad + 1, row, col); image pad tokens (0, 0, 0)
        cpos = torch.zeros(B, Sc, 3, dtype=torch.int64, device=dev)
        cpos[..., 0] = 1 + j
        r = torch.arange(x_len, device=dev)
        xpos = torch.zeros(B, x_len, 3, dtype=torch.int64, device=dev)
        xpos[..., 0] = torch.tensor(cap_pad, device=dev)[:, None] + 1
        xpos[..., 1] = (r // Wt)[None]
        xpos[..., 2] = (r % Wt)[None]
        xpos[:, n_img:] = 0
        xcos, xsin = self.rope(xpos)
        ccos, csin = self.rope(cpos)
        cmask = present if min(cap_pad) != Sc else None
        for blk in self.noise_refiner:
            xs = blk(xs, xcos, xsin, None, adaln)
        for blk in self.context_refiner:
            cs = blk(cs, ccos, csin, cmask)
        # unified [image, caption]; items' lengths differ only in the caption part
        us = torch.cat([xs, cs], dim=1)
        ucos, usin = torch.cat([xcos, ccos], dim=1), torch.cat([xsin, csin], dim=1)
        umask = None if cmask is None else torch.cat([torch.ones(B, x_len, dtype=torch.bool, device=dev), cmask], 1)
        for blk in self.layers:
            us = blk(us, ucos, usin, umask, adaln)
        out = self.all_final_layer["2-1"](us[:, :n_img], adaln)
        return out.view(B, Ht, Wt, p, p, C).permute(0, 5, 1, 3, 2, 4).reshape(B, C, h, w)


# ---------------------------------------------------------------------------------------------
# AutoencoderKL (encoder used for training latents; the decoder is what pipelines run)


class ResnetBlock(nn.Module):
    def __init__(self, cin, cout, groups):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin, eps=1e-6)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm2 = nn.GroupNorm(groups, cout, eps=1e-6)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        if cin != cout:
            self.conv_shortcut = nn.Conv2d(cin, cout, 1)

    def forward(self, x):
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return (self.conv_shortcut(x) if hasattr(self, "conv_shortcut") else x) + h


class AttnBlock(nn.Module):
    def __init__(self, c, groups):
        super().__init__()
        self.group_norm = nn.GroupNorm(groups, c, eps=1e-6)
        self.to_q = nn.Linear(c, c)
        self.to_k = nn.Linear(c, c)
        self.to_v = nn.Linear(c, c)
        self.to_out = nn.ModuleList([nn.Linear(c, c)])

    def forward(self, x):
        B, C, H, W = x.shape
        h = self.group_norm(x).view(B, C, H * W).transpose(1, 2)
        q, k, v = self.to_q(h)[:, None], self.to_k(h)[:, None], self.to_v(h)[:, None]
        o = _attention(q, k, v)[:, 0]
        return x + self.to_out[0](o).transpose(1, 2).reshape(B, C, H, W)


class MidBlock(nn.Module):
    def __init__(self, c, groups):
        super().__init__()
        self.attentions = nn.ModuleList([AttnBlock(c, groups)])
        self.resnets = nn.ModuleList([ResnetBlock(c, c, groups), ResnetBlock(c, c, groups)])

    def forward(self, x):
        return self.resnets[1](self.attentions[0](self.resnets[0](x)))


class Downsample(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, stride=2, padding=0)

    def forward(self, x):
        return self.conv(F.pad(x, (0, 1, 0, 1)))


class Upsample(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class _ResnetStack(nn.Module):
    """n ResnetBlocks, then, when resample (Downsample or Upsample) is given, one of it
    under `attr` (diffusers' weight names: downsamplers.0 / upsamplers.0); built in that
    order, so a seeded initialisation draws the same numbers."""

    def __init__(self, cin, cout, n, groups, attr, resample):
        super().__init__()
        self.resnets = nn.ModuleList([ResnetBlock(cin if i == 0 else cout, cout, groups) for i in range(n)])
        self._attr = attr
        if resample is not None:
            setattr(self, attr, nn.ModuleList([resample(cout)]))

    def forward(self, x):
        for r in self.resnets:
            x = r(x)
        return getattr(self, self._attr)[0](x) if hasattr(self, self._attr) else x


class DownBlock(_ResnetStack):
    def __init__(self, cin, cout, n, groups, down):
        super().__init__(cin, cout, n, groups, "downsamplers", Downsample if down else None)


class UpBlock(_ResnetStack):
    def __init__(self, cin, cout, n, groups, up):
        super().__init__(cin, cout, n, groups, "upsamplers", Upsample if up else None)


class Encoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        ch, g, n = c["block_out_channels"], c["norm_num_groups"], c["layers_per_block"]
        self.conv_in = nn.Conv2d(c["in_channels"], ch[0], 3, padding=1)
        self.down_blocks = nn.ModuleList(
            [DownBlock(ch[max(i - 1, 0)], ch[i], n, g, i < len(ch) - 1) for i in range(len(ch))])
        self.mid_block = MidBlock(ch[-1], g)
        self.conv_norm_out = nn.GroupNorm(g, ch[-1], eps=1e-6)
        self.conv_out = nn.Conv2d(ch[-1], 2 * c["latent_channels"], 3, padding=1)

    def forward(self, x):
        x = self.conv_in(x)
        for b in self.down_blocks:
            x = b(x)
        return self.conv_out(F.silu(self.conv_norm_out(self.mid_block(x))))


class Decoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        ch, g, n = list(reversed(c["block_out_channels"])), c["norm_num_groups"], c["layers_per_block"]
        self.conv_in = nn.Conv2d(c["latent_channels"], ch[0], 3, padding=1)
        self.mid_block = MidBlock(ch[0], g)
        self.up_blocks = nn.ModuleList(
            [UpBlock(ch[max(i - 1, 0)], ch[i], n + 1, g, i < len(ch) - 1) for i in range(len(ch))])
        self.conv_norm_out = nn.GroupNorm(g, ch[-1], eps=1e-6)
        self.conv_out = nn.Conv2d(ch[-1], c["out_channels"], 3, padding=1)

    def forward(self, z):
        x = self.mid_block(self.conv_in(z))
        for b in self.up_blocks:
            x = b(x)
        return self.conv_out(F.silu(self.conv_norm_out(x)))


class AutoencoderKL(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.cfg = c
        self.encoder = Encoder(c)
        self.decoder = Decoder(c)

    def encode(self, x):
        """x in [-1, 1] -> (mean, logvar)."""
        m, lv = self.encoder(x).chunk(2, dim=1)
        return m, lv.clamp(-30.0, 20.0)

    def decode(self, z):
        return self.decoder(z)
