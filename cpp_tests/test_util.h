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
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

extern char **environ;

namespace mcore_test {

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then released).
inline uint16_t free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof addr;
    uint16_t port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) == 0)
        port = ntohs(addr.sin_port);
    ::close(fd);
    return port;
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
