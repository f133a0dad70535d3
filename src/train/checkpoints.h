// Where a job's checkpoints are: the names mxdp train saves under and the
// checkpoint a --load names. The trainer and the trained weights (sample,
// export) both find checkpoints through these.
#pragma once

#include <cstdint>
#include <string>

namespace mxdp {

// Path of the checkpoint of `step` in `dir` (dir/step_NNNNNN.ckpt).
std::string checkpoint_path(const std::string& dir, int64_t step);
// A step directory or single-file checkpoint as it is, or the one a save
// directory's `latest` names.
std::string resolve_checkpoint(const std::string& file_or_dir);

}  // namespace mxdp
