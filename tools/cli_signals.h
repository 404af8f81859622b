/* Output files and the signals that end a run (SIGINT, SIGTERM, SIGHUP). A signal during the
 * run ends the process at once, as it would without this, with nothing written; one that
 * arrives while an output is being written (a temporary file or folder beside the target,
 * renamed into place when complete) takes effect once the write is over, so that no
 * temporary is left behind and the target is absent or complete.
 *
 * How: cli_signals_start blocks the three signals in the calling thread before any other
 * thread exists (every later thread inherits the block) and starts one thread that waits for
 * them; that thread ends the process with the signal's default action, unless a write is
 * going on, when it leaves that to cli_signals_release. */
#ifndef DIT_CLI_SIGNALS_H
#define DIT_CLI_SIGNALS_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>

typedef struct cli_signals {
  sigset_t set;
  pthread_mutex_t mu;
  pthread_t waiter;
  bool started;  /* false: starting failed; the signals keep their default actions */
  bool writing;  /* an output is being written */
  int pending;   /* a signal that came during the write (0: none) */
} cli_signals;

/* Call first in a subcommand, before anything starts a thread; g must outlive the process's
 * use of it (a subcommand's local that lives until it returns to main, which exits). */
void cli_signals_start(cli_signals *g);
/* Around the write of an output. */
void cli_signals_hold(cli_signals *g);
void cli_signals_release(cli_signals *g);

#endif
