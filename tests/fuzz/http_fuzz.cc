// libFuzzer target: the API server's request path. Bytes are parsed as an
// HTTP/1.1 request (Beast's parser, target and query decoding) and, when
// they parse, handled by the REST handler over a real registry and store,
// so routing, body decoding, patches, selectors and validation all see
// hostile input. Watches end at once (max_watch 0).
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "apiserver/handler.h"
#include "apiserver/registry.h"
#include "http/server.h"
#include "store/store.h"

namespace {

class NullWriter : public berth::http::ResponseWriter {
 public:
  void Send(int code, const std::string&, const std::string& body) override {
    if (code < 200 || code > 599) __builtin_trap();
    if (body.size() > (64u << 20)) __builtin_trap();
  }
  bool StartStream(int, const std::string&) override { return true; }
  bool WriteChunk(const std::string&) override { return true; }
  bool Cancelled() override { return true; }
  std::shared_ptr<berth::http::Stream> Detach() override { return nullptr; }
  bool Tunnel(std::string, int backend) override {
    ::close(backend);
    return false;
  }
};

struct World {
  World() {
    char tmpl[] = "/dev/shm/berth-http-fuzz-XXXXXX";
    char* dir = ::mkdtemp(tmpl);
    if (dir == nullptr) {
      char fallback[] = "/tmp/berth-http-fuzz-XXXXXX";
      dir = ::mkdtemp(fallback);
    }
    path = dir;
    store = std::move(*berth::store::Store::Open({.path = path + "/state.db"}));
    registry = std::make_unique<berth::apiserver::Registry>(*store);
    (void)registry->Bootstrap();
    handler = std::make_unique<berth::apiserver::ApiHandler>(
        *registry, berth::apiserver::ApiHandler::Options{.bookmark_interval = absl::Milliseconds(1),
                                                         .max_watch = absl::ZeroDuration()});
  }
  ~World() {
    handler.reset();
    registry.reset();
    store.reset();
    std::string cmd = "rm -rf '" + path + "'";
    (void)!::system(cmd.c_str());
  }
  std::string path;
  std::unique_ptr<berth::store::Store> store;
  std::unique_ptr<berth::apiserver::Registry> registry;
  std::unique_ptr<berth::apiserver::ApiHandler> handler;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World* world = new World();
  auto req = berth::http::ParseRequest(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!req.ok()) return 0;
  NullWriter out;
  world->handler->Handle(*req, out);
  return 0;
}
