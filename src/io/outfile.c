/* Output files (see outfile.h). */
#include "io/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static dit_status check_target(const char *path, const char *kind, bool overwrite, char **dir_out, dit_error *err) {
  size_t n = strlen(path);
  if (path[n - 1] == '/') return dit_errorf(err, DIT_ERR_IO, "cannot write %s %s: it names a directory", kind, path);
  struct stat st;
  if (stat(path, &st) == 0) {
    if (S_ISDIR(st.st_mode)) return dit_errorf(err, DIT_ERR_IO, "cannot write %s %s: it is a directory", kind, path);
    if (!overwrite)
      return dit_errorf(err, DIT_ERR_IO, "cannot write %s %s: the file already exists (refusing to overwrite it)",
                        kind, path);
    if (!S_ISREG(st.st_mode))
      return dit_errorf(err, DIT_ERR_IO, "cannot write %s %s: it exists and is not a regular file", kind, path);
  }
  const char *slash = strrchr(path, '/');
  char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
  if (!dir) return dit_errorf(err, DIT_ERR_NOMEM, "%s %s: out of memory", kind, path);
  if (stat(dir, &st) != 0) {
    int e = errno;
    dit_errorf(err, DIT_ERR_IO, "cannot write %s %s: folder %s %s", kind, path, dir,
               e == ENOENT ? "does not exist" : strerror(e));
    free(dir);
    return DIT_ERR_IO;
  }
  if (!S_ISDIR(st.st_mode)) {
    dit_errorf(err, DIT_ERR_IO, "cannot write %s %s: %s is not a folder", kind, path, dir);
    free(dir);
    return DIT_ERR_IO;
  }
  *dir_out = dir;
  return DIT_OK;
}

/* Moves tmp to path: atomically refusing an existing path unless overwrite. Returns 0 or
 * an errno (EEXIST when path appeared meanwhile). */
static int move_into_place(const char *tmp, const char *path, bool overwrite) {
  if (overwrite) return rename(tmp, path) == 0 ? 0 : errno;
#ifdef RENAME_NOREPLACE
  if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) return errno;
#endif
  /* Filesystem without RENAME_NOREPLACE: link() refuses an existing name atomically. */
  if (link(tmp, path) == 0) {
    unlink(tmp);
    return 0;
  }
  if (errno == EEXIST) return EEXIST;
  if (errno != EPERM && errno != ENOTSUP && errno != EOPNOTSUPP && errno != EMLINK) return errno;
  /* No hard links either (some FUSE / FAT mounts): check, then rename (a small race). */
  struct stat st;
  if (stat(path, &st) == 0) return EEXIST;
  return rename(tmp, path) == 0 ? 0 : errno;
}

static void sync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    (void)fsync(fd); /* best effort: makes the rename durable */
    close(fd);
  }
}

dit_status dit_outfile_error(const dit_outfile *o, const char *what, int e, dit_error *err) {
  const char *why = e == EACCES || e == EPERM ? "permission denied"
                    : e == ENOSPC          ? "no space left on the device (disk full)"
                    : e == EDQUOT          ? "disk quota exceeded"
                    : e == EROFS           ? "read-only file system"
                                           : strerror(e);
  return dit_errorf(err, DIT_ERR_IO, "cannot write %s %s: %s: %s", o->kind, o->path, what, why);
}

dit_status dit_outfile_begin(dit_outfile *o, const char *path, const char *kind, bool overwrite, dit_error *err) {
  memset(o, 0, sizeof *o);
  o->path = path, o->kind = kind, o->overwrite = overwrite;
  DIT_TRY(check_target(path, kind, overwrite, &o->dir, err));
  size_t tlen = strlen(o->dir) + 32;
  o->tmp = malloc(tlen);
  if (!o->tmp) {
    free(o->dir);
    return dit_errorf(err, DIT_ERR_NOMEM, "%s %s: out of memory", kind, path);
  }
  snprintf(o->tmp, tlen, "%s/.ditrun-out-XXXXXX", o->dir);
  int fd = mkstemp(o->tmp);
  dit_status s = DIT_OK;
  if (fd < 0) {
    s = dit_outfile_error(o, "cannot create a temporary file in its folder", errno, err);
  } else {
    (void)fchmod(fd, 0644); /* mkstemp makes 0600; outputs are normally readable by all */
    o->fp = fdopen(fd, "wb");
    if (!o->fp) {
      s = dit_outfile_error(o, "fdopen", errno, err);
      close(fd);
      unlink(o->tmp);
    }
  }
  if (s != DIT_OK) {
    free(o->tmp);
    free(o->dir);
    memset(o, 0, sizeof *o);
  }
  return s;
}

dit_status dit_outfile_end(dit_outfile *o, dit_status st, dit_error *err) {
  if (st == DIT_OK && fflush(o->fp) != 0) st = dit_outfile_error(o, "writing", errno, err);
  if (st == DIT_OK && fsync(fileno(o->fp)) != 0) st = dit_outfile_error(o, "fsync", errno, err);
  if (fclose(o->fp) != 0 && st == DIT_OK) st = dit_outfile_error(o, "closing", errno, err);
  if (st == DIT_OK) {
    int e = move_into_place(o->tmp, o->path, o->overwrite);
    if (e == EEXIST)
      st = dit_errorf(err, DIT_ERR_IO, "cannot write %s %s: the file already exists (refusing to overwrite it)",
                      o->kind, o->path);
    else if (e == EISDIR)
      st = dit_errorf(err, DIT_ERR_IO, "cannot write %s %s: it is a directory", o->kind, o->path);
    else if (e != 0)
      st = dit_outfile_error(o, "renaming the finished file into place", e, err);
    else
      sync_dir(o->dir);
  }
  if (st != DIT_OK) unlink(o->tmp); /* no partial file: the target was never touched */
  free(o->tmp);
  free(o->dir);
  memset(o, 0, sizeof *o);
  return st;
}
