// Internal to berth::http: turning Beast's parsed requests into
// HttpRequest, and the status line texts. (Public parsing entry points are
// in server.h.)
#pragma once

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "http/server.h"

namespace berth::http::internal {

HttpRequest FromBeast(boost::beast::http::request<boost::beast::http::string_body>&& req);
// Splits r.target into path and query; false if the path is malformed.
bool SplitTarget(HttpRequest& r);
const char* StatusText(int code);
// The Kubernetes Status body the server itself answers errors with.
std::string StatusBody(int code, std::string_view reason, std::string_view message);

}  // namespace berth::http::internal
