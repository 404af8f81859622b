/* See cli_signals.h. */
#include "cli_signals.h"

#include <stddef.h>

/* Ends the process as the signal's default action does (the exit status says which signal). */
static void die_by(int sig) {
  sigset_t one;
  signal(sig, SIG_DFL);
  sigemptyset(&one);
  sigaddset(&one, sig);
  pthread_sigmask(SIG_UNBLOCK, &one, NULL);
  raise(sig);
}

static void *wait_for_signals(void *arg) {
  cli_signals *g = arg;
  for (;;) {
    int sig = 0;
    if (sigwait(&g->set, &sig) != 0) continue;
    pthread_mutex_lock(&g->mu);
    const bool later = g->writing;
    if (later && !g->pending) g->pending = sig;
    pthread_mutex_unlock(&g->mu);
    if (!later) die_by(sig);
  }
  return NULL;
}

void cli_signals_start(cli_signals *g) {
  sigemptyset(&g->set);
  sigaddset(&g->set, SIGINT);
  sigaddset(&g->set, SIGTERM);
  sigaddset(&g->set, SIGHUP);
  g->writing = false, g->pending = 0, g->started = false;
  if (pthread_mutex_init(&g->mu, NULL) != 0) return;
  sigset_t old;
  if (pthread_sigmask(SIG_BLOCK, &g->set, &old) != 0) return;
  if (pthread_create(&g->waiter, NULL, wait_for_signals, g) != 0) {
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return;
  }
  pthread_detach(g->waiter);
  g->started = true;
}

void cli_signals_hold(cli_signals *g) {
  if (!g->started) return;
  pthread_mutex_lock(&g->mu);
  g->writing = true;
  pthread_mutex_unlock(&g->mu);
}

void cli_signals_release(cli_signals *g) {
  if (!g->started) return;
  pthread_mutex_lock(&g->mu);
  g->writing = false;
  const int sig = g->pending;
  pthread_mutex_unlock(&g->mu);
  if (sig) die_by(sig);
}
