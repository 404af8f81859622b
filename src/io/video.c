/* Video output shared by its formats (see video.h): the checks, and frames as a folder of PNGs
 * with the sound as a WAV. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/png.h"
#include "io/video.h"

dit_status dit_video_check(const char *what, const char *path, const dit_video *v, bool even, dit_error *err) {
  if (!v || !v->rgb || v->n_frames < 1)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s %s: no frames to write", what, path);
  if (v->width < 2 || v->height < 2 || v->width > 8192 || v->height > 8192 || (even && (v->width % 2 || v->height % 2)))
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s %s: frame size %dx%d: width and height must be %s2..8192", what,
                      path, v->width, v->height, even ? "even, " : "");
  if (v->fps_num < 1 || v->fps_den < 1 || v->fps_num / v->fps_den > 1000)
    return dit_errorf(err, DIT_ERR_INVALID_ARG, "%s %s: frame rate %d/%d: must be positive, at most 1000", what, path,
                      v->fps_num, v->fps_den);
  return v->sound.samples ? dit_sound_check(what, path, &v->sound, err) : DIT_OK;
}

/* Removes the files this writer put in tmp (n frames, the WAV), then tmp. */
static void remove_partial(const char *tmp, int n) {
  char p[4300];
  for (int i = 0; i < n; i++) {
    snprintf(p, sizeof p, "%s/frame_%05d.png", tmp, i + 1);
    unlink(p);
  }
  snprintf(p, sizeof p, "%s/audio.wav", tmp);
  unlink(p);
  rmdir(tmp);
}

/* rename() that refuses an existing to (an empty folder there would be replaced); where the
 * file system lacks RENAME_NOREPLACE, checked first (a small race). */
static int move_dir(const char *from, const char *to) {
  if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) return -1;
  struct stat st;
  if (stat(to, &st) == 0) {
    errno = EEXIST;
    return -1;
  }
  return rename(from, to);
}

dit_status dit_video_write_frames(const char *dir, const dit_video *v, dit_error *err) {
  if (!dir || !*dir) return dit_errorf(err, DIT_ERR_INVALID_ARG, "frames: no output folder");
  DIT_TRY(dit_video_check("frames", dir, v, false, err));
  if (strlen(dir) > 4000) return dit_errorf(err, DIT_ERR_INVALID_ARG, "frames: the folder name is too long");
  struct stat st;
  if (stat(dir, &st) == 0)
    return dit_errorf(err, DIT_ERR_IO, "cannot write frames to %s: it already exists (refusing to overwrite it)", dir);
  char parent[4096], tmp[4200], p[4300];
  snprintf(parent, sizeof parent, "%s", dir);
  size_t n = strlen(parent);
  while (n > 1 && parent[n - 1] == '/') parent[--n] = 0;
  char *slash = strrchr(parent, '/');
  if (!slash) snprintf(parent, sizeof parent, ".");
  else slash == parent ? (void)(slash[1] = 0) : (void)(*slash = 0);
  snprintf(tmp, sizeof tmp, "%s/.ditrun-frames-XXXXXX", parent);
  if (!mkdtemp(tmp))
    return dit_errorf(err, DIT_ERR_IO, "cannot write frames to %s: cannot create a folder in %s: %s", dir, parent,
                      strerror(errno));
  dit_status s = DIT_OK;
  int written = 0;
  const size_t frame = (size_t)v->width * (size_t)v->height * 3;
  for (; s == DIT_OK && written < v->n_frames; written++) {
    snprintf(p, sizeof p, "%s/frame_%05d.png", tmp, written + 1);
    s = dit_png_write(p, v->rgb + (size_t)written * frame, v->width, v->height, NULL, NULL, 0, false, err);
  }
  if (s == DIT_OK && v->sound.samples) {
    snprintf(p, sizeof p, "%s/audio.wav", tmp);
    s = dit_wav_write(p, &v->sound, false, err);
  }
  if (s == DIT_OK && move_dir(tmp, dir) != 0) {
    int e = errno;
    s = dit_errorf(err, DIT_ERR_IO, "cannot write frames to %s: moving the finished folder into place: %s", dir,
                   e == EEXIST ? "it appeared meanwhile" : strerror(e));
  }
  if (s != DIT_OK) remove_partial(tmp, written);
  return s;
}
