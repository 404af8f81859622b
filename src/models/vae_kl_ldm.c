/* The AutoencoderKL's tensors under the original LDM names, as in the single checkpoint
 * file FLUX.1's VAE is published as (ae.safetensors): the weight table is built with the
 * diffusers names, then every entry is renamed to its LDM name before binding, so a missing
 * or mis-shaped tensor is reported under the name the file uses. X is decoder or encoder:
 *
 *   X.mid_block.resnets.{0,1}               X.mid.block_{1,2}
 *   X.mid_block.attentions.0.               X.mid.attn_1.
 *     group_norm / to_q / to_k / to_v / to_out.0   norm / q / k / v / proj_out
 *   decoder.up_blocks.i.resnets.j           decoder.up.(n_levels-1-i).block.j
 *   decoder.up_blocks.i.upsamplers.0.conv   decoder.up.(n_levels-1-i).upsample.conv
 *   encoder.down_blocks.i.resnets.j         encoder.down.i.block.j
 *   encoder.down_blocks.i.downsamplers.0.conv  encoder.down.i.downsample.conv
 *   conv_shortcut (in a resnet)             nin_shortcut
 *   X.conv_norm_out                         X.norm_out
 *   anything else (conv_in, conv_out, post_quant_conv, quant_conv) keeps its name.
 *
 * LDM stores the attention's q/k/v/proj_out as 1x1 convolutions [C, C, 1, 1]; they are
 * bound as such and then described as the linears [C, C] the decoder uses (the same
 * bytes, nothing copied). A file already holding them as [C, C] binds as it is. */
#include <stdio.h>
#include <string.h>

#include "models/vae_kl_internal.h"

/* The attention weights LDM stores as 1x1 convolutions (after "decoder." or "encoder."). */
static const char *const conv_attn[] = {"mid.attn_1.q.weight", "mid.attn_1.k.weight", "mid.attn_1.v.weight",
                                        "mid.attn_1.proj_out.weight"};

/* Renamed prefixes with no index in them (after "decoder." or "encoder."). */
static const struct {
  const char *from, *to;
} fixed[] = {
    {"mid_block.attentions.0.group_norm.", "mid.attn_1.norm."},
    {"mid_block.attentions.0.to_q.", "mid.attn_1.q."},
    {"mid_block.attentions.0.to_k.", "mid.attn_1.k."},
    {"mid_block.attentions.0.to_v.", "mid.attn_1.v."},
    {"mid_block.attentions.0.to_out.0.", "mid.attn_1.proj_out."},
    {"conv_norm_out.", "norm_out."},
};

bool vae_kl_ldm_detect(const dit_weights *w) {
  return dit_weights_find(w, "decoder.mid.block_1.norm1.weight") || dit_weights_find(w, "encoder.mid.block_1.norm1.weight");
}

/* The part of name after "decoder." or "encoder." (its length in *hl), or NULL. */
static const char *half_rest(const char *name, size_t *hl) {
  *hl = 8;
  if (!strncmp(name, "decoder.", 8) || !strncmp(name, "encoder.", 8)) return name + 8;
  return NULL;
}

void dit_vae_kl_config_flux1(dit_vae_kl_config *c) {
  static const dit_vae_kl_config flux1 = {
      .latent_channels = 16,
      .in_channels = 3,
      .out_channels = 3,
      .n_levels = 4,
      .block_out_channels = {128, 256, 512, 512},
      .enc_n_levels = 4,
      .enc_block_out_channels = {128, 256, 512, 512},
      .layers_per_block = 2,
      .norm_num_groups = 32,
      .mid_block_add_attention = true,
      .use_post_quant_conv = false,
      .use_quant_conv = false,
      .scaling_factor = 0.3611f,
      .shift_factor = 0.1159f,
      .has_shift_factor = true,
  };
  *c = flux1;
}

/* A resnet's tensor name after its block: conv_shortcut becomes nin_shortcut. */
static const char *resnet_tail(const char *rest, const char **pre) {
  static const char sc[] = "conv_shortcut.";
  *pre = "";
  if (strncmp(rest, sc, sizeof sc - 1)) return rest;
  *pre = "nin_shortcut.";
  return rest + sizeof sc - 1;
}

/* The LDM name of the tensor `name` (diffusers naming); false when it does not fit.
 * (k is set only when a pattern matches to its end.) */
static bool ldm_name(const char *name, int n_levels, char *out, size_t len) {
  int a = 0, b = 0, k = 0, n;
  const char *pre;
  size_t hl;
  const char *rest = half_rest(name, &hl);
  if (!rest) {
    n = snprintf(out, len, "%s", name);
    return n >= 0 && (size_t)n < len;
  }
  const int hn = (int)hl;
  if (sscanf(rest, "mid_block.resnets.%d.%n", &a, &k) == 1 && k) {
    const char *tail = resnet_tail(rest + k, &pre);
    n = snprintf(out, len, "%.*smid.block_%d.%s%s", hn, name, a + 1, pre, tail);
  } else if (sscanf(rest, "up_blocks.%d.resnets.%d.%n", &a, &b, &k) == 2 && k) {
    const char *tail = resnet_tail(rest + k, &pre);
    n = snprintf(out, len, "%.*sup.%d.block.%d.%s%s", hn, name, n_levels - 1 - a, b, pre, tail);
  } else if (sscanf(rest, "up_blocks.%d.upsamplers.0.conv.%n", &a, &k) == 1 && k) {
    n = snprintf(out, len, "%.*sup.%d.upsample.conv.%s", hn, name, n_levels - 1 - a, rest + k);
  } else if (sscanf(rest, "down_blocks.%d.resnets.%d.%n", &a, &b, &k) == 2 && k) {
    const char *tail = resnet_tail(rest + k, &pre);
    n = snprintf(out, len, "%.*sdown.%d.block.%d.%s%s", hn, name, a, b, pre, tail);
  } else if (sscanf(rest, "down_blocks.%d.downsamplers.0.conv.%n", &a, &k) == 1 && k) {
    n = snprintf(out, len, "%.*sdown.%d.downsample.conv.%s", hn, name, a, rest + k);
  } else {
    const char *to = "", *tail = rest;
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
      size_t fl = strlen(fixed[i].from);
      if (!strncmp(rest, fixed[i].from, fl)) {
        to = fixed[i].to;
        tail = rest + fl;
        break;
      }
    }
    n = snprintf(out, len, "%.*s%s%s", hn, name, to, tail);
  }
  return n >= 0 && (size_t)n < len;
}

static bool is_conv_attn(const char *name) {
  size_t hl;
  const char *rest = half_rest(name, &hl);
  for (size_t i = 0; rest && i < sizeof conv_attn / sizeof conv_attn[0]; i++)
    if (!strcmp(rest, conv_attn[i])) return true;
  return false;
}

dit_status vae_kl_ldm_rename(dit_wtable *t, const dit_weights *w, int n_levels, dit_error *err) {
  if (t->status != DIT_OK) return dit_errorf(err, t->status, "%s", t->err.msg);
  for (size_t i = 0; i < t->n; i++) {
    dit_wentry *e = &t->entries[i];
    char name[DIT_WNAME_MAX];
    if (!ldm_name(e->name, n_levels, name, sizeof name))
      return dit_errorf(err, DIT_ERR_INTERNAL, "vae: no LDM name for %s", e->name);
    memcpy(e->name, name, strlen(name) + 1);
    if (!is_conv_attn(e->name) || e->ndim != 2) continue;
    const dit_st_tensor *st = dit_weights_find(w, e->name);
    if (st && st->ndim == 2) continue; /* already stored as a linear */
    e->ndim = 4;
    e->shape[2] = e->shape[3] = 1;
  }
  return DIT_OK;
}

void vae_kl_ldm_flatten(dit_wtable *t) {
  for (size_t i = 0; i < t->n; i++) {
    dit_wentry *e = &t->entries[i];
    if (e->ndim != 4 || !is_conv_attn(e->name) || !e->dst->data) continue;
    const dit_device dev = e->dst->device;
    *e->dst = dit_tensor_make(e->dst->dtype, e->dst->data, 2, e->shape);
    e->dst->device = dev;
    e->ndim = 2;
  }
}
