// Names for berth's threads, as `top -H`, `ps -L`, perf and gdb show them
// (/proc/<pid>/task/<tid>/comm). A process with a hundred threads called
// "berth" cannot be read; one whose threads say "store writer",
// "i:persistentvol" and "pv binder: clai" can.
#pragma once

#include <cstddef>
#include <string_view>
#include <thread>
#include <utility>

namespace berth {

// Names the calling thread: the first 15 bytes of `name` (the kernel's
// limit; longer names are cut, not refused). Allocates nothing, so a thread
// that names itself first does not get a heap of its own for it.
void NameThisThread(std::string_view name);

// The calling thread's name ("" when it cannot be read).
std::string_view ThisThreadName(char (&buf)[16]);

// A thread that names itself `name` (a literal: it is read on the new
// thread), then runs `fn`.
template <size_t N, typename F>
std::thread NamedThread(const char (&name)[N], F fn) {
  return std::thread([&name, fn = std::move(fn)]() mutable {
    NameThisThread(name);
    fn();
  });
}

}  // namespace berth
