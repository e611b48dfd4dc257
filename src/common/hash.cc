#include "common/hash.h"

#include <openssl/evp.h>

#include "fmt/format.h"

namespace berth {

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr);
  std::string out;
  out.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) fmt::format_to(std::back_inserter(out), "{:02x}", digest[i]);
  return out;
}

}  // namespace berth
