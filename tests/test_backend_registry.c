/* The backend registry: the kinds this build has, creating through it, memory queries and
 * supports-op, and the op table every backend fills from the one op list. */
#include <string.h>

#include "backend/backend.h"
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

int main(int argc, char **argv) {
  static void (*const cases[])(const dt_args *) = {test_kinds, test_cpu_memory, test_cpu_backend};
  return dt_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
