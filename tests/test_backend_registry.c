/* The backend registry: the kinds this build has, creating through it, memory queries and
 * supports-op, the op table every backend fills from the one op list, and weight uploads. */
#include <string.h>

#include "backend/backend.h"
#include "core/dtype.h"
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
  CHECK(dit_backend_create(DIT_DEVICE_CUDA, 0, 1, DIT_CPU_PRECISION_FP32, NULL, &be, &err) == DIT_ERR_UNSUPPORTED);
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
  CHECK(dit_backend_create(DIT_DEVICE_CPU, 0, 1, DIT_CPU_PRECISION_FP32, NULL, &be, &err) == DIT_OK);
  if (!be) return;
  CHECK(dit_backend_is_host(be));
  CHECK(!strcmp(be->ops->name, "cpu"));
  /* every plain op is there; of the fused ops, the CPU has all but residual_layer_norm */
  int i = 0;
#define EXPECT_PLAIN(name, params, args) CHECK_MSG(dit_backend_supports_op(be, i++), "cpu lacks %s", #name);
  DIT_BACKEND_LINEAR_OP(EXPECT_PLAIN)
  DIT_BACKEND_BASE_OPS(EXPECT_PLAIN)
#undef EXPECT_PLAIN
  CHECK(dit_backend_supports_op(be, DIT_N_OPS - 2)); /* residual_norm */
  CHECK(!dit_backend_supports_op(be, DIT_N_OPS - 1)); /* residual_layer_norm: the unfused sequence */
  CHECK(!strcmp(dit_prof_op_name(DIT_N_OPS - 1), "residual_layer_norm"));
  CHECK(!dit_backend_supports_op(be, DIT_N_OPS));
  CHECK(!dit_backend_supports_op(be, -1));
  dit_backend_free(be);
  /* a bad precision is refused and nothing leaks */
  be = NULL;
  CHECK(dit_backend_create(DIT_DEVICE_CPU, 0, 1, (dit_cpu_precision)77, NULL, &be, &err) == DIT_ERR_INVALID_ARG);
  CHECK(be == NULL);
}

/* A weight table uploaded with f16_as_bf16: F16 tensors arrive as BF16 of the same values
 * (rounded to bf16), other dtypes as they are. */
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
  dit_backend_free(be);
}

int main(int argc, char **argv) {
  static void (*const cases[])(const dt_args *) = {test_kinds, test_cpu_memory, test_cpu_backend,
                                                   test_upload_f16_as_bf16};
  return dt_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
