/* The compute ops of a backend, written once. Every list of ops comes from DIT_BACKEND_OPS:
 * the function table (backend.h), the profiler's op enum, names and forwarders
 * (backend_prof.c), the CPU backend's table (cpu/cpu_backend.c, functions cpu_<op>) and the
 * per-op counts of the profiler. X(name, (parameters after `dit_backend *be`), (their names))
 * is called once per op, in table order; each op's contract is the comment above its row.
 * Conventions for all ops are at the top of backend.h. The fused ops at the end are optional
 * (NULL where a backend lacks one; the dit_op_* helpers run the unfused sequence then).
 * Lists: DIT_BACKEND_LINEAR_OP, DIT_BACKEND_BASE_OPS, DIT_BACKEND_FUSED_OPS, and their unions
 * DIT_BACKEND_OTHER_OPS (all but linear) and DIT_BACKEND_OPS (all). */
#ifndef DIT_BACKEND_OPS_H
#define DIT_BACKEND_OPS_H

/* Removes the parentheses around a parameter or argument list of DIT_BACKEND_OPS. */
#define DIT_EXPAND(...) __VA_ARGS__

#define DIT_BACKEND_LINEAR_OP(X) \
  /* y[M,N] = act(x[M,K] @ w[N,K]^T + b[N]). x may be [..., K] (leading dims flattened).                           \
   * x and y may be row views (e.g. y a column slice of a wider buffer: ldc != N). b may be                        \
   * NULL. y must not alias x. */                                                                                  \
  X(linear, (dit_tensor *y, const dit_tensor *x, const dit_tensor *w, const dit_tensor *b, dit_act act,            \
    dit_error *err),                                                                                               \
    (y, x, w, b, act, err))

/* The plain ops after linear: every backend implements each of them. */
#define DIT_BACKEND_BASE_OPS(X) \
  /* Row-wise over the last dim D: y = x / sqrt(mean(x^2) + eps) * w (w [D] or NULL). y may alias x. */            \
  X(rms_norm, (dit_tensor *y, const dit_tensor *x, const dit_tensor *w, float eps, dit_error *err),                \
    (y, x, w, eps, err))                                                                                           \
  /* Row-wise over the last dim: y = (x - mean) / sqrt(var + eps) * w + b (w, b [D] or NULL). y may alias x. */    \
  X(layer_norm, (dit_tensor *y, const dit_tensor *x, const dit_tensor *w, const dit_tensor *b, float eps,          \
    dit_error *err),                                                                                               \
    (y, x, w, b, eps, err))                                                                                        \
  /* x [B,C,H,W]: GroupNorm over (C/groups, H, W), affine w, b [C] (or NULL), then SiLU if silu. y may alias x. */ \
  X(group_norm, (dit_tensor *y, const dit_tensor *x, int groups, const dit_tensor *w, const dit_tensor *b,         \
    float eps, bool silu, dit_error *err),                                                                         \
    (y, x, groups, w, b, eps, silu, err))                                                                          \
  /* x [B,C,H,W]: per pixel over the C channels, y = x / max(||x||_2, 1e-12) * sqrt(C) * w[c] (w [C] or NULL),     \
   * then SiLU if silu: torch's F.normalize over dim 1, the Wan / Qwen-Image VAE's RMS_norm. y may alias x. */     \
  X(channel_rms_norm, (dit_tensor *y, const dit_tensor *x, const dit_tensor *w, bool silu, dit_error *err),        \
    (y, x, w, silu, err))                                                                                          \
  /* x [B,C,...]: per position over the C channels, y = x / sqrt(mean_c(x^2) + eps), then SiLU if silu (the     \
   * LTX-2 video VAE's PerChannelRMSNorm: eps inside the root, no weight; unlike channel_rms_norm). y may      \
   * alias x. */                                                                                               \
  X(pixel_norm, (dit_tensor *y, const dit_tensor *x, float eps, bool silu, dit_error *err),                        \
    (y, x, eps, silu, err))                                                                                        \
  /* Scaled dot-product attention. q [B,Sq,Hq,D], k and v [B,Sk,Hkv,D] (Hq % Hkv == 0, GQA),                       \
   * out [B,Sq,Hq,D]; each of q, k, v, out may be strided [B,S,H,D] (e.g. column slices of a                       \
   * fused QKV projection). key_mask [B,Sk] U8/BOOL (nonzero = attend) or NULL; causal masks                       \
   * key j > query i. A query row with no visible key yields zeros. out must not overlap q, k, v. */               \
  X(attention, (dit_tensor *out, const dit_tensor *q, const dit_tensor *k, const dit_tensor *v,                    \
    const dit_tensor *key_mask, float scale, bool causal, dit_error *err),                                         \
    (out, q, k, v, key_mask, scale, causal, err))                                                                  \
  /* In place: x [B,S,H,D] (strided on the CPU) rotated by angles with cos, sin [B,S,D/2] or [S,D/2] (F32). */     \
  X(rope, (dit_tensor *x, const dit_tensor *cos, const dit_tensor *sin, dit_rope_mode mode, dit_error *err),       \
    (x, cos, sin, mode, err))                                                                                      \
  /* y = act(x), elementwise. y may alias x. */                                                                    \
  X(activation, (dit_tensor *y, const dit_tensor *x, dit_act act, dit_error *err),                                 \
    (y, x, act, err))                                                                                              \
  /* y = silu(a) * b, elementwise, same shapes; y, a, b may be row views. y may alias a or b. */                   \
  X(swiglu, (dit_tensor *y, const dit_tensor *a, const dit_tensor *b, dit_error *err),                             \
    (y, a, b, err))                                                                                                \
  /* x [B,S,D]: y = x * (1 + scale[B,D]) + shift[B,D]; shift may be NULL. y may alias x. */                        \
  X(modulate, (dit_tensor *y, const dit_tensor *x, const dit_tensor *scale, const dit_tensor *shift,               \
    dit_error *err),                                                                                               \
    (y, x, scale, shift, err))                                                                                     \
  /* x [B,S,D] += g * y, g = gate[B,D] (tanh(gate) if tanh_gate), or 1 when gate is NULL. */                       \
  X(gated_add, (dit_tensor *x, const dit_tensor *y, const dit_tensor *gate, bool tanh_gate, dit_error *err),       \
    (x, y, gate, tanh_gate, err))                                                                                  \
  /* Elementwise on equal shapes; y may alias a or b. */                                                           \
  X(add, (dit_tensor *y, const dit_tensor *a, const dit_tensor *b, dit_error *err),                                \
    (y, a, b, err))                                                                                                \
  X(mul, (dit_tensor *y, const dit_tensor *a, const dit_tensor *b, dit_error *err),                                \
    (y, a, b, err))                                                                                                \
  /* y = x * s. y may alias x. */                                                                                  \
  X(scale, (dit_tensor *y, const dit_tensor *x, float s, dit_error *err),                                          \
    (y, x, s, err))                                                                                                \
  /* x as rows of its last dim: y[r, :] = x[r, :] * (s * g[r]), g one value per row (F32 or the act      \
   * dtype; e.g. a per-head gate on [.., H, D]). y may alias x; g must not. */                                    \
  X(mul_rows, (dit_tensor *y, const dit_tensor *x, const dit_tensor *g, float s, dit_error *err),                  \
    (y, x, g, s, err))                                                                                             \
  /* Softmax over the last dim. y may alias x. */                                                                  \
  X(softmax, (dit_tensor *y, const dit_tensor *x, dit_error *err),                                                 \
    (y, x, err))                                                                                                   \
  /* y [N,D] F32 = table[ids[n]] (table [V,D] in its stored dtype, ids [N] I32 or I64).                            \
   * An id outside [0, V) is DIT_ERR_INVALID_ARG. */                                                               \
  X(embedding, (dit_tensor *y, const dit_tensor *table, const dit_tensor *ids, dit_error *err),                    \
    (y, table, ids, err))                                                                                          \
  /* y [B,Co,Ho,Wo] = conv(x [B,Ci,H,W], w [Co,Ci,kh,kw]) + b [Co] (b may be NULL),                                \
   * zero padding `pad` on every side, stride `stride`. */                                                         \
  X(conv2d, (dit_tensor *y, const dit_tensor *x, const dit_tensor *w, const dit_tensor *b, int stride, int pad,    \
    dit_error *err),                                                                                               \
    (y, x, w, b, stride, pad, err))                                                                                \
  /* y [B,Co,To,Ho,Wo] = conv(x [B,Ci,T,H,W], w [Co,Ci,kt,kh,kw]) + b [Co] (b may be NULL), stride 1, zero    \
   * padding of pt frames, ph rows and pw columns on each side: To = T + 2 pt - kt + 1, likewise Ho, Wo.       \
   * y must not alias x. */                                                                                    \
  X(conv3d, (dit_tensor *y, const dit_tensor *x, const dit_tensor *w, const dit_tensor *b, int pt, int ph, int pw, \
    dit_error *err),                                                                                               \
    (y, x, w, b, pt, ph, pw, err))                                                                                 \
  /* y [B,C,2H,2W] = nearest-neighbour 2x upsample of x [B,C,H,W]. */                                              \
  X(upsample2x, (dit_tensor *y, const dit_tensor *x, dit_error *err),                                              \
    (y, x, err))                                                                                                   \
  /* Sinusoidal embedding y [N,dim] of t [N] (F32), as diffusers' get_timestep_embedding:                          \
   * half = dim/2, freq_i = exp(-ln(max_period) * i / (half - shift)), arg = scale * t * freq,                     \
   * output [sin, cos] or [cos, sin] when flip_sin_to_cos; odd dim pads a zero column. */                          \
  X(timestep_embedding, (dit_tensor *y, const dit_tensor *t, int dim, float max_period, float shift,               \
    float scale, bool flip_sin_to_cos, dit_error *err),                                                            \
    (y, t, dim, max_period, shift, scale, flip_sin_to_cos, err))                                                   \
  /* y = fn(x), elementwise with parameters a, b (dit_unary, backend.h: leaky ReLU, tanh, clamp, log of a          \
   * clamp). y may alias x. */                                                                                     \
  X(unary, (dit_tensor *y, const dit_tensor *x, dit_unary fn, float a, float b, dit_error *err),                   \
    (y, x, fn, a, b, err))                                                                                         \
  /* Snake-beta over channels last, x [..., C]: y = x + 1 / (beta[c] + eps) * sin(x * alpha[c])^2 with alpha,      \
   * beta [C] (F32/BF16/F16; the values used, not their logs). y may alias x. */                                   \
  X(snake, (dit_tensor *y, const dit_tensor *x, const dit_tensor *alpha, const dit_tensor *beta, float eps,        \
    dit_error *err),                                                                                               \
    (y, x, alpha, beta, eps, err))                                                                                 \
  /* Depthwise FIR resampling along time with replicate edges, channels last: x [B, Ti, C], y [B, To, C]           \
   * (To is y's), f [K] (F32/BF16/F16), up, down >= 1: y[b, t, c] = gain * sum over k < K with                     \
   * n = t * down + k - offset divisible by up of f[k] * x[b, clamp(n / up, 0, Ti - 1), c] (n / up floored).       \
   * up 1: a strided correlation (torch's conv1d of a replicate-padded x); down 1: a transposed convolution        \
   * of zero-stuffed x with the reversed f. y must not alias x. */                                                 \
  X(resample1d, (dit_tensor *y, const dit_tensor *x, const dit_tensor *f, int up, int down, int offset,            \
    float gain, dit_error *err),                                                                                   \
    (y, x, f, up, down, offset, gain, err))                                                                        \
  /* x [..., 2F] holding real parts then imaginary parts: y [..., F] = sqrt(x[..., f]^2 + x[..., F + f]^2)         \
   * (an STFT's magnitude). y must not alias x. */                                                                 \
  X(complex_abs, (dit_tensor *y, const dit_tensor *x, dit_error *err),                                             \
    (y, x, err))                                                                                                   \
  /* dst = src element by element, any strides (views: permute, slice, concat into a                               \
   * slice), same shape; converts dtype when they differ (float types). */                                         \
  X(copy, (dit_tensor *dst, const dit_tensor *src, dit_error *err),                                                \
    (dst, src, err))

/* The fused ops (optional: NULL where a backend lacks one). Call them through their dit_op_*
 * helpers (backend_fused.c), which run the unfused sequence (dit_unfused_*) when the op is
 * NULL. Each one's result is that of its unfused sequence (intermediates may stay in fp32 on
 * a GPU). */
#define DIT_BACKEND_FUSED_OPS(X) \
  /* x [B,S,H,D] in place (may be strided): x = rope(rms_norm(x) * w) (per head row of D; w [D]                    \
   * or NULL). The unfused sequence runs a strided x through a temporary contiguous copy. */                       \
  X(rms_norm_rope, (dit_tensor *x, const dit_tensor *w, float eps, const dit_tensor *cos, const dit_tensor *sin,   \
    dit_rope_mode mode, dit_error *err),                                                                           \
    (x, w, eps, cos, sin, mode, err))                                                                              \
  /* x [B,S,D]: y = rms_norm(x) * w * (1 + scale[B,D]) (scale NULL: plain rms_norm). y may alias x. */             \
  X(rms_norm_mod, (dit_tensor *y, const dit_tensor *x, const dit_tensor *w, const dit_tensor *scale, float eps,    \
    dit_error *err),                                                                                               \
    (y, x, w, scale, eps, err))                                                                                    \
  /* Gated residual between norms, x and r [B,S,D]: x += g * rms_norm(r) * wr (g as gated_add);                    \
   * then, when h is not NULL, h = rms_norm(x) * wh * (1 + scale) (as rms_norm_mod). r is                          \
   * scratch: its contents afterwards are unspecified. h must not alias x or r. */                                 \
  X(residual_norm, (dit_tensor *x, dit_tensor *r, const dit_tensor *wr, const dit_tensor *gate, bool tanh_gate,    \
    dit_tensor *h, const dit_tensor *wh, const dit_tensor *scale, float eps, dit_error *err),                      \
    (x, r, wr, gate, tanh_gate, h, wh, scale, eps, err))                                                           \
  /* Gated residual, then LayerNorm + modulation (the FLUX/MMDiT block pattern), x [B,S,D]:                        \
   * when r is not NULL, x += g * r (g = gate[B,D], or 1 when gate is NULL; r [B,S,D] is only                      \
   * read); then, when h is not NULL, h = layer_norm(x) * (1 + scale[B,D]) + shift[B,D]                            \
   * (LayerNorm without affine; scale / shift NULL: none; a shift needs a scale). h may alias x                    \
   * only when r is NULL; it must not alias r. */                                                                  \
  X(residual_layer_norm, (dit_tensor *x, const dit_tensor *r, const dit_tensor *gate, dit_tensor *h,               \
    const dit_tensor *scale, const dit_tensor *shift, float eps, dit_error *err),                                  \
    (x, r, gate, h, scale, shift, eps, err))                                                                  \
  /* Gated residual, then RMSNorm + modulation (the Krea 2 block pattern), x [B,S,D]: when r is not NULL,        \
   * x += g * r (g = gate[B,D], or 1 when gate is NULL; r is only read); then, when h is not NULL,                \
   * h = rms_norm(x) * w * (1 + scale[B,D]) + shift[B,D] (w [D], scale, shift NULL: none; a shift needs a         \
   * scale). h may alias x only when r is NULL; it must not alias r. */                                           \
  X(residual_rms_mod, (dit_tensor *x, const dit_tensor *r, const dit_tensor *gate, dit_tensor *h,                  \
    const dit_tensor *w, const dit_tensor *scale, const dit_tensor *shift, float eps, dit_error *err),             \
    (x, r, gate, h, w, scale, shift, eps, err))                                                                \
  /* x [B,S,I] in place (contiguous): x = rope(rms_norm(x) * w) with the norm over each whole row of I              \
   * (every head together: LTX-2's q/k norms; w [I] or NULL) and the rotation over hr = I / (2 r) chunks of          \
   * 2 r (mode as rope): cos/sin F32 [S * hr, r], token s's I / 2 angles at rows [s hr, (s + 1) hr). */             \
  X(rms_norm_rope_row, (dit_tensor *x, const dit_tensor *w, float eps, const dit_tensor *cos,                      \
    const dit_tensor *sin, dit_rope_mode mode, dit_error *err),                                                    \
    (x, w, eps, cos, sin, mode, err))


/* The ops after linear (the profiler forwards these generically; linear, whose calls it
 * also splits by shape, by hand). */
#define DIT_BACKEND_OTHER_OPS(X) DIT_BACKEND_BASE_OPS(X) DIT_BACKEND_FUSED_OPS(X)

/* Every op, in table order. */
#define DIT_BACKEND_OPS(X) DIT_BACKEND_LINEAR_OP(X) DIT_BACKEND_OTHER_OPS(X)

/* Declares a backend's implementation of every op, `dit_status PREFIX_<op>(dit_backend *be,
 * ...)`: a backend's internal header writes
 *   #define MY_OP_DECL(name, params, args) DIT_BACKEND_OP_DECL(my_##name, params)
 *   DIT_BACKEND_OPS(MY_OP_DECL)
 * and fills its table with DIT_BACKEND_OPS(X) where X is `.name = my_##name,`. */
#define DIT_BACKEND_OP_DECL(fn, params) dit_status fn(dit_backend *be, DIT_EXPAND params);

/* How many ops there are. */
#define DIT_OP_PLUS_ONE(name, params, args) +1
enum { DIT_N_OPS = 0 DIT_BACKEND_OPS(DIT_OP_PLUS_ONE) };

#endif
