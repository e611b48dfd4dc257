// Changed-block tracking figures (run as root; makes and removes its own XFS
// pool image under /tmp): a 4 GiB block volume, written in full, snapshot
// s1; 1 % of its 4 KiB blocks rewritten at random, snapshot s2. Then:
//   - GetMetadataDelta(s1, s2) from the extent maps (first call and p50);
//   - the same delta over berth-csi's socket (gRPC stream, call logging);
//   - GetMetadataAllocated(s2);
//   - what it replaces: reading both images and hashing every 4 KiB block
//     (SHA-256), caches dropped for the two images first;
//   - berth's own fallback for pools that cannot reflink: reading both
//     images and comparing the blocks (ConfirmByContent), caches dropped;
// and the ratios.
//
//   build/release/bench/snapshot_metadata_bench [--size-gib N] [--percent P]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/exec.h"
#include "common/fd.h"
#include "common/hash.h"
#include "csi/client.h"
#include "csi/server.h"
#include "driver/driver.h"
#include "driver/pool/extents.h"
#include "driver/testing/sandbox.h"
#include "spdlog/spdlog.h"

namespace {

using berth::driver::ByteRange;
using berth::driver::Driver;
using Clock = std::chrono::steady_clock;

constexpr int64_t kBlock = 4096;
constexpr int64_t kMiB = int64_t{1} << 20;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double P50(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void Check(const absl::Status& st, const char* what) {
  if (!st.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, st.ToString().c_str());
    std::exit(1);
  }
}

std::string Snapshot(Driver& d, const std::string& vol, const std::string& name) {
  ::csi::v1::CreateSnapshotRequest req;
  req.set_name(name);
  req.set_source_volume_id(vol);
  ::csi::v1::CreateSnapshotResponse resp;
  Check(d.controller().DoCreateSnapshot(req, &resp), "CreateSnapshot");
  return resp.snapshot().snapshot_id();
}

// Drops the page cache of `paths` (the images, and the pool image that holds
// them), so reads come from the disk, as they would for a backup of data not
// read lately.
void DropCaches(const std::vector<std::string>& paths) {
  for (const auto& p : paths) {
    berth::Fd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.ok()) continue;
    ::fdatasync(fd.get());
    ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
  }
}

// Reads both files in 1 MiB chunks and hashes every 4 KiB block; returns the
// number of blocks whose hashes differ.
int64_t ReadAndHash(const std::string& a, const std::string& b, int64_t size) {
  berth::Fd fa(::open(a.c_str(), O_RDONLY | O_CLOEXEC));
  berth::Fd fb(::open(b.c_str(), O_RDONLY | O_CLOEXEC));
  std::vector<char> ba(kMiB), bb(kMiB);
  int64_t differing = 0;
  for (int64_t pos = 0; pos < size; pos += kMiB) {
    if (::pread(fa.get(), ba.data(), kMiB, pos) != kMiB || ::pread(fb.get(), bb.data(), kMiB, pos) != kMiB) {
      std::fprintf(stderr, "short read at %lld\n", static_cast<long long>(pos));
      std::exit(1);
    }
    for (int64_t off = 0; off < kMiB; off += kBlock) {
      differing += berth::Sha256Hex(std::string_view(ba.data() + off, kBlock)) !=
                   berth::Sha256Hex(std::string_view(bb.data() + off, kBlock));
    }
  }
  return differing;
}

struct DeltaFigures {
  double ms = 0;
  int64_t tuples = 0;
  int64_t bytes = 0;
};

DeltaFigures Delta(Driver& d, const std::string& base, const std::string& target) {
  ::csi::v1::GetMetadataDeltaRequest req;
  req.set_base_snapshot_id(base);
  req.set_target_snapshot_id(target);
  DeltaFigures f;
  const auto t0 = Clock::now();
  Check(d.snapshot_metadata().DoGetDelta(req,
                                         [&](const ::csi::v1::GetMetadataDeltaResponse& m) {
                                           for (const auto& b : m.block_metadata()) {
                                             ++f.tuples;
                                             f.bytes += b.size_bytes();
                                           }
                                           return true;
                                         }),
        "GetMetadataDelta");
  f.ms = Ms(Clock::now() - t0);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  if (::geteuid() != 0) {
    std::fprintf(stderr, "snapshot_metadata_bench needs root (loop devices, mounts)\n");
    return 1;
  }
  int64_t size_gib = 4;
  double percent = 1.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--size-gib") == 0) size_gib = std::atoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--percent") == 0) percent = std::atof(argv[i + 1]);
  }
  const int64_t size = size_gib << 30;
  spdlog::set_level(spdlog::level::warn);
  berth::LinuxCommandRunner runner;
  berth::driver::LinuxLoopDevices loops;
  berth::driver::LinuxMounter mounter;
  berth::driver::LinuxFormatter formatter(runner);
  berth::driver::LinuxFreezer freezer;
  berth::testing::MountSandbox sandbox;  // unmounts and detaches everything at exit

  berth::driver::DriverOptions o;
  o.node_id = "bench";
  o.endpoint = "unix:///unused.sock";
  o.kubelet_root = sandbox.Join("kubelet");
  o.pool = sandbox.Join("xfs-pool");
  o.pool_image = sandbox.Join("xfs-pool.img");
  o.pool_size_bytes = 4 * size + (4LL << 30);
  auto opened = Driver::Open(o, {&loops, &mounter, &formatter, &freezer});
  Check(opened.status(), "open pool");
  Driver& d = **opened;
  std::printf("== %lld GiB block volume, %.2f %% of 4 KiB blocks rewritten (XFS pool image, reflink %s)\n",
              static_cast<long long>(size_gib), percent, d.pool().reflink() ? "yes" : "no");

  ::csi::v1::CreateVolumeRequest creq;
  creq.set_name("bench-cbt");
  creq.mutable_capacity_range()->set_required_bytes(size);
  auto* cap = creq.add_volume_capabilities();
  cap->mutable_block();
  cap->mutable_access_mode()->set_mode(::csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  ::csi::v1::CreateVolumeResponse cresp;
  Check(d.controller().DoCreateVolume(creq, &cresp), "CreateVolume");
  const std::string vol = cresp.volume().volume_id();
  const std::string image = d.pool().VolumeImagePath(vol);

  // The whole volume written (random bytes), as a full volume would be.
  {
    berth::Fd fd(::open(image.c_str(), O_WRONLY | O_CLOEXEC));
    std::mt19937_64 gen(1);
    std::vector<uint64_t> buf(kMiB / 8);
    for (int64_t pos = 0; pos < size; pos += kMiB) {
      for (auto& w : buf) w = gen();
      if (::pwrite(fd.get(), buf.data(), kMiB, pos) != kMiB) std::exit(1);
    }
    ::fsync(fd.get());
  }
  const std::string s1 = Snapshot(d, vol, "bench-s1");
  // percent % of the blocks rewritten, each at a random place.
  const int64_t blocks = size / kBlock;
  const int64_t rewrites = static_cast<int64_t>(static_cast<double>(blocks) * percent / 100.0);
  std::set<int64_t> chosen;
  {
    berth::Fd fd(::open(image.c_str(), O_WRONLY | O_CLOEXEC));
    std::mt19937_64 gen(2);
    std::uniform_int_distribution<int64_t> pick(0, blocks - 1);
    std::vector<char> buf(kBlock, 'x');
    while (static_cast<int64_t>(chosen.size()) < rewrites) {
      const int64_t b = pick(gen);
      if (!chosen.insert(b).second) continue;
      std::memcpy(buf.data(), &b, sizeof(b));
      if (::pwrite(fd.get(), buf.data(), kBlock, b * kBlock) != kBlock) std::exit(1);
    }
    ::fsync(fd.get());
  }
  const std::string s2 = Snapshot(d, vol, "bench-s2");
  const std::string i1 = d.pool().SnapshotImagePath(s1);
  const std::string i2 = d.pool().SnapshotImagePath(s2);

  // The delta from the extent maps.
  DropCaches({i1, i2, o.pool_image});
  DeltaFigures first = Delta(d, s1, s2);
  std::vector<double> runs;
  DeltaFigures f;
  for (int i = 0; i < 9; ++i) {
    f = Delta(d, s1, s2);
    runs.push_back(f.ms);
  }
  const double delta_ms = P50(runs);
  std::printf("rewritten blocks                    %10lld (%lld MiB)\n", static_cast<long long>(rewrites),
              static_cast<long long>(rewrites * kBlock / kMiB));
  std::printf("delta: tuples %lld, bytes %lld (%s the rewritten blocks)\n", static_cast<long long>(f.tuples),
              static_cast<long long>(f.bytes), f.bytes == rewrites * kBlock ? "exactly" : "NOT exactly");
  std::printf("GetMetadataDelta, extent maps       %10.2f ms first call, p50 %.2f ms (n=%zu)\n", first.ms, delta_ms,
              runs.size());

  // The same over the socket, as the external-snapshot-metadata sidecar or
  // berth's API server calls it: the stream, protobuf on the wire, and the
  // server's call logging.
  {
    const std::string socket = "unix://" + sandbox.Join("csi.sock");
    auto server = berth::csi::CsiServer::Start({.endpoint = socket}, d.services());
    Check(server.status(), "serve");
    auto channel = berth::csi::ConnectUnix(socket, {.timeout = absl::Seconds(10)});
    Check(channel.status(), "connect");
    auto stub = ::csi::v1::SnapshotMetadata::NewStub(*channel);
    std::vector<double> rpc;
    int64_t tuples = 0;
    for (int i = 0; i < 9; ++i) {
      grpc::ClientContext ctx;
      ::csi::v1::GetMetadataDeltaRequest req;
      req.set_base_snapshot_id(s1);
      req.set_target_snapshot_id(s2);
      const auto t0 = Clock::now();
      auto reader = stub->GetMetadataDelta(&ctx, req);
      ::csi::v1::GetMetadataDeltaResponse msg;
      tuples = 0;
      while (reader->Read(&msg)) tuples += msg.block_metadata_size();
      grpc::Status st = reader->Finish();
      if (!st.ok()) {
        std::fprintf(stderr, "GetMetadataDelta over the socket: %s\n", st.error_message().c_str());
        std::exit(1);
      }
      rpc.push_back(Ms(Clock::now() - t0));
    }
    std::printf("GetMetadataDelta over the socket    %10.2f ms p50 (n=%zu, %lld tuples)\n", P50(rpc), rpc.size(),
                static_cast<long long>(tuples));
    (*server)->Shutdown(absl::Seconds(5));
  }

  {
    ::csi::v1::GetMetadataAllocatedRequest req;
    req.set_snapshot_id(s2);
    int64_t bytes = 0;
    const auto t0 = Clock::now();
    Check(d.snapshot_metadata().DoGetAllocated(req,
                                               [&](const ::csi::v1::GetMetadataAllocatedResponse& m) {
                                                 for (const auto& b : m.block_metadata()) bytes += b.size_bytes();
                                                 return true;
                                               }),
          "GetMetadataAllocated");
    std::printf("GetMetadataAllocated(s2)            %10.2f ms (%lld bytes allocated)\n", Ms(Clock::now() - t0),
                static_cast<long long>(bytes));
  }

  // What it replaces: read both images, hash every block.
  DropCaches({i1, i2, o.pool_image});
  auto t0 = Clock::now();
  const int64_t differing = ReadAndHash(i1, i2, size);
  const double hash_ms = Ms(Clock::now() - t0);
  std::printf("read + SHA-256 every 4 KiB block    %10.2f ms (%lld blocks differ)\n", hash_ms,
              static_cast<long long>(differing));

  // berth's fallback without reflink: read and compare.
  DropCaches({i1, i2, o.pool_image});
  t0 = Clock::now();
  {
    berth::Fd a(::open(i1.c_str(), O_RDONLY | O_CLOEXEC));
    berth::Fd b(::open(i2.c_str(), O_RDONLY | O_CLOEXEC));
    auto changed = berth::driver::ConfirmByContent(a.get(), b.get(), {ByteRange{0, size}}, "bench");
    Check(changed.status(), "ConfirmByContent");
    int64_t bytes = 0;
    for (const auto& r : *changed) bytes += r.length;
    std::printf("read + compare (no-reflink path)    %10.2f ms (%lld bytes differ)\n", Ms(Clock::now() - t0),
                static_cast<long long>(bytes));
  }
  const double compare_ms = Ms(Clock::now() - t0);
  std::printf("ratio read+hash / extent maps       %10.0fx\n", hash_ms / delta_ms);
  std::printf("ratio read+compare / extent maps    %10.0fx\n", compare_ms / delta_ms);
  return 0;
}
