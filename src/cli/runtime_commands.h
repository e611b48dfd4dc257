// The berth commands about running pods: logs, exec, images, and down.
//
//   berth logs POD [-c C] [-f] [--tail N] [-p] [--timestamps]
//       GET /api/v1/namespaces/NS/pods/POD/log (what kubectl logs does)
//   berth exec POD [-c C] -- CMD ARGS...
//       CRI ExecSync on the pod's node (found through
//       <data>/nodes/<node>/runtime-endpoint); stdout, stderr and the exit
//       code of CMD come back
//   berth image import FILE... | ls | rm IMAGE... [--node N]
//       into / from every node's runtime (import: containerd's `ctr`)
//   berth down
//       with berth up stopped: every pod sandbox and container of berth's
//       containerds stopped and removed (with their network namespaces and
//       veths), containerd stopped, the bridges deleted, and everything
//       mounted below the data directory (volumes, pools) unmounted. Data
//       stays; the next berth up starts the pods again.
//
// Thread-safety: called from main.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/commands.h"
#include "http/api_client.h"

namespace berth::cli {

struct LogsOptions {
  std::string container;
  bool follow = false;
  bool previous = false;
  bool timestamps = false;
  int64_t tail = -1;
};
absl::Status Logs(http::ApiClient& client, const std::string& pod, const Target& target, const LogsOptions& options,
                  std::ostream& out);

// The command's exit code.
absl::StatusOr<int> Exec(http::ApiClient& client, const std::string& data_dir, const std::string& pod,
                         const Target& target, const std::string& container, const std::vector<std::string>& command,
                         absl::Duration timeout, std::ostream& out, std::ostream& err);

absl::Status ImageImport(const std::string& data_dir, const std::vector<std::string>& files, const std::string& node,
                         std::ostream& out);
absl::Status ImageList(const std::string& data_dir, const std::string& node, std::ostream& out);
absl::Status ImageRemove(const std::string& data_dir, const std::vector<std::string>& images, const std::string& node,
                         std::ostream& out);

absl::Status Down(const std::string& data_dir, std::ostream& out);

}  // namespace berth::cli
