/* Table-driven backend op tests: one list of cases (op, shapes, dtypes, flags, tolerance) and
 * one runner that runs each case on a backend under test and on a reference backend through
 * the backend interface (alloc / upload / download and the op table) with the same seeded
 * random inputs, and compares the outputs.
 *
 * Inputs: activation buffers hold values rounded to the case's activation dtype; a host
 * backend (the CPU) gets them as F32 (it computes in F32), a device backend in that dtype.
 * Weights are stored in the case's weight dtype on both. Output buffers start as NaN (every
 * element an op must write is checked for being finite); outputs that are views into a wider
 * buffer start random and the whole buffer is compared (writes outside the view show up).
 *
 * Tolerance policy, by pair of backends (opc_tol):
 * - host vs host (the CPU's SIMD path against its portable path): max |a - b| / max |b| <=
 *   the case's tol (0: bit-identical).
 * - device vs host (a GPU against the CPU): normalized MSE < 1e-4 where bf16 operands enter
 *   (bf16/f16 activations; linear, conv2d and copy with a bf16/f16 weight or destination;
 *   attention always, whose GPU kernels round to bf16), else max relative error <= max(1e-5, the case's tol). */
#ifndef DIT_TEST_OP_CASES_H
#define DIT_TEST_OP_CASES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

/* One id per op of DIT_BACKEND_OPS: OPC_linear, OPC_rms_norm, ... */
#define OPC_ID(name, params, args) OPC_##name,
typedef enum opc_op { DIT_BACKEND_OPS(OPC_ID) OPC_N_OPS } opc_op;
#undef OPC_ID

/* Case flags (meaning per op in op_cases.c). */
enum {
  OPC_BIAS = 1,     /* linear, conv2d: with bias; norms: with weight (and bias) */
  OPC_MASK = 2,     /* attention: key mask (U8) */
  OPC_CAUSAL = 4,   /* attention */
  OPC_STRIDED = 8,  /* operands are column slices of wider buffers (fused projections) */
  OPC_EMPTY = 16,   /* attention: the last item's mask is empty (zeros out) */
  OPC_SHARED = 32,  /* rope tables [S, D/2] shared by the batch */
  OPC_SILU = 64,    /* group_norm + SiLU */
  OPC_OUT = 128,    /* residual_norm: with the output norm h */
  OPC_INPLACE = 256 /* y aliases x */
};

typedef struct opc_case {
  opc_op op;
  int64_t s[6];      /* dims, per op (see op_cases.c) */
  dit_dtype adt, wdt; /* activation dtype, weight (or destination / table) dtype */
  int flags;
  int a, b;          /* op integers: act, rope mode, groups, gate mode, conv stride / pad, ids dtype */
  float f[3];        /* op floats: timestep_embedding's max_period, shift, scale */
  double tol;        /* host-vs-host max relative error (0: bit-identical) */
} opc_case;

/* The table. */
extern const opc_case opc_cases[];
extern const size_t opc_n_cases;

typedef struct opc_result {
  int run, failed, skipped;
} opc_result;

/* The case's name ("linear 37x300x45 wBF16 bias act1 ..."), into buf. */
const char *opc_name(const opc_case *c, char *buf, size_t len);
/* Whether the pair (test, ref) passes with these errors (see the policy above). */
bool opc_pass(const opc_case *c, bool device_pair, double maxrel, double nmse, int64_t nonfinite);

/* Runs one case on `test` and on `ref` (seeded by seed), compares every output and prints one
 * line ("ok"/"FAIL" name errors tolerance, prefixed by label). Returns 0 on pass, 1 on
 * failure, -1 when `test` cannot run it (an op it lacks). */
int opc_run_case(const opc_case *c, dit_backend *test, dit_backend *ref, uint64_t seed, const char *label);
/* Filter for device backends: false for the cases outside what the CUDA backend takes (head
 * dims and rope widths not multiples of 8, F16 conv / embedding / copy operands). */
bool opc_device_takes(const opc_case *c, void *ctx);
/* Runs every case of the table (filter: only cases for which it returns true; NULL: all). */
opc_result opc_run_all(dit_backend *test, dit_backend *ref, const char *label,
                       bool (*filter)(const opc_case *c, void *ctx), void *ctx);

#endif
