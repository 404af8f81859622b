/* libFuzzer target for the CLI option parsers (tools/cli_*.c, called without running):
 * the input is NUL-separated arguments; its first byte picks generate / tokenize / info.
 * A parse must return 0, 1 (help) or 2 (bad usage); when it returns 0 the options obey
 * what the subcommand relies on (required values present, numbers in range). */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define FZ_MAX_ARGS 64

static void check_generate(int argc, char **argv) {
  cli_gen_opts o;
  int r = cli_generate_parse(argc, argv, &o);
  if (r < 0 || r > 2) abort();
  if (r != 0) return;
  /* no prompt: the model's sample prompt; no -m: a transformer file names the model */
  bool transformer = false;
  for (int j = 0; j < o.p.n_files; j++) transformer |= !strcmp(o.files[j].component, "transformer");
  if ((!o.p.model_dir && !transformer) || !o.out) abort();
  if (o.batch < 1 || o.batch > 10000) abort();
  if (o.p.width < 0 || o.p.width > 16384 || o.p.height < 0 || o.p.height > 16384) abort();
  if (o.p.steps < 0 || o.p.steps > 1000 || o.threads < 0 || o.p.vae_tile < 0) abort();
  if (!(o.p.guidance >= -1000 && o.p.guidance <= 1000)) abort();
  if (!(o.p.cfg_normalization >= 0 && o.p.cfg_normalization <= 1e6)) abort();
  if (!(o.p.cfg_truncation >= -1e6 && o.p.cfg_truncation <= 1e6)) abort();
  if (o.p.device != DIT_DEVICE_CPU && o.p.device != DIT_DEVICE_CUDA) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > 4096) return 0;
  unsigned which = data[0] % 3;
  char *buf = malloc(size); /* data[1..] + a final NUL */
  if (!buf) return 0;
  memcpy(buf, data + 1, size - 1);
  buf[size - 1] = 0;
  static const char *const names[] = {"generate", "tokenize", "info"};
  char *argv[FZ_MAX_ARGS + 2];
  int argc = 0;
  argv[argc++] = (char *)names[which];
  for (size_t i = 0; i < size - 1 && argc < FZ_MAX_ARGS;) {
    argv[argc++] = buf + i;
    i += strlen(buf + i) + 1;
  }
  argv[argc] = NULL;
  if (which == 0) {
    check_generate(argc, argv);
  } else if (which == 1) {
    cli_tok_opts o;
    int r = cli_tokenize_parse(argc, argv, &o);
    if (r < 0 || r > 2 || (r == 0 && (!o.model || !o.text))) abort();
  } else {
    cli_info_opts o;
    int r = cli_info_parse(argc, argv, &o);
    if (r < 0 || r > 2 || (r == 0 && !o.path == !o.system)) abort(); /* a PATH, or --system alone */
  }
  free(buf);
  return 0;
}
