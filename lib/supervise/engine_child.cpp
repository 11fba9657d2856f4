// The engine child as a process: started with its pipes, handed its request, told alive or
// reaped, and how it died said in words (supervisor.cpp watches it).
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/base/files.h"
#include "core/base/log.h"
#include "core/base/text.h"
#include "supervise/drive.h"

namespace batchcheck {

namespace {

// The journal's pipe: at 5,000 small batches a second and ~300 bytes a batch, one of the
// watcher's 10 ms naps fills ~15 KiB, and 256 KiB (the default is 64) leaves room for
// findings' longer lines.
constexpr int kJournalPipeBytes = 256 << 10;

}  // namespace

OutputRelay::OutputRelay(int fd) : fd_(fd), thread_([this] { run(); }) {}

OutputRelay::~OutputRelay() { finish(); }

void OutputRelay::finish() {
  if (!thread_.joinable()) return;
  stop_ = true;
  thread_.join();
  ::close(fd_);
}

void OutputRelay::run() {
  constexpr std::size_t kLongestLine = 64 << 10;  // a longer one is relayed in pieces
  constexpr int kReadsAfterStop = 64;            // a child still writing is not waited for long
  std::string pending;
  std::vector<char> chunk(1 << 14);
  int after_stop = 0;
  for (;;) {
    pollfd p{fd_, POLLIN, 0};
    const int n = ::poll(&p, 1, 100);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {
      if (stop_) break;  // reaped, and nothing more came: a process it started may hold the pipe
      continue;
    }
    if (stop_ && ++after_stop > kReadsAfterStop) break;
    const ssize_t got = ::read(fd_, chunk.data(), chunk.size());
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    pending.append(chunk.data(), static_cast<std::size_t>(got));
    std::size_t start = 0, nl;
    while ((nl = pending.find('\n', start)) != std::string::npos) {
      relay_child_line(std::string_view(pending).substr(start, nl - start));
      start = nl + 1;
    }
    pending.erase(0, start);
    if (pending.size() >= kLongestLine) {
      relay_child_line(pending);
      pending.clear();
    }
  }
  if (!pending.empty()) relay_child_line(pending);
}

// The engine child has its request's read end on fd 3 and the journal's write end on fd 4;
// its stderr and stdout are the relay's pipe: a print() in the model never reaches the report.
EngineChild start_engine_child(const SupervisorOptions& opt) {
  int req[2], ev[2], output[2];
  if (::pipe2(req, O_CLOEXEC) != 0 || ::pipe2(ev, O_CLOEXEC) != 0 || ::pipe2(output, O_CLOEXEC) != 0) {
    throw std::runtime_error("cannot start the scan engine: " + std::string(std::strerror(errno)));
  }
  std::vector<std::string> args = opt.args;
  args.insert(args.begin(), opt.engine);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The environment, made before fork: the child may only call what is async-signal-safe.
  std::vector<std::string> env = opt.env;
  for (char** e = environ; *e; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('=') + 1);
    bool replaced = false;
    for (const auto& o : opt.env) replaced = replaced || o.rfind(name, 0) == 0;
    if (!replaced) env.push_back(entry);
  }
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("cannot start the scan engine: fork: " + std::string(std::strerror(errno)));
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec.
    ::setpgid(0, 0);  // the terminal's Ctrl-C is the parent's to handle
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    int r = ::fcntl(req[0], F_DUPFD, 10), e = ::fcntl(ev[1], F_DUPFD, 10);
    if (r < 0 || e < 0 || ::dup2(r, 3) < 0 || ::dup2(e, 4) < 0 || ::dup2(output[1], 2) < 0 || ::dup2(2, 1) < 0) ::_exit(127);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGPIPE, &dfl, nullptr);
    // A --jobs split request (SIGUSR1) that arrives before the replay listens is dropped,
    // never fatal.
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGUSR1, &ign, nullptr);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(req[0]);
  ::close(ev[1]);
  ::close(output[1]);
  // Room for the lines written while the watcher naps (see watch()); the default 64 KiB
  // is a few hundred small batches. Best effort: a smaller pipe only makes the child wait.
  ::fcntl(ev[0], F_SETPIPE_SZ, kJournalPipeBytes);
  return {pid, ev[0], req[1], std::make_shared<OutputRelay>(output[0])};
}

void send_request(EngineChild& child, const std::string& request) {
  write_all(child.request, request);  // a failure: the child died already, its exit status says how
  ::close(child.request);
  child.request = -1;
}

bool engine_child_alive(const EngineChild& child) {
  siginfo_t info{};
  // WNOWAIT: a child that ended stays to be reaped by discard_engine_child.
  return child.pid > 0 && ::waitid(P_PID, static_cast<id_t>(child.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == 0;
}

void discard_engine_child(EngineChild& child) {
  if (child.pid <= 0) return;
  ::kill(child.pid, SIGKILL);
  if (child.request >= 0) ::close(child.request);
  ::close(child.events);
  int status = 0;
  while (::waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (child.output) child.output->finish();
  child = {};
}

// A stack or address-space limit small enough to crash LibTorch, said in the error.
std::string limits_note() {
  rlimit stack{}, as{};
  std::string note;
  if (::getrlimit(RLIMIT_STACK, &stack) == 0 && stack.rlim_cur != RLIM_INFINITY && stack.rlim_cur < (rlim_t{8} << 20)) {
    note += "; the stack is limited to " + std::to_string(stack.rlim_cur >> 10) + " KiB (ulimit -s), which can crash LibTorch";
  }
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    note += "; the address space is limited to " + std::to_string(as.rlim_cur >> 20) + " MiB (ulimit -v)";
  }
  return note;
}

std::string describe_signal(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV (segmentation fault)";
    case SIGBUS: return "SIGBUS (bus error)";
    case SIGABRT: return "SIGABRT (aborted)";
    case SIGFPE: return "SIGFPE (arithmetic exception)";
    case SIGILL: return "SIGILL (illegal instruction)";
    case SIGKILL: return "SIGKILL (killed: out of memory?)";
    default: {
      const char* name = ::sigabbrev_np(sig);
      return name ? std::string("SIG") + name : "signal " + std::to_string(sig);
    }
  }
}

}  // namespace batchcheck
