#include "schedule/grid.h"

#include <algorithm>

namespace pt::sched {

namespace {

void pad_to(std::string& s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
}

bool in_list(const Schedule& schedule, const Slot& at) {
  return at.device >= 0 && static_cast<size_t>(at.device) < schedule.actions.size() &&
         at.index >= 0 &&
         static_cast<size_t>(at.index) < schedule.actions[static_cast<size_t>(at.device)].size();
}

}  // namespace

std::string render_grid(const Schedule& schedule, const std::vector<GridMark>& marks) {
  const size_t rows = schedule.actions.size();
  size_t steps = 0;
  for (const auto& list : schedule.actions) steps = std::max(steps, list.size());

  // Cell text, brackets around marked actions.
  std::vector<std::vector<std::string>> cells(rows);
  for (size_t d = 0; d < rows; ++d)
    for (const Action& a : schedule.actions[d]) cells[d].push_back(a.str());
  for (const GridMark& mark : marks)
    if (in_list(schedule, mark.at)) {
      std::string& cell =
          cells[static_cast<size_t>(mark.at.device)][static_cast<size_t>(mark.at.index)];
      if (cell.front() != '[') cell = "[" + cell + "]";
    }

  std::vector<size_t> width(steps, 0);
  for (size_t c = 0; c < steps; ++c) {
    width[c] = std::to_string(c).size();
    for (size_t d = 0; d < rows; ++d)
      if (c < cells[d].size()) width[c] = std::max(width[c], cells[d][c].size());
  }
  const std::string last_label = "device " + std::to_string(rows == 0 ? 0 : rows - 1) + ":";
  const size_t label = std::max(last_label.size(), std::string("step").size());

  std::string out = "step";
  pad_to(out, label);
  for (size_t c = 0; c < steps; ++c) {
    std::string col = std::to_string(c);
    pad_to(col, width[c]);
    out += "  " + col;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  out += '\n';

  // The rows first, so that the markers can start in one column after the widest row.
  std::vector<std::string> row_text(rows);
  size_t widest = 0;
  for (size_t d = 0; d < rows; ++d) {
    std::string& row = row_text[d];
    row = "device " + std::to_string(d) + ":";
    pad_to(row, label);
    for (size_t c = 0; c < cells[d].size(); ++c) {
      std::string cell = cells[d][c];
      if (c + 1 < cells[d].size()) pad_to(cell, width[c]);
      row += "  " + cell;
    }
    if (cells[d].empty()) row += "  (empty)";
    widest = std::max(widest, row.size());
  }

  for (size_t d = 0; d < rows; ++d) {
    std::string row = row_text[d];
    bool first = true;
    for (const GridMark& mark : marks) {
      if (mark.at.device != static_cast<int>(d)) continue;
      std::string where;
      if (in_list(schedule, mark.at))
        where = " (step " + std::to_string(mark.at.index) + ", " +
                schedule.actions[d][static_cast<size_t>(mark.at.index)].str() + ")";
      if (!first) row += '\n';
      pad_to(row, first ? widest : row.size() + widest);
      row += "  <-- ERROR HERE" + where + ": " + mark.note;
      first = false;
    }
    out += row + '\n';
  }
  return out;
}

}  // namespace pt::sched
