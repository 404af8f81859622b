/* A transformer's activation space (see act_space.h). */
#include "models/act_space.h"

#include <stdlib.h>
#include <string.h>

void dit_act_space_init(dit_act_space *s, const dit_backend *be) {
  memset(s, 0, sizeof *s);
  s->dev = dit_backend_device(be);
  s->adt = DIT_F32;
  s->es = sizeof(float);
}

static void drop_act(dit_act_space *s, dit_backend *be) {
  if (s->act) be->ops->free(be, s->act);
  s->act = NULL;
  s->act_bytes = 0;
}

dit_status dit_act_space_set_dtype(dit_act_space *s, dit_backend *be, dit_dtype dt, const char *who, bool *changed,
                                   dit_error *err) {
  DIT_TRY(dit_backend_check_act_dtype(be, dt, who, err));
  *changed = dt != s->adt;
  if (*changed) drop_act(s, be);
  s->adt = dt;
  s->es = dit_dtype_size(dt);
  return DIT_OK;
}

dit_status dit_act_space_fit(dit_act_space *s, dit_backend *be, dit_arena *ar, size_t host_bytes, bool *grew,
                             dit_error *err) {
  *grew = false;
  if (ar->peak > s->act_bytes) {
    *grew = true;
    drop_act(s, be);
    DIT_TRY(be->ops->alloc(be, ar->peak, &s->act, err));
    s->act_bytes = ar->peak;
  }
  if (host_bytes > s->host_bytes) {
    *grew = true;
    free(s->host);
    s->host_bytes = 0;
    size_t rounded = (host_bytes + 63) / 64 * 64;
    s->host = aligned_alloc(64, rounded);
    if (!s->host) return dit_errorf(err, DIT_ERR_NOMEM, "cannot allocate %zu bytes of tables", host_bytes);
    s->host_bytes = rounded;
  }
  memset(ar, 0, sizeof *ar);
  ar->base = s->act;
  ar->cap = s->act_bytes;
  return DIT_OK;
}

void dit_act_space_release(dit_act_space *s, dit_backend *be) {
  drop_act(s, be);
  free(s->host);
  s->host = NULL;
  s->host_bytes = 0;
}
