/* Subcommands of the ditrun CLI; each returns the process exit code
 * (0 ok, 1 runtime failure, 2 bad usage or bad input). argv[0] is the command name. */
#ifndef DIT_CLI_H
#define DIT_CLI_H

#include <stdbool.h>

#include "ditrun.h"

int cli_info(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_generate(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_quantize(int argc, char **argv);
int cli_compare(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_plan(int argc, char **argv);

/* The option parsers, callable without running anything (the fuzz target and tests use
 * them). Each fills *o (pointers into argv) and returns 0 to run, 1 after printing
 * --help, 2 on bad usage (message printed to stderr). */
typedef struct cli_gen_opts {
  dit_gen_params p;             /* p.prompt NULL: the model's sample prompt (ditrun.json) */
  const char *out;
  bool out_set;                 /* -o given (a video model's default is output.mp4) */
  bool overwrite, quiet, force_progress;
  bool random_seed;             /* --seed -1: drawn from the OS when the run starts */
  struct cli_signals *signals;  /* held around each output's write (cli_signals.h) */
  int threads;
  int batch;                    /* -b N: images with seeds S..S+N-1 (1 = one image) */
  unsigned keep;                /* DIT_KEEP_* the model keeps: all for a batch, none for one image */
  size_t max_memory;            /* --max-memory: bytes (0: the machine's available memory, not enforced) */
  dit_component_file files[DIT_MAX_COMPONENT_FILES]; /* --diffusion-model, --vae, --clip-l, --t5xxl */
  dit_lora loras[DIT_MAX_LORAS];                      /* --lora */
  char lora_paths[DIT_MAX_LORAS][4096];
  const char *init_path;                              /* --init-image */
  bool strength_set;                                  /* --strength given */
  bool image_crf_set;                                 /* --image-crf given */
  const char *ref_paths[DIT_MAX_REF_IMAGES];          /* -r/--ref-image, in order */
  dit_image init, refs[DIT_MAX_REF_IMAGES];           /* read before the model loads */
} cli_gen_opts;
int cli_generate_parse(int argc, char **argv, cli_gen_opts *o);
/* The model options generate (and plan) load with: o's device, precisions, keep, files, LoRAs. */
void cli_model_opts(const cli_gen_opts *o, dit_model_opts *mo);

typedef struct cli_tok_opts {
  const char *model, *text;
  int chat;
  int max_length;               /* > 0: the pipeline form (special tokens, cut to this many) */
} cli_tok_opts;
int cli_tokenize_parse(int argc, char **argv, cli_tok_opts *o);

typedef struct cli_info_opts {
  const char *path;
  unsigned flags;
  bool system; /* --system: the machine, no PATH */
} cli_info_opts;
int cli_info_parse(int argc, char **argv, cli_info_opts *o);

#endif
