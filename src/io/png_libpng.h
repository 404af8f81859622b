/* libpng error handling shared by the PNG writer (png.c) and reader (png_read.c): libpng
 * reports errors by longjmp to the jmp_buf of the error pointer, and keeps its message. */
#ifndef DIT_IO_PNG_LIBPNG_H
#define DIT_IO_PNG_LIBPNG_H

#include <png.h>
#include <setjmp.h>

typedef struct dit_png_jmp {
  char msg[256]; /* libpng's error message */
  jmp_buf jmp;
} dit_png_jmp;

/* Error and warning callbacks for png_create_*_struct with a dit_png_jmp as the error
 * pointer: the error keeps the message and jumps; warnings are dropped (never printed). */
void dit_png_on_error(png_structp png, png_const_charp msg);
void dit_png_on_warning(png_structp png, png_const_charp msg);

#endif
