// berth's pause program: the first process of every pod sandbox. It holds
// the pod's namespaces (network, IPC, and PID when the pod shares one) for
// the containers that join them, reaps orphans when it is PID 1 of a shared
// PID namespace, and exits 0 on SIGINT or SIGTERM. Statically linked, no
// libstdc++; berth's build packs it into the sandbox image
// (berth.local/pause:1), so no registry is ever asked for one.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

void Stop(int) { _exit(0); }

void Reap(int) {
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && argv[1][0] == '-' && argv[1][1] == 'v') {
    static const char kVersion[] = "berth pause\n";
    (void)!write(1, kVersion, sizeof(kVersion) - 1);
    return 0;
  }
  struct sigaction stop = {};
  stop.sa_handler = Stop;
  sigaction(SIGINT, &stop, nullptr);
  sigaction(SIGTERM, &stop, nullptr);
  struct sigaction reap = {};
  reap.sa_handler = Reap;
  reap.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &reap, nullptr);
  for (;;) pause();
}
