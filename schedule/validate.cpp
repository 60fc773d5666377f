#include "schedule/validate.h"

#include <algorithm>
#include <stdexcept>

#include "schedule/dry_run.h"
#include "schedule/grid.h"

namespace pt::sched {

namespace {

std::string num(long long v) { return std::to_string(v); }

// Collects errors and the grid marks that go with them.
class Checker {
 public:
  Checker(const Schedule& schedule, Form form, bool forward_only)
      : s_(schedule), form_(form), forward_only_(forward_only) {}

  Validation run(const ValidateOptions& options) {
    if (check_shape()) {
      const ActionIndex index(s_);
      check_actions(index);
      check_compute(index);
      if (form_ == Form::Lowered) {
        check_comm_actions(index);
        check_comm_pairs(index);
      }
      check_gradient_steps(index);
      check_updates(index);
      if (errors_.empty() && options.dry_run) check_deadlock(index);
    }
    return finish();
  }

 private:
  const Schedule& s_;
  Form form_;
  bool forward_only_;
  std::vector<std::string> errors_;
  std::vector<GridMark> marks_;

  void error(const std::string& message) { errors_.push_back(message); }
  void error_at(Slot at, const std::string& message) {
    errors_.push_back(message);
    marks_.push_back({at, message});
  }
  // Marks the row of the device that holds `stage` (the action itself is missing).
  void error_row(int stage, const std::string& message) {
    error_at(Slot{s_.device_of(stage), -1}, message);
  }
  std::string device_name(int stage) const { return "device " + num(s_.device_of(stage)); }
  bool on_one_device(int a, int b) const { return s_.device_of(a) == s_.device_of(b); }

  // ---- structure -------------------------------------------------------------------------
  bool check_shape() {
    const int D = s_.num_devices, S = s_.num_stages, M = s_.microbatches;
    if (D < 1) error("num_devices is " + num(D) + "; a schedule needs at least 1 device");
    if (S < 1) error("num_stages is " + num(S) + "; a schedule needs at least 1 stage");
    if (M < 1) error("microbatches is " + num(M) + "; a schedule needs at least 1 micro-batch");
    if (s_.steps < 1 || (M >= 1 && M % s_.steps != 0))
      error("steps is " + num(s_.steps) + " for " + num(M) +
            " micro-batches; it must be >= 1 and divide them");
    if (D >= 1 && s_.actions.size() != static_cast<size_t>(D))
      error("there are " + num(static_cast<long long>(s_.actions.size())) + " action lists for " +
            num(D) + " devices; need one list per device");
    if (S >= 1 && s_.stage_device.size() != static_cast<size_t>(S))
      error("stage_device has " + num(static_cast<long long>(s_.stage_device.size())) +
            " entries for " + num(S) + " stages; need one device per stage");
    for (size_t k = 0; k < s_.stage_device.size(); ++k)
      if (s_.stage_device[k] < 0 || s_.stage_device[k] >= D)
        error("stage " + num(static_cast<long long>(k)) + " is placed on device " +
              num(s_.stage_device[k]) + ", outside 0.." + num(D - 1));
    return errors_.empty();
  }

  void check_actions(const ActionIndex& index) {
    for (size_t d = 0; d < s_.actions.size(); ++d) {
      const auto& list = s_.actions[d];
      for (size_t i = 0; i < list.size(); ++i) {
        const Action& a = list[i];
        const Slot at{static_cast<int>(d), static_cast<int>(i)};
        if (a.stage < 0 || a.stage >= s_.num_stages) {
          error_at(at, a.str() + " names stage " + num(a.stage) + ", outside 0.." +
                           num(s_.num_stages - 1));
          continue;
        }
        if (has_microbatch(a.type) && (a.microbatch < 0 || a.microbatch >= s_.microbatches))
          error_at(at, a.str() + " names micro-batch " + num(a.microbatch) + ", outside 0.." +
                           num(s_.microbatches - 1));
        if (a.type == ActionType::UPDATE && (a.microbatch < 0 || a.microbatch >= s_.steps))
          error_at(at, a.str() + " names step " + num(a.microbatch) + ", outside 0.." +
                           num(s_.steps - 1));
        if (!has_number(a.type) && a.microbatch != -1)
          error_at(at, std::string(type_name(a.type)) + " of stage " + num(a.stage) +
                           " carries micro-batch " + num(a.microbatch) + "; it takes none (-1)");
        if (s_.device_of(a.stage) != static_cast<int>(d))
          error_at(at, a.str() + " is in device " + num(static_cast<long long>(d)) +
                           "'s list, but stage " + num(a.stage) + " is placed on " +
                           device_name(a.stage));
        if (form_ == Form::ComputeOnly && is_communication(a.type))
          error_at(at, a.str() +
                           " in a compute-only schedule: communication is added by "
                           "add_communication() (or validate it as lowered)");
        if (forward_only_ && a.type != ActionType::F && a.type != ActionType::SEND_F &&
            a.type != ActionType::RECV_F)
          error_at(at, a.str() + " in a forward-only schedule: it runs F, SEND_F and RECV_F only");
        if (index.find(a) != at)  // the index holds each action's first occurrence
          error_at(at, a.str() + " appears more than once");
      }
    }
  }

  // ---- compute: F, B or I+W, their order ---------------------------------------------------
  void check_compute(const ActionIndex& index) {
    for (int s = 0; s < s_.num_stages; ++s) {
      for (int m = 0; m < s_.microbatches; ++m) {
        const Action fa{s, ActionType::F, m}, ba{s, ActionType::B, m}, ia{s, ActionType::I, m},
            wa{s, ActionType::W, m};
        const auto f = index.find(fa), b = index.find(ba), i = index.find(ia), w = index.find(wa);
        if (forward_only_) {  // the backward actions were reported by check_actions
          if (!f) error_row(s, "stage " + num(s) + " has no " + fa.str());
          continue;
        }
        if (!f) {
          if (b || i || w) {
            const Slot at = b ? *b : i ? *i : *w;
            error_at(at, "stage " + num(s) + " has a backward for micro-batch " + num(m) +
                             " but no " + fa.str());
          } else {
            error_row(s, "stage " + num(s) + " has no action for micro-batch " + num(m) +
                             " (needs " + fa.str() + ", then " + ba.str() + " or " + ia.str() +
                             " and " + wa.str() + ")");
          }
        }
        if (b && (i || w))
          error_at(i ? *i : *w, "stage " + num(s) + " micro-batch " + num(m) +
                                    " has both B and I/W: use " + ba.str() + ", or " + ia.str() +
                                    " and " + wa.str());
        if (f && !b && !i && !w)
          error_at(*f, fa.str() + " has no backward: add " + ba.str() + ", or " + ia.str() +
                           " and " + wa.str());
        if (i && !w) error_at(*i, ia.str() + " has no " + wa.str() + " (its weight gradient)");
        if (w && !i) error_at(*w, wa.str() + " has no " + ia.str() + " before it");
        const auto bwd = b ? b : i;
        const Action bwd_action = b ? ba : ia;
        if (f && bwd && f->device == bwd->device && bwd->index < f->index)
          error_at(*bwd,
                   bwd_action.str() + " runs before " + fa.str() + " (step " + num(f->index) + ")");
        if (i && w && i->device == w->device && w->index < i->index)
          error_at(*w, wa.str() + " runs before " + ia.str() + " (step " + num(i->index) + ")");
      }
    }
  }

  // ---- communication --------------------------------------------------------------------
  // Each SEND/RECV present: legal between these stages, matched, on the right side of its compute.
  void check_comm_actions(const ActionIndex& index) {
    const int last = s_.num_stages - 1;
    for (size_t d = 0; d < s_.actions.size(); ++d) {
      const auto& list = s_.actions[d];
      for (size_t k = 0; k < list.size(); ++k) {
        const Action& a = list[k];
        if (!is_communication(a.type) || a.stage < 0 || a.stage > last) continue;
        const Slot at{static_cast<int>(d), static_cast<int>(k)};
        const int s = a.stage, m = a.microbatch;
        const bool forward = a.type == ActionType::SEND_F || a.type == ActionType::RECV_F;
        const bool send = a.type == ActionType::SEND_F || a.type == ActionType::SEND_B;
        // The peer stage: where the data goes (SEND) or comes from (RECV).
        const int peer =
            (a.type == ActionType::SEND_F || a.type == ActionType::RECV_B) ? s + 1 : s - 1;
        if (peer < 0 || peer > last) {
          error_at(at, a.str() + ": stage " + num(s) + " is the " + (peer < 0 ? "first" : "last") +
                           " stage and has no stage " + num(peer) + " to " +
                           (send ? "send to" : "receive from"));
          continue;
        }
        if (on_one_device(s, peer)) {
          error_at(at, a.str() + ": stages " + num(std::min(s, peer)) + " and " +
                           num(std::max(s, peer)) + " are both on " + device_name(s) +
                           "; a local hand-off needs no SEND/RECV");
          continue;
        }
        const ActionType match_type = forward ? (send ? ActionType::RECV_F : ActionType::SEND_F)
                                              : (send ? ActionType::RECV_B : ActionType::SEND_B);
        const Action match{peer, match_type, m};
        if (!index.find(match))
          error_at(at, a.str() + " has no matching " + match.str() + " on " + device_name(peer));
        // The compute action on this stage that produces (SEND) or consumes (RECV) the data.
        const Action compute = forward ? Action{s, ActionType::F, m} : backward_of(s, m, index);
        if (const auto c = index.find(compute); c && c->device == at.device) {
          if (send && c->index > at.index)
            error_at(at, a.str() + " runs before " + compute.str() + " (step " + num(c->index) +
                             "), which produces what it sends");
          if (!send && c->index < at.index)
            error_at(at, a.str() + " runs after " + compute.str() + " (step " + num(c->index) +
                             "), which needs what it receives");
        }
      }
    }
  }

  // Each hand-off between devices has its pair (when neither half is there; one half alone was
  // reported above as unmatched).
  void check_comm_pairs(const ActionIndex& index) {
    for (int s = 0; s + 1 < s_.num_stages; ++s) {
      if (on_one_device(s, s + 1)) continue;
      for (int m = 0; m < s_.microbatches; ++m) {
        const Action send_f{s, ActionType::SEND_F, m}, recv_f{s + 1, ActionType::RECV_F, m};
        if (!index.find(send_f) && !index.find(recv_f)) {
          const std::string msg = "stage " + num(s + 1) + " (" + device_name(s + 1) +
                                  ") needs micro-batch " + num(m) + "'s activation from stage " +
                                  num(s) + " (" + device_name(s) + "), but there is no " +
                                  send_f.str() + " / " + recv_f.str() + " pair";
          if (const auto f = index.find({s + 1, ActionType::F, m}))
            error_at(*f, msg);
          else
            error_row(s + 1, msg);
        }
        const Action send_b{s + 1, ActionType::SEND_B, m}, recv_b{s, ActionType::RECV_B, m};
        if (forward_only_) continue;
        if (!index.find(send_b) && !index.find(recv_b)) {
          const std::string msg = "stage " + num(s) + " (" + device_name(s) +
                                  ") needs micro-batch " + num(m) + "'s gradient from stage " +
                                  num(s + 1) + " (" + device_name(s + 1) + "), but there is no " +
                                  send_b.str() + " / " + recv_b.str() + " pair";
          if (const auto b = index.find(backward_of(s, m, index)))
            error_at(*b, msg);
          else
            error_row(s, msg);
        }
      }
    }
  }

  // ---- REDUCE_GRAD after every weight gradient of its stage -------------------------------
  void check_gradient_steps(const ActionIndex& index) {
    for (int s = 0; s < s_.num_stages; ++s) {
      const Action reduce{s, ActionType::REDUCE_GRAD, -1};
      const auto slot = index.find(reduce);
      if (!slot) continue;
      for (int m = 0; m < s_.microbatches; ++m) {
        const Action wgrad = weight_grad_of(s, m, index);
        const auto w = index.find(wgrad);
        if (w && w->device == slot->device && w->index > slot->index) {
          error_at(*slot, reduce.str() + " runs before " + wgrad.str() + " (step " + num(w->index) +
                              "); it needs every weight gradient of stage " + num(s));
          break;
        }
      }
    }
  }

  // ---- UPDATE (asynchronous windows): each stage's weight versions -----------------------
  // With more than one step every stage updates once per step. Step t computes with the weights
  // of UPDATE(t - 2) and accumulates into the one gradient buffer that UPDATE(t) empties, so on
  // each stage: every weight gradient of step k before UPDATE(k), every one of step k + 1 after
  // it, and every forward of step k + 2 after it (at most two versions live at once).
  void check_updates(const ActionIndex& index) {
    bool any = false;
    for (const auto& list : s_.actions)
      for (const Action& a : list) any = any || a.type == ActionType::UPDATE;
    if (!any && s_.steps == 1) return;
    const int M = s_.microbatches_per_step();
    for (int s = 0; s < s_.num_stages; ++s) {
      for (int k = 0; k < s_.steps; ++k) {
        const Action update{s, ActionType::UPDATE, k};
        const auto u = index.find(update);
        if (!u) {
          error_row(s, "stage " + num(s) + " has no " + update.str() + " (step " + num(k) + " of " +
                           num(s_.steps) + ")");
          continue;
        }
        const auto before = [&](const Action& a, bool must_precede, const std::string& why) {
          const auto x = index.find(a);
          if (!x || x->device != u->device) return;
          if (must_precede && x->index > u->index)
            error_at(*u, update.str() + " runs before " + a.str() + ", " + why);
          if (!must_precede && x->index < u->index)
            error_at(*x, a.str() + " runs before " + update.str() + ", " + why);
        };
        for (int m = k * M; m < (k + 1) * M; ++m)
          before(weight_grad_of(s, m, index), true, "whose gradient it applies");
        if (k + 1 < s_.steps)
          for (int m = (k + 1) * M; m < (k + 2) * M; ++m)
            before(weight_grad_of(s, m, index), false,
                   "which would add step " + num(k + 1) + "'s gradient to step " + num(k) + "'s");
        if (k + 2 < s_.steps)
          for (int m = (k + 2) * M; m < (k + 3) * M; ++m)
            before({s, ActionType::F, m}, false,
                   "which needs the weights it writes (or a third version)");
      }
    }
  }

  // ---- deadlock -------------------------------------------------------------------------
  void check_deadlock(const ActionIndex& index) {
    const DryRunResult run = dry_run(s_, form_);
    if (run.completed) return;
    long long total = 0, ran = 0;
    for (size_t d = 0; d < s_.actions.size(); ++d) {
      total += static_cast<long long>(s_.actions[d].size());
      ran += run.executed[d];
    }
    error("deadlock: no device can advance after " + num(ran) + " of " + num(total) +
          " actions ran (" + num(static_cast<long long>(run.stuck.size())) + " of " +
          num(s_.num_devices) + " devices stuck)");
    for (const Stuck& stuck : run.stuck) {
      const Action& a =
          s_.actions[static_cast<size_t>(stuck.at.device)][static_cast<size_t>(stuck.at.index)];
      const std::string why = stuck.explain(index);
      error("device " + num(stuck.at.device) + " is stuck at step " + num(stuck.at.index) + " (" +
            a.str() + "): it " + why);
      marks_.push_back({stuck.at, "stuck: " + why});
    }
  }

  Validation finish() {
    Validation v;
    v.errors = errors_;
    if (errors_.empty()) return v;
    constexpr size_t kMaxListed = 40;
    v.report = "invalid " + std::string(form_ == Form::Lowered ? "lowered" : "compute-only") +
               " schedule (devices=" + num(s_.num_devices) + " stages=" + num(s_.num_stages) +
               " microbatches=" + num(s_.microbatches) +
               "): " + num(static_cast<long long>(errors_.size())) +
               (errors_.size() == 1 ? " error\n" : " errors\n");
    for (size_t k = 0; k < errors_.size() && k < kMaxListed; ++k)
      v.report += "  " + errors_[k] + "\n";
    if (errors_.size() > kMaxListed)
      v.report +=
          "  ... and " + num(static_cast<long long>(errors_.size() - kMaxListed)) + " more\n";
    v.report += render_grid(s_, marks_);
    return v;
  }
};

}  // namespace

Validation validate(const Schedule& schedule, const ValidateOptions& options) {
  const Form form = options.form.value_or(infer_form(schedule));
  return Checker(schedule, form, options.forward_only).run(options);
}

void require_valid(const Schedule& schedule, const ValidateOptions& options) {
  const Validation v = validate(schedule, options);
  if (!v.ok()) throw std::invalid_argument(v.report);
}

}  // namespace pt::sched
