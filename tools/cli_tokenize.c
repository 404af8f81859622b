/* `ditrun tokenize -m MODEL_DIR [--chat] TEXT`: prints the token ids of TEXT (space
 * separated, one line), optionally wrapped in the model's chat template first, as the
 * pipeline feeds its text encoder. Exit 0 ok, 2 bad usage or input, 1 runtime failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_args.h"
#include "ditrun.h"

static void tokenize_usage(FILE *f) {
  fprintf(f,
          "usage: ditrun tokenize -m MODEL_DIR [--chat | --max-length N] TEXT\n"
          "  -m, --model DIR  diffusers model folder (or a tokenizer folder: tokenizer.json,\n"
          "                   or vocab.json + merges.txt as CLIP publishes it)\n"
          "  --chat           wrap TEXT in the model's chat template first (Z-Image: Qwen3\n"
          "                   with thinking; FLUX.2 klein: Qwen3 without thinking)\n"
          "  --max-length N   as a pipeline feeds its text encoder (FLUX.1: CLIP 77, T5 512): the\n"
          "                   tokenizer's special tokens (BOS/EOS, </s>) added, cut to N ids\n"
          "  TEXT             UTF-8 text; special tokens such as <|im_start|> are recognized\n"
          "Prints the ids space-separated on one line. Without --max-length: no BOS/EOS. Never padded.\n");
}

int cli_tokenize_parse(int argc, char **argv, cli_tok_opts *o) {
  memset(o, 0, sizeof *o);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      tokenize_usage(stdout);
      return 1;
    } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
      if (i + 1 >= argc) {
        fprintf(stderr, "ditrun tokenize: %s needs a folder\n", a);
        return 2;
      }
      o->model = argv[++i];
    } else if (!strcmp(a, "--chat")) {
      o->chat = 1;
    } else if (!strcmp(a, "--max-length")) {
      if (i + 1 >= argc) {
        fprintf(stderr, "ditrun tokenize: --max-length needs a number\n");
        return 2;
      }
      if (!cli_parse_int("tokenize", "--max-length", argv[++i], 1, 1 << 20, &o->max_length)) return 2;
    } else if (!strcmp(a, "--")) {
      if (i + 1 < argc && !o->text) o->text = argv[++i];
      if (i + 1 < argc) {
        fprintf(stderr, "ditrun tokenize: more than one TEXT argument\n");
        return 2;
      }
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "ditrun tokenize: unknown option '%s'\n", a);
      tokenize_usage(stderr);
      return 2;
    } else if (o->text) {
      fprintf(stderr, "ditrun tokenize: more than one TEXT argument (quote the text)\n");
      return 2;
    } else {
      o->text = a;
    }
  }
  if (!o->model || !*o->model) {
    fprintf(stderr, "ditrun tokenize: missing -m MODEL_DIR (or it is empty)\n");
    tokenize_usage(stderr);
    return 2;
  }
  if (o->chat && o->max_length) {
    fprintf(stderr, "ditrun tokenize: --chat and --max-length do not go together\n");
    return 2;
  }
  if (!o->text) {
    fprintf(stderr, "ditrun tokenize: missing TEXT\n");
    tokenize_usage(stderr);
    return 2;
  }
  return 0;
}

int cli_tokenize(int argc, char **argv) {
  cli_tok_opts o;
  int code;
  dit_ctx *ctx = cli_start("tokenize", cli_tokenize_parse(argc, argv, &o), 0, &code);
  if (!ctx) return code;
  dit_tokenizer *tok = NULL;
  int32_t *ids = NULL;
  size_t n = 0;
  dit_status s = dit_tokenizer_load(ctx, o.model, &tok);
  if (s == DIT_OK && o.max_length)
    s = dit_tokenizer_encode_model(ctx, tok, o.text, strlen(o.text), (size_t)o.max_length, &ids, &n);
  else if (s == DIT_OK)
    s = dit_tokenizer_encode(ctx, tok, o.text, strlen(o.text), o.chat, &ids, &n);
  if (s == DIT_OK) {
    for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", (int)ids[i]);
    putchar('\n');
    if (fflush(stdout) != 0) s = DIT_ERR_IO;
  } else {
    fprintf(stderr, "ditrun tokenize: %s: %s\n", dit_status_str(s), dit_ctx_last_error(ctx));
  }
  free(ids);
  dit_tokenizer_free(tok);
  dit_ctx_free(ctx);
  return dit_status_exit_code(s);
}
