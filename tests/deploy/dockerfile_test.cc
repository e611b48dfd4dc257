// The Dockerfile without Docker: its runtime stage installs exactly the
// Debian packages that hold berth-csi's NEEDED shared libraries (objdump -p,
// mapped with dpkg -S on this Debian 12 machine) and the tools berth-csi
// runs; its build stage installs only packages scripts/install-deps knows
// and builds only berth-csi with the release preset.
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/exec.h"
#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace berth::testing {
namespace {

std::string ReadSource(const std::string& relative) {
  std::ifstream in(std::string(BERTH_SOURCE_DIR) + "/" + relative);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Stage {
  std::string from;                   // image of the FROM line
  std::set<std::string> packages;     // every apt-get install'ed package
  std::vector<std::string> commands;  // RUN lines, continuations joined
};

// Splits a Dockerfile into stages; comments dropped, continuations joined.
std::vector<Stage> ParseDockerfile(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line, joined;
  while (std::getline(in, line)) {
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    if (!line.empty() && line.back() == '\\') {
      joined += line.substr(0, line.size() - 1) + " ";
      continue;
    }
    lines.push_back(joined + line);
    joined.clear();
  }
  std::vector<Stage> stages;
  for (const std::string& l : lines) {
    std::istringstream words(l);
    std::string instruction;
    words >> instruction;
    if (instruction == "FROM") {
      stages.emplace_back();
      words >> stages.back().from;
    } else if (instruction == "RUN" && !stages.empty()) {
      stages.back().commands.push_back(l);
      // Packages: the words after "install" up to the next "&&".
      std::string w;
      bool installing = false;
      while (words >> w) {
        if (w == "&&" || w == ";")
          installing = false;
        else if (w == "install")
          installing = true;
        else if (installing && !w.starts_with("-"))
          stages.back().packages.insert(w);
      }
    }
  }
  return stages;
}

// The Debian package owning `path` (usr-merged paths are tried both ways).
std::string OwningPackage(const std::string& path) {
  LinuxCommandRunner runner;
  std::vector<std::string> candidates = {path};
  if (path.starts_with("/usr/"))
    candidates.push_back(path.substr(4));
  else
    candidates.push_back("/usr" + path);
  for (const auto& p : candidates) {
    auto r = runner.Run({"dpkg", "-S", p}, absl::Seconds(30));
    if (r.ok() && r->exit_code == 0) {
      std::string pkg = r->output.substr(0, r->output.find(':'));
      return pkg;
    }
  }
  return "";
}

// The real path of the library the dynamic linker would load for `soname`.
std::string LibraryPath(const std::string& soname) {
  LinuxCommandRunner runner;
  auto r = runner.Run({"ldconfig", "-p"}, absl::Seconds(30));
  if (!r.ok()) return "";
  std::istringstream in(r->output);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream w(line);
    std::string name;
    w >> name;
    // This machine's (amd64) library, not a 32-bit one of the same name.
    if (name != soname || line.find("x86-64") == std::string::npos) continue;
    const size_t arrow = line.find("=> ");
    if (arrow == std::string::npos) continue;
    char resolved[4096];
    const std::string p = line.substr(arrow + 3);
    if (::realpath(p.c_str(), resolved) != nullptr) return resolved;
    return p;
  }
  return "";
}

class DockerfileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    stages_ = ParseDockerfile(ReadSource("Dockerfile"));
    ASSERT_EQ(stages_.size(), 2u) << "a build stage and a runtime stage";
  }
  std::vector<Stage> stages_;
};

TEST_F(DockerfileTest, StagesAreDebian12AndBuildOnlyBerthCsi) {
  EXPECT_EQ(stages_[0].from, "debian:bookworm");
  EXPECT_EQ(stages_[1].from, "debian:bookworm-slim");
  std::string build;
  for (const auto& c : stages_[0].commands) build += c + "\n";
  EXPECT_THAT(build, ::testing::HasSubstr("cmake --preset release"));
  EXPECT_THAT(build, ::testing::HasSubstr("--target berth-csi"));
  EXPECT_THAT(build, ::testing::HasSubstr("-DBERTH_BUILD_TESTS=OFF"));
  // Build packages are ones scripts/install-deps installs here too.
  const std::string install_deps = ReadSource("scripts/install-deps");
  for (const auto& p : stages_[0].packages) {
    EXPECT_THAT(install_deps, ::testing::HasSubstr(" " + p)) << p << " is not in scripts/install-deps";
  }
}

TEST_F(DockerfileTest, RuntimePackagesAreExactlyWhatBerthCsiLinksAndRuns) {
  LinuxCommandRunner runner;
  auto objdump = runner.Run({"objdump", "-p", BERTH_CSI_BINARY}, absl::Seconds(60));
  ASSERT_TRUE(objdump.ok()) << objdump.status();
  ASSERT_EQ(objdump->exit_code, 0) << objdump->output;
  std::set<std::string> needed;
  std::istringstream in(objdump->output);
  std::string word;
  while (in >> word) {
    if (word != "NEEDED") continue;
    std::string soname;
    in >> soname;
    // The asan preset links the sanitizer runtimes; the image is built with
    // the release preset, which does not.
    if (soname.starts_with("libasan.") || soname.starts_with("libubsan.")) continue;
    const std::string path = LibraryPath(soname);
    ASSERT_FALSE(path.empty()) << "ldconfig does not know " << soname;
    const std::string pkg = OwningPackage(path);
    ASSERT_FALSE(pkg.empty()) << "no Debian package owns " << path;
    needed.insert(pkg);
  }
  ASSERT_FALSE(needed.empty());
  EXPECT_TRUE(needed.count("libgrpc++1.51")) << "sanity: berth-csi links gRPC";

  // The programs berth-csi runs (src/driver/mount/filesystem.cc).
  std::set<std::string> tools;
  for (const char* prog : {"mkfs.ext4", "e2fsck", "resize2fs", "mkfs.xfs", "xfs_growfs", "blkid"}) {
    std::string found;
    for (const char* dir : {"/usr/sbin/", "/usr/bin/", "/sbin/", "/bin/"}) {
      if (::access((std::string(dir) + prog).c_str(), X_OK) == 0) {
        found = std::string(dir) + prog;
        break;
      }
    }
    ASSERT_FALSE(found.empty()) << prog << " is not installed here (scripts/install-deps)";
    const std::string pkg = OwningPackage(found);
    ASSERT_FALSE(pkg.empty()) << found;
    tools.insert(pkg);
  }
  EXPECT_EQ(tools, (std::set<std::string>{"e2fsprogs", "xfsprogs", "util-linux"}));

  std::set<std::string> wanted = needed;
  wanted.insert(tools.begin(), tools.end());
  const std::set<std::string>& listed = stages_[1].packages;
  // Nothing listed that berth-csi does not use.
  for (const auto& p : listed) {
    EXPECT_TRUE(wanted.count(p)) << p << " is installed but berth-csi neither links nor runs it";
  }
  // Everything used is listed, or comes as a direct dependency of a listed
  // package (a debug build also links gRPC's own dependencies, e.g.
  // libre2-9 through libgrpc29, which the release binary does not name).
  std::set<std::string> depended;
  for (const auto& p : listed) {
    auto r = runner.Run({"dpkg-query", "-W", "-f=${Depends}", p}, absl::Seconds(30));
    ASSERT_TRUE(r.ok() && r->exit_code == 0) << p << " is not a package of this machine";
    std::istringstream deps(r->output);
    std::string dep;
    while (std::getline(deps, dep, ',')) {
      dep = dep.substr(dep.find_first_not_of(' '));
      depended.insert(dep.substr(0, dep.find_first_of(" :(")));
    }
  }
  for (const auto& p : wanted) {
    EXPECT_TRUE(listed.count(p) || depended.count(p))
        << p << " (a NEEDED library's or a tool's package) is missing from the runtime stage";
  }
  // The release binary's own libraries are all listed explicitly.
  for (const char* p : {"libgrpc++1.51", "libgrpc29", "libprotobuf32", "libabsl20220623", "libspdlog1.10", "libfmt9",
                        "libssl3", "libstdc++6"}) {
    EXPECT_TRUE(listed.count(p)) << p;
  }
}

}  // namespace
}  // namespace berth::testing
