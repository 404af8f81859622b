/* dtype conversions: exhaustive round trips and round-to-nearest-even cases. */
#include "core/dtype.h"
#include "core/tensor.h"
#include "testing.h"

/* How many of the 65536 values of a 16-bit float format (NaNs aside) do not come back
 * from float32 unchanged. */
static int round_trip_failures_16(float (*to_f32)(uint16_t), uint16_t (*from_f32)(float)) {
  int bad = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = to_f32((uint16_t)h);
    if (isnan(f)) continue;
    if (from_f32(f) != h) bad++;
  }
  return bad;
}

static void test_bf16(const dt_args *args) {
  int bad = round_trip_failures_16(dit_bf16_to_f32, dit_f32_to_bf16);
  CHECK_MSG(bad == 0, "%d bf16 values do not round-trip", bad);
  /* ties to even: 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125 */
  CHECK(dit_f32_to_bf16(1.0f + 1.0f / 256) == 0x3f80);
  CHECK(dit_f32_to_bf16(1.0f + 3.0f / 256) == 0x3f82);
  CHECK(dit_f32_to_bf16(1.0f + 1.0f / 256 + 1.0f / 65536) == 0x3f81);
  CHECK(isnan(dit_bf16_to_f32(dit_f32_to_bf16(NAN))));
  CHECK(dit_f32_to_bf16(INFINITY) == 0x7f80);
}

static void test_f16(const dt_args *args) {
  int bad = round_trip_failures_16(dit_f16_to_f32, dit_f32_to_f16);
  CHECK_MSG(bad == 0, "%d f16 values do not round-trip", bad);
  CHECK(dit_f32_to_f16(65504.0f) == 0x7bff);
  CHECK(dit_f32_to_f16(65519.0f) == 0x7bff);
  CHECK(dit_f32_to_f16(65520.0f) == 0x7c00); /* rounds to inf */
  CHECK(dit_f32_to_f16(ldexpf(1.0f, -24)) == 0x0001);
  CHECK(dit_f32_to_f16(ldexpf(1.0f, -25)) == 0x0000);            /* tie to even: 0 */
  CHECK(dit_f32_to_f16(ldexpf(3.0f, -25)) == 0x0002);            /* tie to even: 2 */
  CHECK(dit_f32_to_f16(1.0f + ldexpf(1.0f, -11)) == 0x3c00);     /* tie to even */
  CHECK(dit_f32_to_f16(1.0f + ldexpf(3.0f, -11)) == 0x3c02);
  CHECK(dit_f32_to_f16(-2.0f) == 0xc000);
}

static void test_fp8(const dt_args *args) {
  int bad = 0;
  for (uint32_t v = 0; v < 256; v++) {
    float f = dit_e4m3_to_f32((uint8_t)v);
    if (!isnan(f) && dit_f32_to_e4m3(f) != v) bad++;
    f = dit_e5m2_to_f32((uint8_t)v);
    if (!isnan(f) && dit_f32_to_e5m2(f) != v) bad++;
  }
  CHECK_MSG(bad == 0, "%d fp8 values do not round-trip", bad);
  CHECK(dit_e4m3_to_f32(0x7e) == 448.0f);
  CHECK(isnan(dit_e4m3_to_f32(0x7f)));
  CHECK(dit_e4m3_to_f32(0x01) == ldexpf(1.0f, -9));
  CHECK(dit_f32_to_e4m3(460.0f) == 0x7e);           /* rounds down to 448 */
  CHECK(isnan(dit_e4m3_to_f32(dit_f32_to_e4m3(480.0f)))); /* beyond range: NaN like torch */
  CHECK(dit_f32_to_e4m3(1.0625f) == 0x38);          /* tie 1 + 1/16 -> 1.0 (even) */
  CHECK(dit_f32_to_e4m3(1.1875f) == 0x3a);          /* tie -> 1.25 (even) */
  CHECK(dit_e5m2_to_f32(0x7b) == 57344.0f);
  CHECK(isinf(dit_e5m2_to_f32(dit_f32_to_e5m2(70000.0f))));
}

static void test_names(const dt_args *args) {
  dit_dtype t;
  CHECK(dit_dtype_from_name("BF16", &t) && t == DIT_BF16);
  CHECK(dit_dtype_from_name("F8_E4M3", &t) && t == DIT_F8_E4M3);
  CHECK(!dit_dtype_from_name("bf16", &t));
  CHECK(dit_dtype_size(DIT_I64) == 8 && dit_dtype_size(DIT_BOOL) == 1);
  /* Block types: ggml's sizes; not safetensors names; nbytes counts whole blocks. */
  CHECK(!dit_dtype_from_name("Q8_0", &t) && !strcmp(dit_dtype_name(DIT_Q4_K), "Q4_K"));
  CHECK(dit_dtype_is_block(DIT_Q5_1) && !dit_dtype_is_block(DIT_BF16) && dit_dtype_size(DIT_Q8_0) == 0);
  CHECK(dit_dtype_block_elems(DIT_Q8_0) == 32 && dit_dtype_block_bytes(DIT_Q8_0) == 34);
  CHECK(dit_dtype_block_elems(DIT_Q6_K) == 256 && dit_dtype_block_bytes(DIT_Q6_K) == 210);
  CHECK(dit_dtype_block_elems(DIT_F16) == 1 && dit_dtype_block_bytes(DIT_F16) == 2);
  uint64_t rb = 0;
  CHECK(dit_dtype_row_bytes(DIT_Q4_K, 512, &rb) && rb == 288 && !dit_dtype_row_bytes(DIT_Q4_K, 100, &rb));
  CHECK(dit_dtype_row_bytes(DIT_BF16, 3, &rb) && rb == 6);
  dit_tensor qt = dit_tensor_2d(DIT_Q4_0, NULL, 3, 64);
  CHECK(dit_tensor_nbytes(&qt) == 3 * 2 * 18);
  float out[3];
  uint16_t in[3] = {0x3f80, 0xc000, 0x0000};
  dit_convert_to_f32(out, in, DIT_BF16, 3);
  CHECK(out[0] == 1.0f && out[1] == -2.0f && out[2] == 0.0f);
}

int main(int argc, char **argv) {
  static void (*const cases[])(const dt_args *) = {test_bf16, test_f16, test_fp8, test_names};
  return dt_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
