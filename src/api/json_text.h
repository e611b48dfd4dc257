// JSON values written out, as text and as MessagePack, byte for byte what
// nlohmann writes and faster. DumpJson is nlohmann::json::dump() (compact,
// ensure_ascii off), about twice as fast on API objects. dump() writes every
// byte through a virtual call and runs each byte of every string through
// its UTF-8 decoder; here a string of plain ASCII with nothing to escape is
// copied at once, and only strings with bytes above 0x7F go through
// nlohmann's own escaping (which checks their UTF-8 and applies `errors`).
// Floats, binary values and discarded values are nlohmann's too.
// AppendMsgpack is json::to_msgpack the same way (nlohmann also makes a
// JSON value of every key it writes).
//
//   std::string text = api::DumpJson(object);  // == object.dump()
//
// The store writes every object version with DumpJson, the API server every
// response body; the informers pack what they hold with AppendMsgpack.
//
// Thread-safety: stateless.
#pragma once

#include <string>

#include "nlohmann/json.hpp"

namespace berth::api {

// What dump(-1, ' ', false, errors) returns; throws what it throws
// (nlohmann::json::type_error 316 for invalid UTF-8 under `strict`).
std::string DumpJson(const nlohmann::json& value,
                     nlohmann::json::error_handler_t errors = nlohmann::json::error_handler_t::strict);
// The same, appended to `out`.
void AppendJson(std::string& out, const nlohmann::json& value,
                nlohmann::json::error_handler_t errors = nlohmann::json::error_handler_t::strict);

// What json::to_msgpack(value) writes, appended to `out`.
void AppendMsgpack(std::string& out, const nlohmann::json& value);

}  // namespace berth::api
