#include "http/request.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cctype>

#include <boost/beast/http/parser.hpp>

#include "absl/strings/numbers.h"
#include "common/strings.h"

namespace berth::http {

namespace bhttp = boost::beast::http;

namespace internal {

HttpRequest FromBeast(bhttp::request<bhttp::string_body>&& req) {
  HttpRequest out;
  out.method = std::string(req.method_string());
  out.target = std::string(req.target());
  for (const auto& field : req) {
    std::string name(field.name_string());
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    // A field sent several times (X-Stream-Protocol-Version) keeps every
    // value, joined as RFC 9110 5.3 allows.
    const std::string_view value(field.value().data(), field.value().size());
    auto [it, fresh] = out.headers.try_emplace(name, value);
    if (!fresh) it->second += StrCat(", ", value);
  }
  out.body = std::move(req.body());
  return out;
}

bool SplitTarget(HttpRequest& r) {
  std::string_view t = r.target;
  std::string_view q;
  if (size_t pos = t.find('?'); pos != std::string_view::npos) {
    q = t.substr(pos + 1);
    t = t.substr(0, pos);
  }
  auto path = PercentDecode(t, false);
  if (!path || path->empty() || path->front() != '/' || path->find('\0') != std::string::npos) return false;
  r.path = std::move(*path);
  r.query = ParseQuery(q);
  return true;
}

const char* StatusText(int code) {
  switch (code) {
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 406:
      return "Not Acceptable";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 413:
      return "Payload Too Large";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Unknown";
  }
}

std::string StatusBody(int code, std::string_view reason, std::string_view message) {
  return StrCat("{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"",
                message, "\",\"reason\":\"", reason, "\",\"code\":", code, "}");
}

}  // namespace internal

std::optional<std::string> PercentDecode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%') {
      if (i + 2 >= s.size()) return std::nullopt;
      auto hex = [](char h) -> int {
        if (h >= '0' && h <= '9') return h - '0';
        if (h >= 'a' && h <= 'f') return h - 'a' + 10;
        if (h >= 'A' && h <= 'F') return h - 'A' + 10;
        return -1;
      };
      int hi = hex(s[i + 1]), lo = hex(s[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> ParseQueryList(std::string_view query) {
  std::vector<std::pair<std::string, std::string>> out;
  for (std::string_view part : Split(query, '&')) {
    if (part.empty()) continue;
    size_t eq = part.find('=');
    auto key = PercentDecode(part.substr(0, eq), true);
    auto value = PercentDecode(eq == std::string_view::npos ? "" : part.substr(eq + 1), true);
    if (key && value) out.emplace_back(std::move(*key), std::move(*value));
  }
  return out;
}

std::map<std::string, std::string> ParseQuery(std::string_view query) {
  std::map<std::string, std::string> out;
  for (auto& [key, value] : ParseQueryList(query)) out[key] = std::move(value);
  return out;
}

absl::StatusOr<HttpRequest> ParseRequest(std::string_view bytes) {
  bhttp::request_parser<bhttp::string_body> parser;
  parser.header_limit(64 * 1024);
  parser.body_limit(8 << 20);
  boost::system::error_code ec;
  size_t used = parser.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
  if (!ec && parser.is_header_done() && !parser.is_done() && used < bytes.size()) {
    parser.put(boost::asio::buffer(bytes.data() + used, bytes.size() - used), ec);
  }
  if (!ec && !parser.is_done()) parser.put_eof(ec);
  if (ec || !parser.is_done()) {
    return absl::InvalidArgumentError(StrCat("malformed HTTP request: ", ec ? ec.message() : "incomplete"));
  }
  HttpRequest r = internal::FromBeast(parser.release());
  if (!internal::SplitTarget(r)) return absl::InvalidArgumentError("malformed request path");
  return r;
}

absl::StatusOr<TcpAddress> ParseTcpAddress(std::string_view address) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        StrCat("bad TCP address \"", address, "\": ", why, " (want host:port, e.g. 127.0.0.1:9809 or [::1]:9809)"));
  };
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos) return bad("no port");
  std::string_view host = address.substr(0, colon);
  std::string_view port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) return bad("no host: name the address to listen on");
  TcpAddress out;
  out.host = std::string(host);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos ||
      !absl::SimpleAtoi(std::string(port), &out.port) || out.port > 65535) {
    return bad("the port must be a number from 0 to 65535");
  }
  in_addr v4{};
  in6_addr v6{};
  if (::inet_pton(AF_INET, out.host.c_str(), &v4) == 1) {
    out.loopback = (ntohl(v4.s_addr) >> 24) == 127;
  } else if (::inet_pton(AF_INET6, out.host.c_str(), &v6) == 1) {
    out.ipv6 = true;
    out.loopback = IN6_IS_ADDR_LOOPBACK(&v6);
  } else {
    return bad("the host must be an IPv4 or IPv6 address");
  }
  return out;
}

}  // namespace berth::http
