/* Helpers shared by the fuzz targets (header-only: each target is one executable, and
 * tests/test_fuzz_corpus.c replays the corpora through the release CLI instead).
 * Fuzz inputs that are files are written into a private scratch folder, on /dev/shm when
 * it exists so the disk is not worn. */
#ifndef DIT_FUZZ_UTIL_H
#define DIT_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The process's scratch folder (created on first use; abort if impossible: a harness bug). */
static const char *fz_dir(void) {
  static char dir[256];
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "%s/ditrun-fuzz-XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (!mkdtemp(dir)) abort();
  }
  return dir;
}

/* Writes bytes to dir/name (name may contain one '/': the subfolder is created). */
static void fz_write(const char *name, const uint8_t *data, size_t size) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", fz_dir(), name);
  char *slash = strrchr(path, '/');
  if (slash && slash > path + strlen(fz_dir())) {
    *slash = 0;
    (void)!mkdir(path, 0700);
    *slash = '/';
  }
  FILE *f = fopen(path, "wb");
  if (!f) abort();
  if (size && fwrite(data, 1, size, f) != size) abort();
  if (fclose(f) != 0) abort();
}

static void fz_remove(const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", fz_dir(), name);
  unlink(path);
}

#endif
