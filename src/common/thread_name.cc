#include "common/thread_name.h"

#include <pthread.h>

#include <algorithm>
#include <cstring>

namespace berth {

void NameThisThread(std::string_view name) {
  char buf[16];
  const size_t n = std::min(name.size(), sizeof(buf) - 1);
  std::memcpy(buf, name.data(), n);
  buf[n] = '\0';
  // Fails only for a name over the limit, which the cut above rules out;
  // a thread that keeps its old name is no reason to stop.
  (void)::pthread_setname_np(::pthread_self(), buf);
}

std::string_view ThisThreadName(char (&buf)[16]) {
  if (::pthread_getname_np(::pthread_self(), buf, sizeof(buf)) != 0) return {};
  return std::string_view(buf);
}

}  // namespace berth
