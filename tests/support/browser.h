/* Headless browsers driven from a test: Chromium over its DevTools protocol on a pipe
 * (--remote-debugging-pipe: NUL-ended JSON messages on fds 3 and 4), Firefox over Marionette
 * (TCP on the port it writes to its profile; "length:json" messages). Enough to open a page,
 * evaluate an expression and take a screenshot. */
#ifndef DT_BROWSER_H
#define DT_BROWSER_H

#include <stdbool.h>
#include <stddef.h>

typedef struct dt_browser dt_browser;

/* Starts the browser ("chromium" or "firefox") headless on url, with its profile and log
 * under tmp. NULL when it is not installed or does not start (*why says which). */
dt_browser *dt_browser_open(const char *kind, const char *url, const char *tmp, char *why, size_t len);
/* The value of a JavaScript expression that gives a string (malloc'd), or NULL. */
char *dt_browser_eval(dt_browser *b, const char *expr);
/* The page as a PNG at path; false when it could not be taken. */
bool dt_browser_screenshot(dt_browser *b, const char *path);
void dt_browser_close(dt_browser *b);
/* Standard base64 to bytes (malloc'd, *n of them), or NULL for a character outside it. */
unsigned char *dt_base64_decode(const char *s, size_t *n);

#endif
