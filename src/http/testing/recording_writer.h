// Test doubles of the HTTP server's side of a response, for testing a
// handler without a socket: RecordingWriter records what the handler sends
// (a whole response, or a stream it may detach); RecordingStream is the
// detached stream, recording its chunks, and lets a test play the client
// going away (Hangup).
//
//   http::testing::RecordingWriter w;
//   handler.Handle(*http::ParseRequest("GET /x HTTP/1.1\r\nHost: x\r\n\r\n"), w);
//   EXPECT_EQ(w.code, 200);
//
// Thread-safety: RecordingStream is thread-safe (the handler writes from its
// own threads while the test reads). A RecordingWriter belongs to one handler
// call, as the server's does.
#pragma once

#include <unistd.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "http/server.h"

namespace berth::http::testing {

class RecordingStream : public Stream {
 public:
  // Stream
  bool Write(std::string data) override {
    absl::MutexLock lock(&mu_);
    if (ended_) return false;
    chunks_.push_back(std::move(data));
    return true;
  }
  void Finish() override {
    absl::MutexLock lock(&mu_);
    ended_ = true;
  }
  bool Ended() const override {
    absl::MutexLock lock(&mu_);
    return ended_;
  }
  size_t Pending() const override { return 0; }
  bool Backlogged() const override { return false; }
  void SetWakeup(std::function<void()> wakeup) override {
    absl::MutexLock lock(&mu_);
    wakeup_ = std::move(wakeup);
  }

  // What was written, chunk by chunk or all together.
  std::vector<std::string> chunks() const {
    absl::MutexLock lock(&mu_);
    return chunks_;
  }
  std::string text() const {
    absl::MutexLock lock(&mu_);
    std::string out;
    for (const auto& c : chunks_) out += c;
    return out;
  }
  // The client goes away: the stream ends and, as the server does, the
  // wakeup runs.
  void Hangup() {
    std::function<void()> wakeup;
    {
      absl::MutexLock lock(&mu_);
      ended_ = true;
      wakeup = wakeup_;
    }
    if (wakeup) wakeup();
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> chunks_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> wakeup_ ABSL_GUARDED_BY(mu_);
};

class RecordingWriter : public ResponseWriter {
 public:
  // ResponseWriter
  void Send(int c, const std::string& ct, const std::string& b) override {
    code = c;
    content_type = ct;
    body = b;
  }
  bool StartStream(int c, const std::string& ct) override {
    code = c;
    content_type = ct;
    stream = std::make_shared<RecordingStream>();
    return true;
  }
  bool WriteChunk(const std::string& data) override { return stream != nullptr && stream->Write(data); }
  bool Cancelled() override { return stream != nullptr && stream->Ended(); }
  std::shared_ptr<Stream> Detach() override {
    detached = stream != nullptr;
    return stream;
  }
  bool Tunnel(std::string head, int backend) override {
    code = 101;
    body = std::move(head);
    if (tunnel >= 0) ::close(tunnel);
    tunnel = backend;
    return true;
  }
  ~RecordingWriter() override {
    if (tunnel >= 0) ::close(tunnel);
  }

  int code = 0;
  std::string content_type, body;
  std::shared_ptr<RecordingStream> stream;  // once StartStream was called
  bool detached = false;                    // Detach handed the stream over
  int tunnel = -1;                          // Tunnel's backend (closed by the destructor); body: its head
};

}  // namespace berth::http::testing
