/* Strict parsing of CLI numbers and small helpers shared by the subcommands. Numbers
 * must be plain decimal ("12abc", "0x10", "1e999", "" and leading spaces are errors). */
#ifndef DIT_CLI_ARGS_H
#define DIT_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ditrun.h"

/* Each returns true on success; on failure prints "ditrun CMD: OPTION: why" to stderr. */
bool cli_parse_int(const char *cmd, const char *opt, const char *s, long min, long max, int *out);
bool cli_parse_u64(const char *cmd, const char *opt, const char *s, uint64_t *out);
bool cli_parse_double(const char *cmd, const char *opt, const char *s, double min, double max, double *out);
/* A size in bytes: a decimal number with K, M, G or T (powers of 1024; "GB", "GiB" and lower
 * case accepted), or plain bytes: "24G", "512M", "1.5GiB". */
bool cli_parse_size(const char *cmd, const char *opt, const char *s, size_t *out);

/* The index of s in names[0..n); -1 after printing "ditrun CMD: OPTION: 's' is not A, B or C"
 * when it is none of them. */
int cli_parse_choice(const char *cmd, const char *opt, const char *s, const char *const *names, size_t n);
/* A weight type as ggml spells it (bf16, f32, q8_0, q6_k ... q2_k; blocks_only: the block
 * types only) into *out; false (after a message listing them) for anything else. */
bool cli_parse_wtype(const char *cmd, const char *opt, const char *s, bool blocks_only, dit_dtype *out);

/* --lora FILE[:SCALE]: the scale after the last ':' when that is a number (else all of v is the
 * file; default scale 1). The path is copied into path (len bytes); false after a message. */
bool cli_parse_lora(const char *cmd, const char *v, char *path, size_t len, dit_lora *out);

/* --cpu-precision fp32 | bf16. */
bool cli_parse_cpu_precision(const char *cmd, const char *s, dit_cpu_precision *out);
/* --precision bf16 | fp8 (a GPU's transformer GEMMs). */
bool cli_parse_gpu_precision(const char *cmd, const char *s, dit_gpu_precision *out);

/* The start of a subcommand, given what its option parser returned (0 run, 1 --help
 * printed, 2 bad usage): a context with `threads` threads (0: all online cores) to run
 * with, or NULL and the exit code in *code (0 after --help, 2 bad usage, 1 when out of
 * memory: "ditrun CMD: out of memory" printed). */
dit_ctx *cli_start(const char *cmd, int parsed, int threads, int *code);

/* Option matching: for "--width" style options accepts "--width V" and "--width=V";
 * short aliases ("-W") take the next argument. Returns the value or NULL (and sets *bad
 * when the value is missing). *i is advanced past a consumed value. */
const char *cli_opt_value(int argc, char **argv, int *i, const char *shrt, const char *lng, bool *matched,
                          bool *bad);

/* The name in names[0..n) closest to arg (edit distance, or arg a prefix of it), or NULL
 * when none is close enough to be a likely typo. "--" / "-" prefixes count as written. */
const char *cli_closest(const char *arg, const char *const *names, size_t n);
/* Prints "ditrun CMD: unknown option 'ARG'" plus "; did you mean 'X'?" when one is close,
 * and where to see the options. */
void cli_unknown_option(const char *cmd, const char *arg, const char *const *names, size_t n);

#endif
