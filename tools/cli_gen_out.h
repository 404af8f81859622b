/* Helpers of `ditrun generate` for what it writes (see cli_gen_out.c). */
#ifndef DIT_CLI_GEN_OUT_H
#define DIT_CLI_GEN_OUT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ditrun.h"

/* n random bytes from the OS (getentropy, else /dev/urandom); false when neither works. */
bool cli_os_random(void *buf, size_t n);
/* A seed from the OS (cli_os_random) in 0..2^32-1; false when it fails. */
bool cli_random_seed(uint64_t *out);
/* Output name of image i (0-based) of a batch of `batch`: out itself for one image, else
 * "dir/name-<i+1>.ext" (or "name-<i+1>" without an extension). false if it does not fit. */
bool cli_batch_path(const char *out, int batch, int i, char *buf, size_t len);
/* The PNG "parameters" text of one image (malloc'd; NULL on no memory): prompt, negative
 * prompt, then Steps, Sampler, CFG scale, Seed, Size, Model, ... Version, plus the options
 * that change the pixels when they are not at their defaults. */
char *cli_gen_infotext(const dit_gen_params *p, const dit_gen_defaults *d, const dit_image *img, int steps);

/* Monotonic seconds. */
double cli_now(void);

#endif
