// Helpers shared by the test files: a free loopback port, child processes with a deadline.
#pragma once

#include <gtest/gtest.h>
#include <mcore_init.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

extern char **environ;

namespace mcore_test {

// Whether `port` on 127.0.0.1 can be bound now (0: the kernel picks); the port bound, or 0.
inline uint16_t bind_and_release(uint16_t port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    socklen_t len = sizeof addr;
    uint16_t got = 0;
    if (::bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) == 0)
        got = ntohs(addr.sin_port);
    ::close(fd);
    return got;
}

// A TCP port on 127.0.0.1 that was free a moment ago (bound, then released): from
// MCORE_PORT_RANGE=LO-HI when set, outside the kernel's ephemeral range, as
// mcore_init::store::tcp::free_port and scripts/lib/ports.py pick it; else the kernel's pick.
// 0 when there is none.
inline uint16_t free_port() {
    const char *spec = std::getenv("MCORE_PORT_RANGE");
    unsigned lo = 0, hi = 0;
    if (spec == nullptr || std::sscanf(spec, "%u-%u", &lo, &hi) != 2 || lo < 1 || lo > hi || hi > 65535)
        return bind_and_release(0);
    unsigned eph_lo = 0, eph_hi = 0;
    if (FILE *f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
        if (std::fscanf(f, "%u %u", &eph_lo, &eph_hi) != 2) eph_lo = eph_hi = 0;
        std::fclose(f);
    }
    static unsigned calls = 0;
    const unsigned span = hi - lo + 1;
    const unsigned start = static_cast<unsigned>(::getpid()) * 7919u + (calls++) * 104729u +
                           static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count());
    for (unsigned i = 0; i < span; ++i) {
        const unsigned port = lo + (start + i) % span;
        if (port >= eph_lo && port <= eph_hi) continue;
        if (bind_and_release(static_cast<uint16_t>(port)) != 0) return static_cast<uint16_t>(port);
    }
    return 0;
}

// Sets (or, with nullptr, removes) an environment variable for the scope of the object.
class ScopedEnv {
  public:
    ScopedEnv(const char *name, const char *value) : name_(name) {
        const char *old = std::getenv(name);
        had_ = old != nullptr;
        if (had_) old_ = old;
        if (value) ::setenv(name, value, 1); else ::unsetenv(name);
    }
    ~ScopedEnv() {
        if (had_) ::setenv(name_.c_str(), old_.c_str(), 1); else ::unsetenv(name_.c_str());
    }
    ScopedEnv(const ScopedEnv &) = delete;
    ScopedEnv &operator=(const ScopedEnv &) = delete;

  private:
    std::string name_, old_;
    bool had_ = false;
};

// One child process: `argv` run with this process's environment plus `extra_env` ("K=V").
inline pid_t spawn(const std::vector<std::string> &argv, const std::vector<std::string> &extra_env) {
    // Everything the child needs is built before fork: between fork and exec only
    // async-signal-safe calls happen.
    std::vector<std::string> env_strings;
    for (char **e = environ; *e; ++e) {
        std::string kv(*e);
        bool overridden = false;
        for (const auto &x : extra_env)
            if (kv.compare(0, x.find('=') + 1, x, 0, x.find('=') + 1) == 0) overridden = true;
        if (!overridden) env_strings.push_back(kv);
    }
    for (const auto &x : extra_env) env_strings.push_back(x);
    std::vector<char *> envp, args;
    for (auto &s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_copy = argv;
    for (auto &s : argv_copy) args.push_back(s.data());
    args.push_back(nullptr);
    pid_t pid = ::fork();
    if (pid == 0) {
        ::execve(args[0], args.data(), envp.data());
        ::_exit(127);
    }
    return pid;
}

// Waits for all children until `deadline_s`; kills those still running then. Returns each
// child's exit code (128 + signal when killed by a signal, -1 when it hit the deadline).
inline std::vector<int> wait_all(const std::vector<pid_t> &pids, double deadline_s) {
    std::vector<int> codes(pids.size(), -2);
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(deadline_s);
    size_t left = pids.size();
    while (left > 0) {
        for (size_t i = 0; i < pids.size(); ++i) {
            if (codes[i] != -2 || pids[i] <= 0) {
                if (pids[i] <= 0 && codes[i] == -2) { codes[i] = 126; --left; }
                continue;
            }
            int status = 0;
            pid_t r = ::waitpid(pids[i], &status, WNOHANG);
            if (r == pids[i]) {
                codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                --left;
            }
        }
        if (left == 0) break;
        if (std::chrono::steady_clock::now() > end) {
            for (size_t i = 0; i < pids.size(); ++i)
                if (codes[i] == -2) {
                    ::kill(pids[i], SIGKILL);
                    ::waitpid(pids[i], nullptr, 0);
                    codes[i] = -1;
                }
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return codes;
}

inline std::string last_error() { return mcore_last_error_message(); }

}  // namespace mcore_test
