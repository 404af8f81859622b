/* The ditrun command-line tool: dispatches subcommands. Uses only include/ditrun.h. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ditrun.h"

static void usage(FILE *f) {
  fprintf(f,
          "ditrun %s: run diffusion-transformer image models\n"
          "usage: ditrun COMMAND [options]\n"
          "commands:\n"
          "  generate -m DIR -p PROMPT [-o out.png]  generate an image (see generate --help)\n"
          "  version            print the version\n"
          "  plan -m DIR [generate's options]  what a generate would take (memory, FLOPs) before it runs\n"
          "  info PATH          describe a model folder, component, weights file or generated PNG\n"
          "  tokenize -m DIR T  print the token ids of text T (--chat: in the chat template)\n"
          "  bench --arch zimage  time a DiT forward at the real geometry, random weights\n"
          "  quantize -m DIR --type q8_0 -o F.gguf  write a component as a (quantized) GGUF file\n"
          "  compare A.png B.png  PSNR, SSIM and differences of two images\n"
          "  serve -m DIR       keep models loaded behind an HTTP API and a web page\n"
          "model families (diffusers folders whose model_index.json names one of these pipelines):\n",
          DITRUN_VERSION);
  const char *name, *title;
  const char *const *pipes;
  for (size_t i = 0; dit_family_get(i, &name, &title, &pipes); i++) {
    fprintf(f, "  %-12s %s:", name, title);
    for (; *pipes; pipes++) fprintf(f, " %s", *pipes);
    fputc('\n', f);
  }
  fprintf(f, "Run 'ditrun COMMAND --help' for a command's options.\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
    printf("ditrun %s\n", DITRUN_VERSION);
    return 0;
  }
  if (!strcmp(cmd, "info")) return cli_info(argc - 1, argv + 1);
  if (!strcmp(cmd, "tokenize")) return cli_tokenize(argc - 1, argv + 1);
  if (!strcmp(cmd, "generate")) return cli_generate(argc - 1, argv + 1);
  if (!strcmp(cmd, "bench")) return cli_bench(argc - 1, argv + 1);
  if (!strcmp(cmd, "quantize")) return cli_quantize(argc - 1, argv + 1);
  if (!strcmp(cmd, "compare")) return cli_compare(argc - 1, argv + 1);
  if (!strcmp(cmd, "serve")) return cli_serve(argc - 1, argv + 1);
  if (!strcmp(cmd, "plan")) return cli_plan(argc - 1, argv + 1);
  fprintf(stderr, "ditrun: unknown command '%s'\n", cmd);
  usage(stderr);
  return 2;
}
