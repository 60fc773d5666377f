// Fuzz target: the schedule text format (schedule/text_format.h) and the validator behind it
// (schedule/validate.h), as `--schedule file:PATH` uses them. Every input must parse or be
// refused with std::invalid_argument (schedule/'s error type); a schedule that parses must be
// validated (with the deadlock dry run, as a training and as an evaluation schedule) without
// throwing, and must print (to_text) to text that parses back to the same schedule.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include "schedule/text_format.h"
#include "schedule/validate.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  pt::fuzz::load_or_refuse<std::invalid_argument>([&] {
    const pt::sched::Schedule s = pt::sched::parse_schedule_text(text, "fuzz input");
    if (pt::sched::parse_schedule_text(pt::sched::to_text(s)) != s) {
      std::fprintf(stderr, "FINDING: to_text does not parse back:\n%s\n",
                   pt::sched::to_text(s).c_str());
      std::abort();
    }
    // Only the validation report is wanted here: errors are the validator's answer, not a
    // finding, but it must give one without throwing.
    const pt::sched::Validation v = pt::sched::validate(s);
    if (v.ok() != v.report.empty()) std::abort();
    (void)pt::sched::validate(s, {.forward_only = true});
  });
  return 0;
}
