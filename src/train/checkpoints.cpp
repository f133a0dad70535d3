#include "train/checkpoints.h"

#include <filesystem>
#include <vector>

#include "io/checkpoint.h"
#include "io/fileio.h"
#include "util/check.h"

namespace mxdp {

namespace fs = std::filesystem;

std::string checkpoint_path(const std::string& dir, int64_t step) {
  return (fs::path(dir) / checkpoint_name(step)).string();
}

std::string resolve_checkpoint(const std::string& p) {
  std::error_code ec;
  if (is_step_directory(p)) return p;
  if (!fs::is_directory(p, ec)) return p;  // a single-file checkpoint (its reader says if it is none)
  const fs::path latest = fs::path(p) / "latest";
  MXDP_CHECK(fs::exists(latest, ec), "--load '", p, "' is a directory with neither a '", kManifestName,
             "' (a checkpoint) nor a 'latest' file (a save directory)");
  const std::vector<uint8_t> bytes = read_file(latest.string(), 4096);
  std::string name(bytes.begin(), bytes.end());
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' ')) name.pop_back();
  // Trust no file: `latest` may only name an entry of its own directory.
  const bool plain = !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
                     name.find('\0') == std::string::npos;
  MXDP_CHECK(plain, "'", latest.string(), "' should hold the name of a checkpoint in its directory, not '", name, "'");
  return (fs::path(p) / name).string();
}

}  // namespace mxdp
