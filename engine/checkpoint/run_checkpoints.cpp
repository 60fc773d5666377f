#include "engine/checkpoint/run_checkpoints.h"

#include <fmt/format.h>

#include "engine/checkpoint/folders.h"
#include "engine/checkpoint/manifest.h"
#include "engine/core/error.h"
#include "engine/io/output_path.h"
#include "engine/train/training_engine.h"

namespace pt {

namespace fs = std::filesystem;

void CheckpointOptions::check() const {
  if (save_every < 0)
    throw UsageError(fmt::format("--save-every {} must be >= 0 (0: only at the end)", save_every));
  if (keep < 0) throw UsageError(fmt::format("--keep {} must be >= 0 (0: keep all)", keep));
  if (save_every > 0 && save.empty())
    throw UsageError(
        "--save-every needs --save DIR: the folder that holds the numbered checkpoints");
  if (keep > 0 && save_every == 0)
    throw UsageError(
        "--keep applies to the numbered checkpoints of --save-every; add --save-every N");
  check_checkpoint_path(save, "--save", save_every > 0);
  check_checkpoint_path(save_init, "--save-init");
  if (!save.empty() && !save_init.empty() &&
      fs::absolute(save).lexically_normal() == fs::absolute(save_init).lexically_normal())
    throw UsageError("--save and --save-init name the same path; give each its own");
  if (resume == "latest:") resolve_resume(resume);  // refused: names no folder
  if (resume.rfind("latest:", 0) != 0 && !resume.empty()) {
    std::error_code ec;
    if (!fs::exists(resume, ec))
      throw UsageError(fmt::format("--resume {}: it does not exist", resume));
  }
}

RunCheckpoints::RunCheckpoints(CheckpointOptions options, Communicator* world)
    : options_(std::move(options)), world_(world) {
  options_.check();
  if (world_ && world_->world_rank(world_->rank()) != 0) return;
  int removed = 0;
  if (!options_.save.empty() && options_.save_every == 0)
    removed += remove_stale_temporaries(options_.save);
  if (!options_.save_init.empty()) removed += remove_stale_temporaries(options_.save_init);
  if (options_.save_every > 0 && fs::is_directory(options_.save)) {
    for (const auto& entry : fs::directory_iterator(options_.save)) {
      const std::string name = entry.path().filename().string();
      // Hidden temporaries of numbered checkpoints: ".step-NNNNNNNN.tmp.PID.K".
      if (name.rfind(".step-", 0) == 0 && name.find(".tmp.") != std::string::npos) {
        std::error_code ec;
        if (fs::remove_all(entry.path(), ec) > 0) ++removed;
      }
    }
  }
  if (removed > 0)
    fmt::print("removed {} unfinished checkpoint folder{} that an interrupted run left\n", removed,
               removed == 1 ? "" : "s");
}

std::optional<TrainingState> RunCheckpoints::resume(TrainingEngine& engine) {
  if (options_.resume.empty()) return std::nullopt;
  resumed_from_ = resolve_resume(options_.resume);
  const std::string where = resumed_from_.string();
  // The settings first, from the manifest alone: "saved with --d-model 32 but this run has
  // --d-model 64" says what to change, where the model-signature check that loading does would
  // only show two differing layer descriptions.
  const CheckpointManifest manifest = read_manifest(resumed_from_);
  for (const auto& [key, value] : options_.settings) {
    auto it = manifest.metadata.find(key);
    if (it == manifest.metadata.end())
      throw UsageError(fmt::format(
          "checkpoint {} does not record the setting '{}' (this run has {}): it was written by "
          "another program",
          where, key, value));
    if (it->second != value)
      throw UsageError(fmt::format(
          "checkpoint {} was saved with --{} {} but this run has --{} {}: resume with the same "
          "setting",
          where, key, it->second, key, value));
  }
  const std::vector<StageState> copies = engine.all_stage_copies();
  const TrainingState s = load_checkpoint(resumed_from_, engine.model(), copies);
  engine.stage_copies_loaded();
  if (s.seed != engine.seed())
    throw UsageError(
        fmt::format("checkpoint {} was saved with --seed {} but this run has --seed {}", where,
                    s.seed, engine.seed()));
  engine.set_step(s.step);
  last_saved_step_ = s.step;  // it is on disk already
  return s;
}

void RunCheckpoints::save(TrainingEngine& engine, const fs::path& path, TrainingState state,
                          bool with_optimizer) {
  std::vector<StageState> stages = engine.stages_to_save();
  if (!with_optimizer)
    for (StageState& s : stages) s.optimizer = nullptr;
  for (const auto& [k, v] : options_.settings) state.extra[k] = v;
  state.layout = options_.layout;
  const SaveStats st = save_checkpoint(path, engine.model(), stages, state, world_);
  fmt::print("saved checkpoint {} at step {} ({:.1f} MiB in {:.2f} s)\n", path.string(), state.step,
             static_cast<double>(st.total_bytes) / (1 << 20), st.seconds);
}

void RunCheckpoints::save_init(TrainingEngine& engine, const TrainingState& state) {
  if (options_.save_init.empty()) return;
  save(engine, options_.save_init, state, false);
}

bool RunCheckpoints::saves_after(int64_t step) const {
  return options_.save_every > 0 && step % options_.save_every == 0 && step != last_saved_step_;
}

void RunCheckpoints::save_numbered(TrainingEngine& engine, const TrainingState& state) {
  const bool rank0 = !world_ || world_->world_rank(world_->rank()) == 0;
  if (rank0) fs::create_directories(options_.save);  // checked writable before; made on first use
  if (world_) world_->barrier("creating the checkpoint folder");
  save(engine, numbered_checkpoint(options_.save, engine.step()), state, true);
  if (rank0) keep_newest(options_.save, options_.keep);
}

void RunCheckpoints::after_step(TrainingEngine& engine,
                                const std::function<TrainingState()>& state) {
  if (!saves_after(engine.step())) return;
  save_numbered(engine, state());
  last_saved_step_ = engine.step();
}

void RunCheckpoints::at_end(TrainingEngine& engine, const TrainingState& state) {
  if (options_.save.empty() || engine.step() == last_saved_step_) return;
  if (options_.save_every > 0)
    save_numbered(engine, state);
  else
    save(engine, options_.save, state, true);
  last_saved_step_ = engine.step();
}

}  // namespace pt
