/* `ditrun info` end to end: a model folder, a component folder, a weights file with
 * --tensors (exit 0 and the expected facts on stdout), a bad file (exit 2, a message
 * naming the file and the problem on stderr), a missing path (exit 1), bad usage (2);
 * `info --system` (the CPU kernel path, DIT_CPU_ISA's choice and its refusal). */
#include <stdlib.h>
#include <string.h>

#include "testing.h"

static char g_out[1 << 16];

/* Runs `ditrun info ARGS`, stdout and stderr to separate files; returns the exit code
 * and leaves stdout in g_out, stderr in err. */
static int run_info(const dt_args *a, const char *args, char *err, size_t errlen) {
  char cmd[16384], out_file[4096], err_file[4096];
  snprintf(out_file, sizeof out_file, "%s/info.out", a->tmp);
  snprintf(err_file, sizeof err_file, "%s/info.err", a->tmp);
  snprintf(cmd, sizeof cmd, "'%s/ditrun' info %s >'%s' 2>'%s'", a->bin, args, out_file, err_file);
  int rc = dt_run(cmd, NULL);
  if (dt_read_file(out_file, g_out, sizeof g_out) < 0) g_out[0] = 0;
  if (dt_read_file(err_file, err, errlen) < 0) err[0] = 0;
  return rc;
}

int main(int argc, char **argv) {
  dt_args a;
  dt_init(argc, argv, &a);
  char args[8192], err[8192];
  const char *model = a.fixture;
  char root[4096];
  if (!model) {
    snprintf(root, sizeof root, "%s/models/zimage-tiny", a.data);
    model = root;
  }
  snprintf(args, sizeof args, "'%s'", model);
  int rc = run_info(&a, args, err, sizeof err);
  CHECK_MSG(rc == 0, "exit %d: %s", rc, err);
  if (!a.fixture) {
    CHECK_MSG(strstr(g_out, "ZImagePipeline") && strstr(g_out, "ZImageTransformer2DModel"), "%s", g_out);
    /* transformer: 1,417,040 parameters (the sum of the fixture's tensor sizes) */
    CHECK_MSG(strstr(g_out, "parameters: 1417040"), "%s", g_out);
    CHECK_MSG(strstr(g_out, "BF16"), "%s", g_out);
  }

  snprintf(args, sizeof args, "--tensors '%s/models/zimage-tiny/components.safetensors'", a.data);
  rc = run_info(&a, args, err, sizeof err);
  CHECK_MSG(rc == 0, "exit %d: %s", rc, err);
  CHECK_MSG(strstr(g_out, "dit_x0 F32 [16, 1, 16, 12]") && strstr(g_out, "te_input_ids I32 [1, 64]"), "%s", g_out);

  snprintf(args, sizeof args, "'%s/models/flux2-klein-tiny/transformer'", a.data);
  rc = run_info(&a, args, err, sizeof err);
  CHECK_MSG(rc == 0 && strstr(g_out, "Flux2Transformer2DModel"), "exit %d: %s %s", rc, g_out, err);

  /* a bad file: 16 bytes whose header length runs past the end */
  char bad[4096];
  snprintf(bad, sizeof bad, "%s/bad.safetensors", a.tmp);
  FILE *f = fopen(bad, "wb");
  if (f) {
    const unsigned char b[16] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    fwrite(b, 1, sizeof b, f);
    fclose(f);
  }
  snprintf(args, sizeof args, "'%s'", bad);
  rc = run_info(&a, args, err, sizeof err);
  CHECK_MSG(rc == 2, "bad file: exit %d", rc);
  CHECK_MSG(strstr(err, bad) && strstr(err, "runs past the end"), "bad file stderr: %s", err);

  snprintf(args, sizeof args, "'%s/does-not-exist'", a.tmp);
  rc = run_info(&a, args, err, sizeof err);
  CHECK_MSG(rc == 1 && strstr(err, "does-not-exist"), "missing: exit %d: %s", rc, err);

  rc = run_info(&a, "--bogus x", err, sizeof err);
  CHECK_MSG(rc == 2 && strstr(err, "--bogus"), "bad option: exit %d: %s", rc, err);
  rc = run_info(&a, "", err, sizeof err);
  CHECK_MSG(rc == 2 && strstr(err, "usage"), "no path: exit %d: %s", rc, err);

  /* --system: the CPU's kernel path, as chosen or as DIT_CPU_ISA forces it; a path no CPU
   * has is refused */
  rc = run_info(&a, "--system", err, sizeof err);
  CHECK_MSG(rc == 0 && strstr(g_out, "cpu: ") && strstr(g_out, "GEMM kernel path: ") && strstr(g_out, "cuda: "),
            "--system: exit %d: %s%s", rc, g_out, err);
  printf("%s", g_out);
  setenv("DIT_CPU_ISA", "portable", 1);
  rc = run_info(&a, "--system", err, sizeof err);
  CHECK_MSG(rc == 0 && strstr(g_out, "GEMM kernel path: portable (DIT_CPU_ISA=portable)"), "%s%s", g_out, err);
  setenv("DIT_CPU_ISA", "sse1", 1);
  rc = run_info(&a, "--system", err, sizeof err);
  CHECK_MSG(rc == 2 && strstr(err, "DIT_CPU_ISA=sse1"), "bad DIT_CPU_ISA: exit %d: %s", rc, err);
  unsetenv("DIT_CPU_ISA");
  snprintf(args, sizeof args, "--system '%s'", model);
  rc = run_info(&a, args, err, sizeof err);
  CHECK_MSG(rc == 2 && strstr(err, "--system takes no PATH"), "--system PATH: exit %d: %s", rc, err);
  return dt_finish();
}
