#pragma once
// Checkpoint folders on disk: where a checkpoint may be written, how a finished one replaces an
// older one atomically, numbered checkpoints (--save-every), the newest complete one (--resume
// latest:DIR), pruning (--keep) and the temporaries an interrupted write leaves behind.
//
//   --save ckpt                     ckpt/                      one checkpoint, replaced each time
//   --save runs --save-every 100    runs/step-00000100/ ...    numbered; --keep K keeps the newest
//   K temporaries                     .ckpt.tmp.PID.K/           hidden, next to the target
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pt {

// True when `path` is a folder with a manifest.json (a complete checkpoint).
bool is_checkpoint(const std::filesystem::path& path);

// Throws UsageError "WHAT PATH: what is wrong; the fix" unless a checkpoint can be written at
// `path`: the folders above it exist or can be created (check_output_parents, output_path.h), and
// `path` is absent or a complete checkpoint (which is replaced). With `numbered`, `path` is the
// folder of numbered checkpoints: absent (it is created) or a folder that is not itself a
// checkpoint. Empty path: nothing to check (the flags refuse an empty one).
void check_checkpoint_path(const std::filesystem::path& path, std::string_view what,
                           bool numbered = false);

// A new hidden temporary folder next to `target` (".NAME.tmp.PID.K"), created empty, after the
// missing folders above `target`.
std::filesystem::path make_temporary_folder(const std::filesystem::path& target);

// Makes the finished folder `temporary` the checkpoint `target`, atomically: after a crash at any
// point `target` is either the old checkpoint or the new one. A new target is a rename; an
// existing one is exchanged with the temporary (renameat2 RENAME_EXCHANGE) and then removed.
// The parent folder is synced. Throws FileError naming the paths.
void commit_folder(const std::filesystem::path& temporary, const std::filesystem::path& target);

// Removes hidden temporaries of `target` (".NAME.tmp.*" next to it) that interrupted writes left
// behind; only names of that pattern. Returns how many were removed.
int remove_stale_temporaries(const std::filesystem::path& target);

// DIR/step-00000100 for step 100.
std::filesystem::path numbered_checkpoint(const std::filesystem::path& dir, int64_t step);
// The complete numbered checkpoints in `dir`, oldest first (by step); incomplete ones are skipped.
std::vector<std::filesystem::path> numbered_checkpoints(const std::filesystem::path& dir);
// Removes all but the newest `keep` numbered checkpoints (keep <= 0: none removed).
void keep_newest(const std::filesystem::path& dir, int keep);

// The checkpoint --resume names: "latest:DIR" is the newest complete numbered checkpoint in DIR
// (throws UsageError when there is none), anything else the path itself.
std::filesystem::path resolve_resume(const std::string& arg);

// fsync of a file or folder; throws FileError naming it.
void sync_path(const std::filesystem::path& path);

}  // namespace pt
