#include "schedule/action.h"

#include <array>
#include <charconv>
#include <utility>

namespace pt::sched {

namespace {

// Every type with its text form, in enum order. The parser reads the longest run of [A-Z_]
// after the stage number and looks it up here, so "SEND_F" can never be misread as "S" + ...
constexpr std::array<std::pair<ActionType, std::string_view>, 10> kTypeNames = {{
    {ActionType::F, "F"},
    {ActionType::B, "B"},
    {ActionType::I, "I"},
    {ActionType::W, "W"},
    {ActionType::SEND_F, "SEND_F"},
    {ActionType::RECV_F, "RECV_F"},
    {ActionType::SEND_B, "SEND_B"},
    {ActionType::RECV_B, "RECV_B"},
    {ActionType::REDUCE_GRAD, "REDUCE_GRAD"},
    {ActionType::UPDATE, "UPDATE"},
}};

// Reads a canonical non-negative decimal at the front of `text`: at least one digit, no sign,
// no leading zero (so that every action has exactly one spelling), no overflow.
std::optional<int> take_number(std::string_view& text) {
  size_t n = 0;
  while (n < text.size() && text[n] >= '0' && text[n] <= '9') ++n;
  if (n == 0) return std::nullopt;
  if (n > 1 && text[0] == '0') return std::nullopt;
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + n, value);
  if (ec != std::errc() || end != text.data() + n) return std::nullopt;  // out of int range
  text.remove_prefix(n);
  return value;
}

}  // namespace

std::string_view type_name(ActionType t) {
  for (const auto& [type, name] : kTypeNames)
    if (type == t) return name;
  return "?";
}

bool has_microbatch(ActionType t) {
  return t != ActionType::REDUCE_GRAD && t != ActionType::UPDATE;
}

bool has_number(ActionType t) { return t != ActionType::REDUCE_GRAD; }

bool is_compute(ActionType t) {
  return t == ActionType::F || t == ActionType::B || t == ActionType::I || t == ActionType::W;
}

bool is_communication(ActionType t) {
  return t == ActionType::SEND_F || t == ActionType::RECV_F || t == ActionType::SEND_B ||
         t == ActionType::RECV_B;
}

std::string Action::str() const {
  std::string out = std::to_string(stage);
  out += type_name(type);
  if (has_number(type)) out += std::to_string(microbatch);
  return out;
}

std::optional<Action> parse_action(std::string_view text) {
  Action action;
  const auto stage = take_number(text);
  if (!stage) return std::nullopt;
  action.stage = *stage;

  size_t n = 0;
  while (n < text.size() && ((text[n] >= 'A' && text[n] <= 'Z') || text[n] == '_')) ++n;
  const std::string_view name = text.substr(0, n);
  text.remove_prefix(n);
  bool known = false;
  for (const auto& [type, type_text] : kTypeNames) {
    if (type_text == name) {
      action.type = type;
      known = true;
      break;
    }
  }
  if (!known) return std::nullopt;

  if (has_number(action.type)) {
    const auto m = take_number(text);
    if (!m) return std::nullopt;
    action.microbatch = *m;
  } else {
    action.microbatch = -1;
  }
  if (!text.empty()) return std::nullopt;  // trailing junk, or a micro-batch on REDUCE_GRAD
  return action;
}

}  // namespace pt::sched
