/* The backend registry: the kinds this build has, creating through it, memory queries and
 * supports-op, the op table every backend fills from the one op list, and weight uploads. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/cpus.h"
#include "core/ctx.h"
#include "core/dtype.h"
#include "core/timer.h"
#include "io/safetensors.h"
#include "testing.h"

static void test_kinds(const dt_args *args) {
  CHECK(dit_backend_kind_count() >= 1);
  const dit_backend_kind_info *cpu = dit_backend_kind_get(DIT_DEVICE_CPU);
  CHECK(cpu != NULL);
  if (!cpu) return;
  CHECK(!strcmp(cpu->name, "cpu"));
  CHECK(cpu->host_memory);
  CHECK(cpu->device_count() == 1);
  CHECK(dit_backend_kind_at(dit_backend_kind_count()) == NULL);
  for (size_t i = 0; i < dit_backend_kind_count(); i++) {
    const dit_backend_kind_info *k = dit_backend_kind_at(i);
    CHECK(k && k->name && k->create && k->mem_info && k->device_count);
    CHECK(dit_backend_kind_get(k->kind) == k);
    printf("backend %s: %d device(s)\n", k->name, k->device_count());
  }
#ifndef DIT_HAVE_CUDA
  CHECK(dit_backend_kind_get(DIT_DEVICE_CUDA) == NULL);
  dit_backend *be = NULL;
  dit_error err = {0};
  CHECK(dit_backend_create(DIT_DEVICE_CUDA, 0, 1, (dit_backend_precision){0}, NULL, &be, &err) == DIT_ERR_UNSUPPORTED);
  CHECK(be == NULL && strstr(err.msg, "built without CUDA") != NULL);
#endif
}

static void test_cpu_memory(const dt_args *args) {
  size_t fr = 0, tot = 0;
  dit_error err = {0};
  CHECK(dit_backend_mem_info(DIT_DEVICE_CPU, 0, &fr, &tot, &err) == DIT_OK);
  CHECK(tot > ((size_t)64 << 20));
  CHECK(fr <= tot);
  CHECK(dit_backend_device_used(DIT_DEVICE_CPU, 0) == 0);
}

static void test_cpu_backend(const dt_args *args) {
  dit_backend *be = NULL;
  dit_error err = {0};
  CHECK(dit_backend_create(DIT_DEVICE_CPU, 0, 1, (dit_backend_precision){0}, NULL, &be, &err) == DIT_OK);
  CHECK(be && !be->fp8);
  if (!be) return;
  CHECK(dit_backend_is_host(be));
  CHECK(!strcmp(be->ops->name, "cpu"));
  /* every plain op is there; of the fused ops, the CPU has all but residual_layer_norm,
   * residual_rms_mod and rms_norm_rope_row (the last three) */
  int i = 0;
#define EXPECT_PLAIN(name, params, args) CHECK_MSG(dit_backend_supports_op(be, i++), "cpu lacks %s", #name);
  DIT_BACKEND_LINEAR_OP(EXPECT_PLAIN)
  DIT_BACKEND_BASE_OPS(EXPECT_PLAIN)
#undef EXPECT_PLAIN
  CHECK(dit_backend_supports_op(be, DIT_N_OPS - 4)); /* residual_norm */
  CHECK(!dit_backend_supports_op(be, DIT_N_OPS - 3)); /* residual_layer_norm: the unfused sequence */
  CHECK(!dit_backend_supports_op(be, DIT_N_OPS - 2)); /* residual_rms_mod: likewise */
  CHECK(!dit_backend_supports_op(be, DIT_N_OPS - 1)); /* rms_norm_rope_row: likewise */
  CHECK(!strcmp(dit_prof_op_name(DIT_N_OPS - 3), "residual_layer_norm"));
  CHECK(!strcmp(dit_prof_op_name(DIT_N_OPS - 2), "residual_rms_mod"));
  CHECK(!strcmp(dit_prof_op_name(DIT_N_OPS - 1), "rms_norm_rope_row"));
  CHECK(!dit_backend_supports_op(be, DIT_N_OPS));
  CHECK(!dit_backend_supports_op(be, -1));
  dit_backend_free(be);
  /* a bad precision is refused and nothing leaks */
  be = NULL;
  dit_backend_precision bad = {(dit_cpu_precision)77, DIT_GPU_PRECISION_BF16};
  CHECK(dit_backend_create(DIT_DEVICE_CPU, 0, 1, bad, NULL, &be, &err) == DIT_ERR_INVALID_ARG);
  CHECK(be == NULL);
  /* fp8 compute is a GPU's: the CPU refuses it and says what to use */
  bad = (dit_backend_precision){DIT_CPU_PRECISION_FP32, DIT_GPU_PRECISION_FP8};
  CHECK(dit_backend_create(DIT_DEVICE_CPU, 0, 1, bad, NULL, &be, &err) == DIT_ERR_UNSUPPORTED);
  CHECK(be == NULL && strstr(err.msg, "fp8") && strstr(err.msg, "--device cuda"));
}

/* The default thread count is the CPUs this process may use: with its affinity narrowed to
 * one CPU (as `taskset -c N` does), the count, a CPU backend's threads and a context's are 1. */
static void test_cpu_count(const dt_args *args) {
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  const int all = dit_cpu_count();
  CHECK_MSG(all >= 1 && (online <= 0 || all <= online), "%d CPUs of %ld online", all, online);
  cpu_set_t was, one;
  CHECK(sched_getaffinity(0, sizeof was, &was) == 0);
  int first = 0;
  while (first < CPU_SETSIZE && !CPU_ISSET(first, &was)) first++;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
  CHECK_MSG(dit_cpu_count() == 1, "%d CPUs with an affinity of one", dit_cpu_count());
  dit_backend *be = NULL;
  dit_error err = {0};
  CHECK(dit_backend_cpu_create(0, &be, &err) == DIT_OK);
  CHECK(be && be->n_threads == 1);
  dit_backend_free(be);
  dit_ctx *ctx = NULL;
  CHECK(dit_ctx_create(NULL, &ctx) == DIT_OK);
  CHECK(ctx && ctx->params.n_threads == 1);
  dit_ctx_free(ctx);
  CHECK(sched_setaffinity(0, sizeof was, &was) == 0);
  CHECK(dit_cpu_count() == all);
  printf("CPUs this process may use: %d (%ld online)\n", all, online);
}

/* The CPU backend's large buffers leave the resident set when freed (mapped, not kept by the
 * C heap), whatever was allocated around them; one still live when the backend is freed goes
 * with it. Not under AddressSanitizer, where they are exact-size heap blocks for its checks. */
static void test_cpu_buffers(const dt_args *args) {
  dit_backend *be = NULL;
  dit_error err = {0};
  CHECK(dit_backend_create(DIT_DEVICE_CPU, 0, 1, (dit_backend_precision){0}, NULL, &be, &err) == DIT_OK);
  if (!be) return;
  const size_t big = (size_t)24 << 20, mib = (size_t)1 << 20;
  /* a larger block (under glibc's 32 MiB cap) freed first, as a parsed tokenizer.json is: glibc
   * then serves blocks below that size from its heap, where a freed one stays resident unless it
   * borders the top */
  char *volatile parse = malloc(big + 6 * mib); /* volatile: the compiler may not drop the pair */
  if (parse) memset(parse, 1, big + 6 * mib);
  free(parse);
  const size_t before = dit_rss_bytes();
  void *a = NULL, *small = NULL, *b = NULL;
  CHECK(be->ops->alloc(be, big, &a, &err) == DIT_OK && ((uintptr_t)a & 63) == 0);
  CHECK(be->ops->alloc(be, 256 * 1024, &small, &err) == DIT_OK && ((uintptr_t)small & 63) == 0);
  if (a) memset(a, 1, big);
  if (small) memset(small, 1, 256 * 1024);
  const size_t held = dit_rss_bytes();
  be->ops->free(be, a);
  const size_t after = dit_rss_bytes();
  /* a buffer a little larger, as an activation arena that grows: the process holds one, not two */
  CHECK(be->ops->alloc(be, big + 4096, &b, &err) == DIT_OK);
  if (b) memset(b, 2, big + 4096);
  const size_t regrown = dit_rss_bytes();
  printf("cpu buffers: resident %+.1f MiB with 24 MiB held, %+.1f after its free, %+.1f with 24 MiB + 4 KiB\n",
         ((double)held - (double)before) / mib, ((double)after - (double)before) / mib,
         ((double)regrown - (double)before) / mib);
#ifndef DT_ASAN
  if (before > 0) {
    CHECK(held >= before + big - 2 * mib);
    CHECK_MSG(after <= before + 2 * mib, "%zu bytes resident after the free, %zu before", after, before);
    CHECK(regrown <= before + big + 3 * mib);
  }
#endif
  be->ops->free(be, small);
  be->ops->free(be, NULL);
  dit_backend_trim(be);
#ifdef DT_ASAN
  be->ops->free(be, b); /* a heap block there: LeakSanitizer would report it */
#endif
  dit_backend_free(be); /* b still live: unmapped with the backend */
}

/* A weight table uploaded with f16_as_bf16: F16 tensors arrive as BF16 of the same values
 * (rounded to bf16), other dtypes as they are; with f32_weights_as_bf16, F32 tensors of 2+
 * dims arrive as BF16, vectors as F32. */
static void test_upload_f16_as_bf16(const dt_args *args) {
  (void)args;
  dit_backend *be = NULL;
  dit_error err = {0};
  CHECK(dit_backend_cpu_create(1, &be, &err) == DIT_OK);
  if (!be) return;
  const float vals[5] = {1.0f, -2.5f, 60000.0f, 1.0f / 3.0f, 0.0f};
  uint16_t h[5];
  float f[3] = {1.5f, -0.25f, 7.0f};
  for (int i = 0; i < 5; i++) h[i] = dit_f32_to_f16(vals[i]);
  dit_tensor th = dit_tensor_1d(DIT_F16, h, 5), tf = dit_tensor_1d(DIT_F32, f, 3);
  dit_wtable t;
  dit_wtable_init(&t);
  dit_wtable_add(&t, &th, false, 1, (int64_t[]){5}, "h");
  dit_wtable_add(&t, &tf, false, 1, (int64_t[]){3}, "f");
  void *blk = NULL;
  CHECK(dit_backend_upload_wtable_as(be, &t, DIT_UPLOAD_F16_AS_BF16, &blk, &err) == DIT_OK);
  CHECK(th.dtype == DIT_BF16 && tf.dtype == DIT_F32 && th.data != (void *)h && blk);
  for (int i = 0; blk && i < 5; i++) {
    uint16_t b;
    memcpy(&b, (char *)th.data + 2 * i, 2);
    CHECK_MSG(dit_bf16_to_f32(b) == dit_bf16_to_f32(dit_f32_to_bf16(dit_f16_to_f32(h[i]))), "value %d", i);
  }
  CHECK(blk && !memcmp(tf.data, f, sizeof f));
  if (blk) be->ops->free(be, blk);
  dit_wtable_free(&t);
  /* F32 weights of 2+ dims as BF16 (a VAE's conv kernels and matrices), vectors as they are */
  float k4[2 * 1 * 3 * 3], m2[6], v1[3] = {0.1f, 0.2f, 0.3f};
  for (int i = 0; i < 18; i++) k4[i] = 1.0f + (float)i / 3.0f;
  for (int i = 0; i < 6; i++) m2[i] = -(float)i / 7.0f;
  dit_tensor tk = dit_tensor_4d(DIT_F32, k4, 2, 1, 3, 3), tm = dit_tensor_2d(DIT_F32, m2, 2, 3),
             tb = dit_tensor_1d(DIT_F32, v1, 3);
  dit_wtable_init(&t);
  dit_wtable_add(&t, &tk, false, 4, (int64_t[]){2, 1, 3, 3}, "conv_in.weight");
  dit_wtable_add(&t, &tm, false, 2, (int64_t[]){2, 3}, "mid_block.attentions.0.to_q.weight");
  dit_wtable_add(&t, &tb, false, 1, (int64_t[]){3}, "conv_in.bias");
  blk = NULL;
  CHECK(dit_backend_upload_wtable_as(be, &t, DIT_UPLOAD_F32_WEIGHTS_AS_BF16, &blk, &err) == DIT_OK);
  CHECK(tk.dtype == DIT_BF16 && tm.dtype == DIT_BF16 && tb.dtype == DIT_F32);
  for (int i = 0; blk && i < 18; i++)
    CHECK_MSG(((const uint16_t *)tk.data)[i] == dit_f32_to_bf16(k4[i]), "kernel value %d", i);
  for (int i = 0; blk && i < 6; i++)
    CHECK_MSG(((const uint16_t *)tm.data)[i] == dit_f32_to_bf16(m2[i]), "matrix value %d", i);
  CHECK(blk && !memcmp(tb.data, v1, sizeof v1));
  if (blk) be->ops->free(be, blk);
  dit_wtable_free(&t);
  dit_backend_free(be);
}

/* The fp8 compute policy: the matrices of numbered blocks, both sizes multiples of 16, not
 * the blocks' modulation or norms; everything outside the blocks stays as it is. */
static void test_fp8_policy(const dt_args *args) {
  (void)args;
  const int64_t sq[2] = {3840, 3840}, odd[2] = {3840, 3850}, small[2] = {8, 64};
  CHECK(dit_wname_fp8_compute("layers.3.attention.to_q.weight", 2, sq));
  CHECK(dit_wname_fp8_compute("noise_refiner.0.feed_forward.w2.weight", 2, sq));
  CHECK(dit_wname_fp8_compute("single_transformer_blocks.47.attn.to_qkv_mlp_proj.weight", 2, sq));
  CHECK(!dit_wname_fp8_compute("layers.3.adaLN_modulation.0.weight", 2, sq));
  CHECK(!dit_wname_fp8_compute("transformer_blocks.1.norm1.linear.weight", 2, sq));
  CHECK(!dit_wname_fp8_compute("transformer_blocks.1.attn.to_q.bias", 1, sq));
  CHECK(!dit_wname_fp8_compute("layers.3.attention.to_q.weight", 2, odd));
  CHECK(!dit_wname_fp8_compute("layers.3.attention.to_q.weight", 2, small));
  CHECK(!dit_wname_fp8_compute("all_x_embedder.2-1.weight", 2, sq));
  CHECK(!dit_wname_fp8_compute("all_final_layer.2-1.linear.weight", 2, sq));
  CHECK(!dit_wname_fp8_compute("double_stream_modulation_img.linear.weight", 2, sq));
  CHECK(!dit_wname_fp8_compute("layers.x3.attention.weight", 2, sq));
  CHECK(!dit_wname_fp8_compute("layers.3", 2, sq));
  CHECK(!dit_wname_fp8_compute("t_embedder.mlp.0.weight", 2, sq));   /* a list inside an embedder */
  CHECK(!dit_wname_fp8_compute("cap_embedder.1.weight", 2, sq));      /* a numbered embedder */
  CHECK(!dit_wname_fp8_compute("double_blocks.0.img_mod.lin.weight", 2, sq));
  CHECK(dit_wname_fp8_compute("double_blocks.0.img_attn.qkv.weight", 2, sq));
  CHECK(dit_wname_fp8_compute("single_blocks.37.linear2.weight", 2, sq));
}

/* An upload with DIT_UPLOAD_FP8_COMPUTE on a backend marked fp8 (the CPU backend's upload is a
 * copy, so the conversion itself is checked here; the GPU op test runs the GEMM): the block
 * matrix arrives as e4m3 codes of its values over amax / 448, with that scale; the rest as is.
 * Without the flag, or on a backend without fp8, nothing changes. */
static void test_upload_fp8(const dt_args *args) {
  (void)args;
  dit_backend *be = NULL;
  dit_error err = {0};
  CHECK(dit_backend_cpu_create(1, &be, &err) == DIT_OK);
  if (!be) return;
  enum { R = 16, C = 32 };
  float w[R * C], v[C];
  uint16_t wb[R * C];
  for (int i = 0; i < R * C; i++) w[i] = (float)((i * 37) % 101 - 50) / 7.0f;
  w[5] = -300.0f; /* the largest magnitude */
  for (int i = 0; i < C; i++) v[i] = (float)i;
  float wk[R * C];
  for (int i = 0; i < R * C; i++) wk[i] = (float)(i % 7) - 3.0f; /* largest magnitude 3 */
  dit_convert_from_f32(wb, w, DIT_BF16, R * C);
  for (int pass = 0; pass < 3; pass++) {
    dit_tensor tw = dit_tensor_2d(DIT_BF16, wb, R, C), tv = dit_tensor_1d(DIT_F32, v, C);
    dit_tensor tk = dit_tensor_2d(DIT_F32, wk, R, C), tx = dit_tensor_2d(DIT_F32, wk, R, C);
    dit_wtable t;
    dit_wtable_init(&t);
    dit_wtable_add(&t, &tk, false, 2, (int64_t[]){R, C}, "layers.0.attention.to_k.weight");
    dit_wtable_share_scale_with_next(&t); /* one scale with to_q, whose largest value is larger */
    dit_wtable_add(&t, &tw, false, 2, (int64_t[]){R, C}, "layers.0.attention.to_q.weight");
    dit_wtable_add(&t, &tv, false, 1, (int64_t[]){C}, "layers.0.attention_norm1.weight");
    dit_wtable_add(&t, &tx, false, 2, (int64_t[]){R, C}, "layers.0.attention.to_v.weight"); /* its own scale */
    be->fp8 = pass != 1;
    void *blk = NULL;
    CHECK(dit_backend_upload_wtable_as(be, &t, pass == 2 ? 0 : DIT_UPLOAD_FP8_COMPUTE, &blk, &err) == DIT_OK);
    const bool conv = pass == 0;
    CHECK_MSG(tw.dtype == (conv ? DIT_F8_E4M3 : DIT_BF16) && tv.dtype == DIT_F32, "pass %d: dtypes", pass);
    const float sc = 300.0f / 448.0f;
    CHECK_MSG(!conv || (tw.scale == sc && tk.scale == sc && tx.scale == 3.0f / 448.0f), "pass %d: scales %g %g %g",
              pass, (double)tw.scale, (double)tk.scale, (double)tx.scale);
    for (int i = 0; conv && blk && i < R * C; i++) {
      const float x = wk[i] / sc, z = wk[i] / (3.0f / 448.0f);
      CHECK_MSG(((const uint8_t *)tk.data)[i] == dit_f32_to_e4m3(x) &&
                    ((const uint8_t *)tx.data)[i] == dit_f32_to_e4m3(z > 448.0f ? 448.0f : z < -448.0f ? -448.0f : z),
                "k/v element %d", i);
    }
    for (int i = 0; conv && blk && i < R * C; i++) {
      const float x = dit_bf16_to_f32(wb[i]) / sc;
      const uint8_t want = dit_f32_to_e4m3(x > 448.0f ? 448.0f : x < -448.0f ? -448.0f : x);
      CHECK_MSG(((const uint8_t *)tw.data)[i] == want, "element %d", i);
    }
    CHECK(blk && !memcmp(tv.data, v, sizeof v));
    if (blk) be->ops->free(be, blk);
    dit_wtable_free(&t);
  }
  be->fp8 = false;
  dit_backend_free(be);
}

int main(int argc, char **argv) {
  static void (*const cases[])(const dt_args *) = {test_kinds,       test_cpu_memory, test_cpu_backend,
                                                   test_cpu_count,   test_cpu_buffers, test_upload_f16_as_bf16,
                                                   test_fp8_policy,  test_upload_fp8};
  return dt_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
