#include "api/json_text.h"

#include <array>
#include <charconv>
#include <cstdint>
#include <cstring>

namespace berth::api {
namespace {

using nlohmann::json;

// Bytes a string cannot be copied with as they are: control characters,
// '"' and '\\' (escaped), and every byte above 0x7F (UTF-8 to be checked).
constexpr std::array<bool, 256> kSpecial = [] {
  std::array<bool, 256> t{};
  for (int c = 0; c < 256; ++c) t[c] = c < 0x20 || c == '"' || c == '\\' || c >= 0x80;
  return t;
}();

// Appends to a string through a raw pointer: room is made once per value
// (std::string's push_back and append each check and are not inlined).
class Writer {
 public:
  explicit Writer(std::string& out) : out_(out), size_(out.size()) {}
  ~Writer() { out_.resize(size_); }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Room for `n` more bytes where the next byte goes.
  char* Room(size_t n) {
    if (size_ + n > out_.size()) out_.resize(std::max(out_.size() * 2, size_ + n + 256));
    return out_.data() + size_;
  }
  void Advance(char* end) { size_ = static_cast<size_t>(end - out_.data()); }
  void Put(char c) { *Room(1) = c, ++size_; }
  void Put(const char* s, size_t n) {
    std::memcpy(Room(n), s, n);
    size_ += n;
  }
  // A raw string of nlohmann's making (fallbacks).
  void Put(const std::string& s) { Put(s.data(), s.size()); }

 private:
  std::string& out_;
  size_t size_;  // bytes written; out_ beyond it is room
};

void WriteString(Writer& w, const std::string& s, json::error_handler_t errors) {
  const auto* in = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  // Worst case: every byte a \u00xx escape, and the quotes.
  char* p = w.Room(6 * n + 2);
  *p++ = '"';
  size_t run = 0;  // start of the bytes not copied yet
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = in[i];
    if (!kSpecial[c]) continue;
    if (c >= 0x80) {
      // Non-ASCII: nlohmann checks the UTF-8 and applies `errors`.
      w.Put(json(s).dump(-1, ' ', false, errors));
      return;
    }
    std::memcpy(p, in + run, i - run);
    p += i - run;
    run = i + 1;
    *p++ = '\\';
    switch (c) {
      case '"':
        *p++ = '"';
        break;
      case '\\':
        *p++ = '\\';
        break;
      case '\b':
        *p++ = 'b';
        break;
      case '\f':
        *p++ = 'f';
        break;
      case '\n':
        *p++ = 'n';
        break;
      case '\r':
        *p++ = 'r';
        break;
      case '\t':
        *p++ = 't';
        break;
      default: {  // other control characters, as nlohmann: \u00xx, lower case
        static constexpr char kHex[] = "0123456789abcdef";
        *p++ = 'u';
        *p++ = '0';
        *p++ = '0';
        *p++ = kHex[c >> 4];
        *p++ = kHex[c & 0xF];
      }
    }
  }
  std::memcpy(p, in + run, n - run);
  p += n - run;
  *p++ = '"';
  w.Advance(p);
}

template <typename Int>
void WriteInteger(Writer& w, Int v) {
  char* p = w.Room(24);
  w.Advance(std::to_chars(p, p + 24, v).ptr);
}

void Write(Writer& w, const json& v, json::error_handler_t errors) {
  switch (v.type()) {
    case json::value_t::object: {
      w.Put('{');
      bool first = true;
      for (const auto& [key, member] : v.get_ref<const json::object_t&>()) {
        if (!first) w.Put(',');
        first = false;
        WriteString(w, key, errors);
        w.Put(':');
        Write(w, member, errors);
      }
      w.Put('}');
      return;
    }
    case json::value_t::array: {
      w.Put('[');
      bool first = true;
      for (const json& item : v.get_ref<const json::array_t&>()) {
        if (!first) w.Put(',');
        first = false;
        Write(w, item, errors);
      }
      w.Put(']');
      return;
    }
    case json::value_t::string:
      WriteString(w, v.get_ref<const json::string_t&>(), errors);
      return;
    case json::value_t::boolean:
      if (v.get<bool>()) {
        w.Put("true", 4);
      } else {
        w.Put("false", 5);
      }
      return;
    case json::value_t::number_integer:
      WriteInteger(w, v.get<json::number_integer_t>());
      return;
    case json::value_t::number_unsigned:
      WriteInteger(w, v.get<json::number_unsigned_t>());
      return;
    case json::value_t::null:
      w.Put("null", 4);
      return;
    case json::value_t::number_float:  // nlohmann's shortest round trip
    case json::value_t::binary:
    case json::value_t::discarded:
    default:
      w.Put(v.dump(-1, ' ', false, errors));
      return;
  }
}

// ---- MessagePack ----

void PutBigEndian(Writer& w, uint8_t lead, uint64_t v, int bytes) {
  char* p = w.Room(9);
  *p++ = static_cast<char>(lead);
  for (int i = bytes - 1; i >= 0; --i) *p++ = static_cast<char>((v >> (8 * i)) & 0xFF);
  w.Advance(p);
}

// A length-prefixed header: `fix` | n when n <= fix_max, else the 8-, 16-
// or 32-bit form (lead bytes `l8` (0: none), `l16`, `l32`).
void PutHeader(Writer& w, size_t n, uint8_t fix, size_t fix_max, uint8_t l8, uint8_t l16, uint8_t l32) {
  if (n <= fix_max) {
    w.Put(static_cast<char>(fix | n));
  } else if (l8 != 0 && n <= 0xFF) {
    PutBigEndian(w, l8, n, 1);
  } else if (n <= 0xFFFF) {
    PutBigEndian(w, l16, n, 2);
  } else {
    PutBigEndian(w, l32, n, 4);
  }
}

void PutMsgpackString(Writer& w, const std::string& s) {
  PutHeader(w, s.size(), 0xA0, 31, 0xD9, 0xDA, 0xDB);
  w.Put(s.data(), s.size());
}

void PutMsgpackUnsigned(Writer& w, uint64_t v) {
  if (v < 128) {
    w.Put(static_cast<char>(v));
  } else if (v <= 0xFF) {
    PutBigEndian(w, 0xCC, v, 1);
  } else if (v <= 0xFFFF) {
    PutBigEndian(w, 0xCD, v, 2);
  } else if (v <= 0xFFFFFFFF) {
    PutBigEndian(w, 0xCE, v, 4);
  } else {
    PutBigEndian(w, 0xCF, v, 8);
  }
}

void PutMsgpack(Writer& w, const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      w.Put(static_cast<char>(0xC0));
      return;
    case json::value_t::boolean:
      w.Put(static_cast<char>(v.get<bool>() ? 0xC3 : 0xC2));
      return;
    case json::value_t::number_unsigned:
      PutMsgpackUnsigned(w, v.get<json::number_unsigned_t>());
      return;
    case json::value_t::number_integer: {
      const int64_t i = v.get<json::number_integer_t>();
      if (i >= 0) {
        PutMsgpackUnsigned(w, static_cast<uint64_t>(i));
      } else if (i >= -32) {
        w.Put(static_cast<char>(i));  // negative fixint
      } else if (i >= INT8_MIN) {
        PutBigEndian(w, 0xD0, static_cast<uint64_t>(i), 1);
      } else if (i >= INT16_MIN) {
        PutBigEndian(w, 0xD1, static_cast<uint64_t>(i), 2);
      } else if (i >= INT32_MIN) {
        PutBigEndian(w, 0xD2, static_cast<uint64_t>(i), 4);
      } else {
        PutBigEndian(w, 0xD3, static_cast<uint64_t>(i), 8);
      }
      return;
    }
    case json::value_t::string:
      PutMsgpackString(w, v.get_ref<const json::string_t&>());
      return;
    case json::value_t::array: {
      const auto& items = v.get_ref<const json::array_t&>();
      PutHeader(w, items.size(), 0x90, 15, 0, 0xDC, 0xDD);
      for (const json& item : items) PutMsgpack(w, item);
      return;
    }
    case json::value_t::object: {
      const auto& members = v.get_ref<const json::object_t&>();
      PutHeader(w, members.size(), 0x80, 15, 0, 0xDE, 0xDF);
      for (const auto& [key, member] : members) {
        PutMsgpackString(w, key);
        PutMsgpack(w, member);
      }
      return;
    }
    case json::value_t::number_float:  // float32 when exact: nlohmann's rule
    case json::value_t::binary:
    case json::value_t::discarded:
    default: {
      std::string part;
      json::to_msgpack(v, part);
      w.Put(part);
      return;
    }
  }
}

}  // namespace

void AppendMsgpack(std::string& out, const json& value) {
  Writer w(out);
  PutMsgpack(w, value);
}

void AppendJson(std::string& out, const json& value, json::error_handler_t errors) {
  Writer w(out);
  Write(w, value, errors);
}

std::string DumpJson(const json& value, json::error_handler_t errors) {
  std::string out;
  AppendJson(out, value, errors);
  // The room made for the worst case (every byte of a string escaped) is
  // not kept: the store holds these texts while a burst goes on.
  if (out.capacity() - out.size() > out.size() / 8) out.shrink_to_fit();
  return out;
}

}  // namespace berth::api
