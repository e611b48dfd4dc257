// Shared by the benchmark harnesses.
#pragma once

#include <unistd.h>

#include <cstdio>

namespace berth::bench {

// The process's resident set size now, in KiB (/proc/self/statm).
inline long CurrentRssKiB() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (f != nullptr) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

}  // namespace berth::bench
