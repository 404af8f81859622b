/* Subcommands of the ditrun CLI; each returns the process exit code
 * (0 ok, 1 runtime failure, 2 bad usage or bad input). argv[0] is the command name. */
#ifndef DIT_CLI_H
#define DIT_CLI_H

int cli_info(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_generate(int argc, char **argv);

#endif
