#include "train/shutdown.h"

#include <unistd.h>

#include <cstring>
#include <vector>

#include "util/check.h"

namespace mxdp {

namespace {

volatile std::sig_atomic_t g_caught = 0;
volatile std::sig_atomic_t g_speaker = 0;

void say(const char* s) {
  // write(2) is async-signal-safe; a failed notice is not worth more.
  const ssize_t r = ::write(STDERR_FILENO, s, std::strlen(s));
  (void)r;
}

void on_signal(int sig) {
  if (g_caught != 0) {
    // The second signal: stop now, as the default action does.
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_caught = sig;
  if (g_speaker)
    say(sig == SIGINT ? "\nmxdp: SIGINT: stopping after the step in flight (again to stop at once)\n"
                      : "\nmxdp: SIGTERM: stopping after the step in flight (again to stop at once)\n");
}

void install(int sig, struct sigaction* old) {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // system calls in flight go on (a write, a collective's poll)
  MXDP_CHECK(::sigaction(sig, &sa, old) == 0, "could not install the handler of ", signal_name(sig));
}

}  // namespace

ShutdownSignals::ShutdownSignals(bool speaker) {
  g_caught = 0;
  g_speaker = speaker ? 1 : 0;
  install(SIGINT, &old_int_);
  install(SIGTERM, &old_term_);
}

ShutdownSignals::~ShutdownSignals() {
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
}

int ShutdownSignals::caught() { return int(g_caught); }

int agreed_signal(Communicator& comm, int mine) {
  std::vector<int32_t> all(size_t(comm.size()), 0);
  all[size_t(comm.rank())] = mine;
  comm.host_all_gather(all.data(), sizeof(int32_t));
  for (int32_t s : all)
    if (s != 0) return s;
  return 0;
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "a signal";
  }
}

}  // namespace mxdp
