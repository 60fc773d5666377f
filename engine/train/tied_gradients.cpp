#include "engine/train/tied_gradients.h"

#include <fmt/format.h>

#include "engine/comm/remote_transfer.h"
#include "engine/core/error.h"

namespace pt {

namespace {

struct Copy {
  StageParameters* holder = nullptr;  // null: held by another process
  size_t entry = 0;
  Tensor grad() const { return holder->grad(entry); }
  Backend& backend() const { return holder->backend(); }
};

Copy find_copy(const std::vector<StageParameters*>& stages, const ParamRef& ref) {
  for (StageParameters* s : stages)
    if (ref.layer >= s->first_layer() && ref.layer < s->last_layer())
      for (size_t i = 0; i < s->entries().size(); ++i)
        if (s->entries()[i].layer == ref.layer && s->entries()[i].param_index == ref.param)
          return {s, i};
  return {};
}

// Copies `src` (on `from`) into `dst` (on `to`), which may be the same device.
void copy_between(Backend& from, const Tensor& src, Backend& to, const Tensor& dst) {
  from.copy_to(to, dst.data(), src.data(), src.bytes());  // copy_within when from == to
  from.synchronize();
}

}  // namespace

void sum_tied_gradients(const Model& model, const std::vector<StageParameters*>& stages,
                        Communicator* group, const std::function<int(int layer)>& device_of_layer) {
  const auto& ties = model.ties();
  for (size_t t = 0; t < ties.size(); ++t) {
    const auto& members = ties[t].members;
    std::vector<Copy> copies;
    for (const ParamRef& m : members) copies.push_back(find_copy(stages, m));
    const auto tag = [&](size_t member, int phase) {
      return transfer_tag(TransferKind::tied_gradient, static_cast<int>(member),
                          static_cast<int>(2 * t) + phase, static_cast<int>(members.size()),
                          *group);
    };
    const auto remote = [&](size_t member) {
      if (!group)
        throw std::logic_error(
            "a tied parameter's copy is in another process but there is no communicator");
      return device_of_layer(members[member].layer);
    };
    const auto what = [&](size_t member) {
      return fmt::format("the gradient of tied parameter {}.{} (copy of {}.{})",
                         members[member].layer, members[member].param, members[0].layer,
                         members[0].param);
    };
    const Copy& owner = copies[0];
    if (owner.holder) {  // add every copy's gradient into the owner's, in member order
      const Tensor total = owner.grad();
      for (size_t m = 1; m < copies.size(); ++m) {
        Tensor g;
        if (copies[m].holder && &copies[m].backend() == &owner.backend()) {
          g = copies[m].grad();
        } else if (copies[m].holder) {
          g = copies[m].backend().copy_to(owner.backend(), copies[m].grad());
        } else {
          g = recv_tensor(*group, owner.backend(), remote(m), tag(m, 0), what(m));
        }
        owner.backend().axpy(1.f, g.f32(), total.f32(), total.numel());
      }
      for (size_t m = 1; m < copies.size(); ++m) {  // and hand the sum back
        if (copies[m].holder)
          copy_between(owner.backend(), total, copies[m].backend(), copies[m].grad());
        else
          send_tensor(*group, remote(m), tag(m, 1), total)->wait(what(m));
      }
    } else {  // the owner is elsewhere: send ours (all first: the owner takes them in order), take
              // the sum
      std::vector<std::unique_ptr<PendingSend>> sends;
      for (size_t m = 1; m < copies.size(); ++m) {
        if (!copies[m].holder) continue;
        copies[m].backend().synchronize();
        sends.push_back(send_tensor(*group, remote(0), tag(m, 0), copies[m].grad()));
      }
      for (size_t m = 1; m < copies.size(); ++m) {
        if (!copies[m].holder) continue;
        const Tensor total =
            recv_tensor(*group, copies[m].backend(), remote(0), tag(m, 1), what(m));
        copies[m].backend().copy_within(copies[m].grad().data(), total.data(), total.bytes());
      }
      for (auto& s : sends) s->wait("the tied gradients' sends");
    }
  }
}

}  // namespace pt
