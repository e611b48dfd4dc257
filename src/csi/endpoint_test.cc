#include "csi/endpoint.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace berth::csi {
namespace {

namespace fs = std::filesystem;

// Binds a unix socket at `path`. With `keep_listening`, returns the listening
// fd (caller closes); otherwise closes it, leaving a stale socket file behind
// exactly as a crashed server would.
int MakeSocketFile(const std::string& path, bool keep_listening) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(::listen(fd, 1), 0);
  if (keep_listening) return fd;
  ::close(fd);
  return -1;
}

TEST(ParseUnixEndpointTest, AcceptsSchemeAndBarePath) {
  EXPECT_EQ(*ParseUnixEndpoint("unix:///run/csi/csi.sock"), "/run/csi/csi.sock");
  EXPECT_EQ(*ParseUnixEndpoint("/run/csi/csi.sock"), "/run/csi/csi.sock");
  EXPECT_EQ(*ParseUnixEndpoint("unix:///run//csi/./csi.sock"), "/run/csi/csi.sock");
}

TEST(ParseUnixEndpointTest, RejectsOtherSchemesRelativeAndTraversal) {
  for (const char* bad : {"tcp://127.0.0.1:10000", "unix://relative/csi.sock", "csi.sock", "", "unix://",
                          "/run/../etc/csi.sock", "/run/csi/"}) {
    EXPECT_EQ(ParseUnixEndpoint(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(ParseUnixEndpoint("/" + std::string(200, 'a')).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PrepareSocketPathTest, CreatesMissingParentDirectory) {
  testing::TempDir dir;
  const std::string sock = dir.Join("a/b/csi.sock");
  ASSERT_TRUE(PrepareSocketPath(sock).ok());
  EXPECT_TRUE(fs::is_directory(dir.Join("a/b")));
  EXPECT_FALSE(fs::exists(sock));
}

TEST(PrepareSocketPathTest, RemovesStaleSocket) {
  testing::TempDir dir;
  const std::string sock = dir.Join("csi.sock");
  MakeSocketFile(sock, /*keep_listening=*/false);
  ASSERT_TRUE(fs::is_socket(sock));
  EXPECT_TRUE(PrepareSocketPath(sock).ok());
  EXPECT_FALSE(fs::exists(sock));
}

TEST(PrepareSocketPathTest, RefusesLiveSocket) {
  testing::TempDir dir;
  const std::string sock = dir.Join("csi.sock");
  int fd = MakeSocketFile(sock, /*keep_listening=*/true);
  absl::Status st = PrepareSocketPath(sock);
  ::close(fd);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fs::is_socket(sock));
}

TEST(PrepareSocketPathTest, RefusesAndKeepsRegularFile) {
  testing::TempDir dir;
  const std::string path = dir.Join("csi.sock");
  std::ofstream(path) << "precious";
  absl::Status st = PrepareSocketPath(path);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("not a socket"), std::string::npos) << st;
  std::ifstream in(path);
  std::string content;
  in >> content;
  EXPECT_EQ(content, "precious");
}

TEST(PrepareSocketPathTest, RefusesAndKeepsDirectoryAndSymlink) {
  testing::TempDir dir;
  const std::string d = dir.Join("csi.sock");
  fs::create_directory(d);
  std::ofstream(d + "/inside") << "x";
  EXPECT_EQ(PrepareSocketPath(d).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fs::exists(d + "/inside"));

  // A symlink to a socket is not "a socket": following it could delete a file
  // somewhere else.
  const std::string real = dir.Join("real.sock");
  MakeSocketFile(real, false);
  const std::string link = dir.Join("link.sock");
  fs::create_symlink(real, link);
  EXPECT_EQ(PrepareSocketPath(link).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_TRUE(fs::is_socket(real));
}

TEST(RemoveSocketFileTest, RemovesOnlySockets) {
  testing::TempDir dir;
  const std::string file = dir.Join("f");
  std::ofstream(file) << "x";
  RemoveSocketFile(file);
  EXPECT_TRUE(fs::exists(file));
  const std::string sock = dir.Join("s");
  MakeSocketFile(sock, false);
  RemoveSocketFile(sock);
  EXPECT_FALSE(fs::exists(sock));
}

}  // namespace
}  // namespace berth::csi
