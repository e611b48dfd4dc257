// Internal to berth::http: a response on its way out of the server. A
// handler (on a handler thread) or a detached stream's owner (any thread)
// appends bytes to an Output; the connection's strand takes and writes them.
// Thread-safety: Output, DetachedStream and HandlerPool are thread-safe; a
// Writer belongs to the handler call it is given to.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/memory.h"
#include "common/strings.h"
#include "common/thread_name.h"
#include "http/request.h"
#include "http/server.h"

namespace berth::http::internal {

// A synchronous handler's WriteChunk waits while this much is queued; a
// detached stream's wakeup fires once a backlog of this size is written.
inline constexpr size_t kBacklogBytes = 256 << 10;

// A status line and the headers every response carries, plus `extra`
// (whole header lines); the caller ends the head.
inline std::string ResponseHead(int code, std::string_view content_type, std::string_view extra) {
  return StrCat("HTTP/1.1 ", code, " ", internal::StatusText(code), "\r\nContent-Type: ", content_type,
                "\r\nCache-Control: no-cache, private\r\n", extra);
}

// One chunk of a chunked response.
inline std::string Chunk(std::string_view data) {
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  return StrCat(size, data, "\r\n");
}

// A fixed set of threads running handlers in the order they were posted.
class HandlerPool {
 public:
  explicit HandlerPool(int threads) {
    for (int i = 0; i < std::max(1, threads); ++i) {
      threads_.emplace_back(NamedThread("http handler", [this] { Run(); }));
    }
  }
  ~HandlerPool() { Stop(); }

  void Post(std::function<void()> task) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(task));
  }
  // Runs what is queued, then joins the threads.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_) {
    while (true) {
      std::function<void()> task;
      {
        absl::MutexLock lock(&mu_);
        // Handlers parse what the store keeps and other threads free: an idle
        // handler thread gives that memory back (common/memory.h).
        AwaitReleasingWhenIdle(mu_, absl::Condition(
                                        +[](HandlerPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
                                          return !p->queue_.empty() || p->stopping_;
                                        },
                                        this));
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

class SessionBase : public std::enable_shared_from_this<SessionBase> {
 public:
  virtual ~SessionBase() = default;
  // Both post onto the session's strand; callable from any thread.
  virtual void PostFlush() = 0;
  virtual void PostClose() = 0;
};

// One response's bytes on their way out, shared by the session (which
// writes them on its strand) and whoever produces them (a handler thread,
// or a detached stream's owner on any thread).
class Output {
 public:
  explicit Output(std::weak_ptr<SessionBase> session) : session_(std::move(session)) {}
  ~Output() {
    if (tunnel_ >= 0) ::close(tunnel_);
  }
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;

  // The response (its head queued with Append, `last`) hands the connection
  // over to a tunnel to `backend`, owned from here on.
  void SetTunnel(int backend) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (tunnel_ >= 0) ::close(tunnel_);
    tunnel_ = backend;
  }

  // Queues bytes (and with `last`, ends the response). False once closed or
  // ended.
  bool Append(std::string bytes, bool last) ABSL_LOCKS_EXCLUDED(mu_) {
    std::shared_ptr<SessionBase> kick;
    {
      absl::MutexLock lock(&mu_);
      if (closed_ || ended_) return false;
      pending_ += bytes.size();
      if (pending_ > kBacklogBytes) drain_wanted_ = true;
      queue_.push_back(std::move(bytes));
      ended_ = last;
      if (!flush_scheduled_) {
        flush_scheduled_ = true;
        kick = session_.lock();
      }
    }
    // Outside the lock: dropping `kick` may destroy the session, which takes it.
    if (kick) kick->PostFlush();
    return true;
  }
  // The handler returned (having detached its stream or not).
  void HandlerReturned(bool detached) ABSL_LOCKS_EXCLUDED(mu_) {
    std::shared_ptr<SessionBase> kick;
    {
      absl::MutexLock lock(&mu_);
      handler_returned_ = true;
      detached_ = detached;
      flush_scheduled_ = true;
      kick = session_.lock();
    }
    if (kick) kick->PostFlush();
  }
  // Blocks while more than `limit` bytes are queued; false once closed.
  bool WaitBelow(size_t limit) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto ok = [this, limit]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return closed_ || pending_ <= limit; };
    mu_.Await(absl::Condition(&ok));
    return !closed_;
  }

  // ---- Session side (its strand) ----
  struct Batch {
    std::string bytes;
    bool response_done = false;  // ended, handler returned, all taken
    bool detached = false;
    int tunnel = -1;  // with response_done: the tunnel's backend, now the caller's
  };
  Batch Take() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    flush_scheduled_ = false;
    Batch b;
    for (auto& s : queue_) b.bytes += s;
    queue_.clear();
    b.response_done = b.bytes.empty() && ended_ && handler_returned_ && pending_ == 0;
    b.detached = detached_;
    if (b.response_done) b.tunnel = std::exchange(tunnel_, -1);
    return b;
  }
  // `n` bytes were written; returns the wakeup to run if a backlog drained.
  std::function<void()> Written(size_t n) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    pending_ -= std::min(pending_, n);
    if (pending_ == 0 && drain_wanted_) {
      drain_wanted_ = false;
      return wakeup_;
    }
    return nullptr;
  }
  // The connection is gone: nothing more is accepted. Returns the wakeup.
  std::function<void()> Close() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    queue_.clear();
    pending_ = 0;
    return std::exchange(wakeup_, nullptr);
  }

  bool closed() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return closed_;
  }
  bool ended() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return closed_ || ended_;
  }
  size_t pending() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return pending_;
  }
  bool backlogged() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return pending_ > kBacklogBytes;
  }
  void SetWakeup(std::function<void()> wakeup) ABSL_LOCKS_EXCLUDED(mu_) {
    bool already_closed;
    {
      absl::MutexLock lock(&mu_);
      already_closed = closed_;
      if (!already_closed) wakeup_ = std::move(wakeup);
    }
    if (already_closed && wakeup) wakeup();
  }

 private:
  const std::weak_ptr<SessionBase> session_;
  mutable absl::Mutex mu_;
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  size_t pending_ ABSL_GUARDED_BY(mu_) = 0;  // queued or being written
  bool flush_scheduled_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool handler_returned_ ABSL_GUARDED_BY(mu_) = false;
  bool detached_ ABSL_GUARDED_BY(mu_) = false;
  bool drain_wanted_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> wakeup_ ABSL_GUARDED_BY(mu_);
  int tunnel_ ABSL_GUARDED_BY(mu_) = -1;
};

class DetachedStream final : public Stream {
 public:
  explicit DetachedStream(std::shared_ptr<Output> out) : out_(std::move(out)) {}

  // Stream
  bool Write(std::string data) override { return data.empty() ? !out_->ended() : out_->Append(Chunk(data), false); }
  void Finish() override { out_->Append("0\r\n\r\n", true); }
  bool Ended() const override { return out_->ended(); }
  size_t Pending() const override { return out_->pending(); }
  bool Backlogged() const override { return out_->backlogged(); }
  void SetWakeup(std::function<void()> wakeup) override { out_->SetWakeup(std::move(wakeup)); }

 private:
  const std::shared_ptr<Output> out_;
};

class Writer final : public ResponseWriter {
 public:
  Writer(std::shared_ptr<Output> out, bool keep_alive) : out_(std::move(out)), keep_alive_(keep_alive) {}

  // ResponseWriter
  void Send(int code, const std::string& content_type, const std::string& body) override {
    if (started_) return;
    started_ = true;
    code_ = code;
    out_->Append(StrCat(ResponseHead(code, content_type, keep_alive_ ? "" : "Connection: close\r\n"),
                        "Content-Length: ", body.size(), "\r\n\r\n", body),
                 true);
  }
  bool StartStream(int code, const std::string& content_type) override {
    if (started_) return false;
    started_ = streaming_ = true;
    code_ = code;
    return out_->Append(StrCat(ResponseHead(code, content_type, "Transfer-Encoding: chunked\r\n"), "\r\n"), false);
  }
  bool WriteChunk(const std::string& data) override {
    if (!streaming_ || detached_) return false;
    if (data.empty()) return !out_->closed();
    return out_->WaitBelow(kBacklogBytes) && out_->Append(Chunk(data), false);
  }
  bool Cancelled() override { return out_->closed(); }
  std::shared_ptr<Stream> Detach() override {
    if (!streaming_ || detached_) return nullptr;
    detached_ = true;
    return std::make_shared<DetachedStream>(out_);
  }
  bool Tunnel(std::string head, int backend) override {
    if (started_) {
      ::close(backend);
      return false;
    }
    started_ = true;
    code_ = 101;
    out_->SetTunnel(backend);
    return out_->Append(std::move(head), true);
  }

  // After the handler returned.
  void Done() {
    if (!started_) Send(500, "text/plain", "no response\n");
    if (streaming_ && !detached_) out_->Append("0\r\n\r\n", true);
    out_->HandlerReturned(detached_);
  }
  int code() const { return code_; }

 private:
  const std::shared_ptr<Output> out_;
  const bool keep_alive_;
  bool started_ = false;
  bool streaming_ = false;
  bool detached_ = false;
  int code_ = 0;
};

}  // namespace berth::http::internal
