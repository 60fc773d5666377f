// pipetrain-hang DIR: merges the flight records that the processes of a job wrote to
// `--flight-recorder DIR` (on a timeout, an error or SIGUSR1) and prints where the job stands:
// every device's position in its action list, which rank waits for which, the first unmatched
// send or receive, and the rank the others wait for.
//
//   mpirun -np 4 pipetrain-fashion --stages 2 --dp 2 --flight-recorder /tmp/fr ...
//   kill -USR1 <pid>          # or wait for the timeout
//   pipetrain-hang /tmp/fr
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/trace/flight_record_file.h"
#include "examples/common/command_line.h"
#include "examples/hang/report.h"

int main(int argc, char** argv) {
  CLI::App app{"pipetrain-hang: where a hung or failed job stands, from its flight records"};
  std::string dir;
  app.add_option("DIR", dir, "the folder given to --flight-recorder")
      ->required()
      ->check(pt::examples::kNotEmpty);
  if (const int code = pt::examples::parse_command_line(app, argc, argv); code >= 0) return code;
  try {
    const auto records = pt::read_flight_records(dir);
    if (records.empty()) {
      fmt::print(stderr,
                 "error: {} holds no flight records (rank-N.json); they are written on a "
                 "timeout, an error or SIGUSR1 by a run given --flight-recorder {}\n",
                 dir, dir);
      return 2;
    }
    fmt::print("{}", pt::hang::report(records));
    return 0;
  } catch (const pt::UsageError& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
