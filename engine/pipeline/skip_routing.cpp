#include "engine/pipeline/skip_routing.h"

#include <fmt/format.h>

namespace pt {

namespace {

const char* noun(Direction dir) { return dir == Direction::forward ? "activation" : "gradient"; }

std::map<std::string, Tensor>& entries(SkipBoard& board, Direction dir) {
  return dir == Direction::forward ? board.activations : board.gradients;
}

// The edges whose value stage s sends (outgoing) or receives (!outgoing) in `dir`.
const std::vector<size_t>& edges(const PipelineLayout& layout, Direction dir, int s,
                                 bool outgoing) {
  const bool saved_here = (dir == Direction::forward) == outgoing;
  return (saved_here ? layout.skips_out : layout.skips_in).at(static_cast<size_t>(s));
}

// The stage at the other end of `edge` from stage s's side.
int other_end(const PipelineLayout& layout, const SkipEdge& edge, Direction dir, bool outgoing) {
  const bool towards_consumer = (dir == Direction::forward) == outgoing;
  return layout.stage_of_layer(towards_consumer ? edge.consumer : edge.producer);
}

MessageKey key(int receiving_stage, int microbatch, Direction dir, size_t edge) {
  return {receiving_stage, microbatch, dir, 1 + static_cast<int>(edge)};
}

}  // namespace

void send_skips(Direction dir, int s, SkipBoard& board, const Model& model,
                const PipelineLayout& layout, const SkipIo& io) {
  for (size_t k : edges(layout, dir, s, /*outgoing=*/true)) {
    const SkipEdge& e = model.skip_edges()[k];
    auto& mine = entries(board, dir);
    const auto it = mine.find(e.name);
    if (it == mine.end())
      throw std::logic_error(fmt::format("stage {} micro-batch {}: no {} of skip '{}' to send", s,
                                         io.microbatch, noun(dir), e.name));
    Tensor value = std::move(it->second);
    mine.erase(it);
    const int to = other_end(layout, e, dir, true);
    if (io.is_here(to))
      entries(io.board_here(to), dir)[e.name] = std::move(value);
    else
      io.send(to, key(to, io.microbatch, dir, k), std::move(value));
  }
}

void receive_skips(Direction dir, int s, SkipBoard& board, const Model& model,
                   const PipelineLayout& layout, const SkipIo& io) {
  for (size_t k : edges(layout, dir, s, /*outgoing=*/false)) {
    const SkipEdge& e = model.skip_edges()[k];
    const int from = other_end(layout, e, dir, false);
    if (io.is_here(from)) continue;  // already on the board
    entries(board, dir)[e.name] =
        io.receive(from, key(s, io.microbatch, dir, k),
                   fmt::format("the {} of skip '{}' from stage {}", noun(dir), e.name, from));
  }
}

}  // namespace pt
