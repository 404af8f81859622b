/* What one run of a model costs at a given geometry, as its own planning pass computes it
 * without running: FLOPs (2 per multiply-add of its GEMMs, convolutions and attention
 * matmuls) and the bytes of the activation buffers and host tables it allocates. The
 * planner (`ditrun plan`) adds these up per stage. */
#ifndef DIT_CORE_COST_H
#define DIT_CORE_COST_H

#include <stddef.h>

typedef struct dit_cost {
  double flops;
  size_t act_bytes;
} dit_cost;

#endif
