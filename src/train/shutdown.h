// Stopping a job cleanly on SIGINT (Ctrl-C) or SIGTERM (what Slurm and
// Kubernetes send before they kill a job at its time limit), issue 21.
//
// While a ShutdownSignals lives, the first SIGINT or SIGTERM only sets a flag
// (and says, once, what will happen); the trainer finishes the step in flight,
// the ranks agree (agreed_signal, one small host all-gather per step: a signal
// that reached any rank stops every rank at the same step), the job saves a
// checkpoint when it has a save directory and exits non-zero. A second signal
// ends the process at once, as the default action would. The handlers before
// are restored when it goes.
#pragma once

#include <csignal>

#include "comm/comm.h"

namespace mxdp {

class ShutdownSignals {
 public:
  // speaker: this process prints the notice (rank 0), the others stay quiet.
  explicit ShutdownSignals(bool speaker);
  ~ShutdownSignals();
  ShutdownSignals(const ShutdownSignals&) = delete;
  ShutdownSignals& operator=(const ShutdownSignals&) = delete;

  // The first signal this process caught (SIGINT, SIGTERM), or 0.
  static int caught();

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

// Collective: the signal any rank caught (the lowest rank's, when several did),
// or 0; every rank gets the same answer.
int agreed_signal(Communicator& comm, int mine);

// "SIGINT", "SIGTERM", or "signal N".
const char* signal_name(int sig);

}  // namespace mxdp
