/* `ditrun tokenize` end to end: reference cases through the CLI binary (a subset: each
 * run loads the 11 MB tokenizer.json; the library test covers every case), the chat
 * templates of both model families, and bad usage / bad input exiting 2 with a message.
 * The CLI is run with fork+exec (no shell), so texts reach it byte for byte. */
#include <fcntl.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/json.h"
#include "testing.h"

/* Runs argv, captures stdout into out (NUL-terminated) and stderr into err; returns the
 * exit status or -1. */
static int run(char *const argv[], char *out, size_t out_len, char *err, size_t err_len) {
  int po[2], pe[2];
  if (pipe(po) || pipe(pe)) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    dup2(po[1], 1);
    dup2(pe[1], 2);
    close(po[0]);
    close(pe[0]);
    execv(argv[0], argv);
    _exit(127);
  }
  close(po[1]);
  close(pe[1]);
  size_t no = 0, ne = 0;
  /* stderr is small; read stdout to the end, then stderr */
  for (ssize_t r; (r = read(po[0], out + no, out_len - 1 - no)) > 0;) no += (size_t)r;
  for (ssize_t r; (r = read(pe[0], err + ne, err_len - 1 - ne)) > 0;) ne += (size_t)r;
  out[no] = 0;
  err[ne] = 0;
  close(po[0]);
  close(pe[0]);
  int st;
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return -1;
  return WEXITSTATUS(st);
}

/* "1 2 3\n" == the JSON array? */
static bool line_matches(const char *out, const json_t *ids) {
  char want[65536];
  size_t k = 0;
  for (size_t i = 0; i < json_array_size(ids) && k + 16 < sizeof want; i++)
    k += (size_t)snprintf(want + k, sizeof want - k, i ? " %lld" : "%lld",
                          (long long)json_integer_value(json_array_get(ids, i)));
  want[k++] = '\n';
  want[k] = 0;
  bool ok = !strcmp(out, want);
  if (!ok) fprintf(stderr, "  got:  %s  want: %s", out, want);
  return ok;
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init(argc, argv, &a);
  char bin[1024], zimage[1024], klein[1024], path[1024];
  dt_path(bin, sizeof bin, a.bin, "ditrun");
  dt_path(zimage, sizeof zimage, a.data, "models/zimage-tiny");
  dt_path(klein, sizeof klein, a.data, "models/flux2-klein-tiny");
  dt_path(path, sizeof path, a.data, "refs/tokenizer_cases.json");
  json_t *cases = NULL;
  dit_error e = {0};
  CHECK_MSG(dit_json_load_file(path, 16 << 20, &cases, &e) == DIT_OK, "%s", e.msg);
  static char out[1 << 16], err[1 << 14];

  /* a subset of the plain cases: ASCII, CRLF/tabs, emoji/ZWJ, special tokens, empty, mixed scripts */
  const json_t *list = json_object_get(cases, "cases");
  static const size_t pick[] = {0, 6, 8, 10};
  for (size_t k = 0; k < sizeof pick / sizeof pick[0] && pick[k] < json_array_size(list); k++) {
    const json_t *c = json_array_get(list, pick[k]);
    char *args[] = {bin, "tokenize", "-m", zimage, "--", (char *)json_string_value(json_object_get(c, "text")), NULL};
    int rc = run(args, out, sizeof out, err, sizeof err);
    CHECK_MSG(rc == 0 && line_matches(out, json_object_get(c, "ids")), "case %zu: exit %d, stderr: %s", pick[k], rc,
              err);
  }
  /* FLUX.1's published tokenizer folders: CLIP as vocab.json + merges.txt, T5 as tokenizer.json
   * (plain encode: no BOS/EOS; the reference ids carry them, so compare the inner ids) */
  {
    dt_path(path, sizeof path, a.data, "tokenizers/clip_t5_ids.json");
    json_t *ft = NULL;
    CHECK_MSG(dit_json_load_file(path, 16 << 20, &ft, &e) == DIT_OK, "%s", e.msg);
    static const char *const names[] = {"clip", "t5"};
    static const int lead[] = {1, 0}; /* CLIP: BOS first; both end with EOS */
    for (int t = 0; t < 2 && ft; t++) {
      const json_t *tk = json_object_get(ft, names[t]);
      const json_t *c = json_array_get(json_object_get(tk, "cases"), 3); /* "A photo of a cat" */
      const json_t *ids = json_object_get(c, "ids");
      json_t *inner = json_array();
      for (size_t j = (size_t)lead[t]; j + 1 < json_array_size(ids); j++) json_array_append(inner, json_array_get(ids, j));
      char dir[1024], sub[64];
      snprintf(sub, sizeof sub, "tokenizers/%s", json_string_value(json_object_get(tk, "folder")));
      dt_path(dir, sizeof dir, a.data, sub);
      char *args[] = {bin, "tokenize", "-m", dir, "--", (char *)json_string_value(json_object_get(c, "text")), NULL};
      int rc = run(args, out, sizeof out, err, sizeof err);
      CHECK_MSG(rc == 0 && line_matches(out, inner), "%s folder: exit %d, stdout %s, stderr: %s", names[t], rc, out,
                err);
      json_decref(inner);
      /* every reference case in the pipeline form: special tokens added, cut to max_length */
      char ml[32];
      snprintf(ml, sizeof ml, "%lld", (long long)json_integer_value(json_object_get(tk, "max_length")));
      const json_t *all = json_object_get(tk, "cases");
      size_t bad = 0;
      for (size_t k = 0; k < json_array_size(all); k++) {
        const json_t *ck = json_array_get(all, k);
        char *a2[] = {bin, "tokenize", "-m", dir, "--max-length", ml, "--",
                      (char *)json_string_value(json_object_get(ck, "text")), NULL};
        int rk = run(a2, out, sizeof out, err, sizeof err);
        if (rk != 0 || !line_matches(out, json_object_get(ck, "ids"))) {
          bad++;
          CHECK_MSG(0, "%s case %zu through the CLI: exit %d, stderr: %s", names[t], k, rk, err);
        }
      }
      printf("%s: %zu of %zu reference cases exact through ditrun tokenize --max-length %s\n", names[t],
             json_array_size(all) - bad, json_array_size(all), ml);
    }
    json_decref(ft);
  }
  /* chat: Z-Image renders with thinking, klein without */
  list = json_object_get(cases, "chat_template");
  for (size_t i = 0; i < json_array_size(list); i++) {
    const json_t *c = json_array_get(list, i);
    if (i >= 2) break; /* one prompt, both styles */
    char *model = json_is_true(json_object_get(c, "enable_thinking")) ? zimage : klein;
    char *args[] = {bin, "tokenize", "-m", model, "--chat", (char *)json_string_value(json_object_get(c, "prompt")),
                    NULL};
    int rc = run(args, out, sizeof out, err, sizeof err);
    CHECK_MSG(rc == 0 && line_matches(out, json_object_get(c, "ids")), "chat case %zu: exit %d, stderr: %s", i, rc,
              err);
  }

  /* bad usage and bad input: exit 2 and a message on stderr, nothing on stdout */
  char tokdir[1100], baddir[1100], badjson[1200];
  snprintf(tokdir, sizeof tokdir, "%s/tokenizer", zimage);
  snprintf(baddir, sizeof baddir, "%s/bad", a.tmp);
  snprintf(badjson, sizeof badjson, "%s/tokenizer.json", baddir);
  mkdir(baddir, 0755);
  FILE *f = fopen(badjson, "wb");
  if (f) {
    fputs("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}", f);
    fclose(f);
  }
  struct {
    char *args[8];
    const char *needle;
  } bad[] = {
      {{bin, "tokenize", "--frobnicate", "-m", zimage, "x", NULL}, "unknown option"},
      {{bin, "tokenize", "hello", NULL}, "missing -m"},
      {{bin, "tokenize", "-m", zimage, NULL}, "missing TEXT"},
      {{bin, "tokenize", "-m", NULL}, "needs a folder"},
      {{bin, "tokenize", "-m", zimage, "a", "b", NULL}, "more than one"},
      {{bin, "tokenize", "-m", baddir, "x", NULL}, "WordPiece"},
      {{bin, "tokenize", "-m", (char *)a.tmp, "x", NULL}, "no tokenizer here"},
      {{bin, "tokenize", "-m", zimage, "ab\xff", NULL}, "offset 2"},
      {{bin, "tokenize", "-m", tokdir, "--chat", "x", NULL}, "no chat template"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int rc = run(bad[i].args, out, sizeof out, err, sizeof err);
    CHECK_MSG(rc == 2 && strstr(err, bad[i].needle) && out[0] == 0, "bad case %zu: exit %d, stdout \"%s\", stderr %s",
              i, rc, out, err);
    printf("bad case %zu: exit %d: %s", i, rc, err);
  }
  char *help[] = {bin, "tokenize", "--help", NULL};
  CHECK(run(help, out, sizeof out, err, sizeof err) == 0 && strstr(out, "usage: ditrun tokenize"));
  json_decref(cases);
  return dt_finish();
}
