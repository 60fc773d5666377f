// Two pieces of work taking turns (engine/comm/take_turns.h): the first has the first turn, the
// turn changes hands only at pass(), a piece that finished (or threw) leaves the turn to the
// other for good, errors come back to the caller, and outside run() nothing waits.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "engine/comm/take_turns.h"

using namespace pt;

TEST_CASE("the turn passes only at pass(): the two pieces interleave there, first first") {
  std::vector<std::string> log;  // no lock: only the piece with the turn runs
  TakeTurns::run(
      [&] {
        log.push_back("a1");
        TakeTurns::pass();
        log.push_back("a2");
        TakeTurns::pass();
        log.push_back("a3");
        TakeTurns::pass();  // the other finished: returns at once
        log.push_back("a4");
      },
      [&] {
        log.push_back("b1");
        TakeTurns::pass();
        log.push_back("b2");
      });
  CHECK(log == std::vector<std::string>{"a1", "b1", "a2", "b2", "a3", "a4"});
}

TEST_CASE("a piece that finishes first leaves the turn to the other for good") {
  std::vector<std::string> log;
  bool partner_while_running = false, partner_after = true;
  TakeTurns::run(
      [&] {
        log.push_back("a1");
        partner_while_running = TakeTurns::partner_running();
      },
      [&] {
        log.push_back("b1");
        partner_after = TakeTurns::partner_running();  // the first has finished
        TakeTurns::pass();
        TakeTurns::pass();
        log.push_back("b2");
      });
  CHECK(log == std::vector<std::string>{"a1", "b1", "b2"});
  CHECK(partner_while_running);
  CHECK_FALSE(partner_after);
}

TEST_CASE("outside run() there is no partner and pass() returns at once") {
  CHECK_FALSE(TakeTurns::partner_running());
  TakeTurns::pass();
}

TEST_CASE("an error of either piece comes back from run() once both finished") {
  bool first_finished = false;
  CHECK_THROWS_WITH_AS(TakeTurns::run(
                           [&] {
                             TakeTurns::pass();  // the second throws: the turn comes back
                             TakeTurns::pass();
                             first_finished = true;
                           },
                           [] { throw std::runtime_error("second failed"); }),
                       "second failed", std::runtime_error);
  CHECK(first_finished);

  bool second_finished = false;
  CHECK_THROWS_WITH_AS(TakeTurns::run([] { throw std::runtime_error("first failed"); },
                                      [&] {
                                        TakeTurns::pass();
                                        second_finished = true;
                                      }),
                       "first failed", std::runtime_error);
  CHECK(second_finished);

  CHECK_THROWS_WITH_AS(TakeTurns::run([] { throw std::runtime_error("first"); },
                                      [] { throw std::runtime_error("second"); }),
                       "first", std::runtime_error);
}

TEST_CASE("run() inside a piece runs its two pieces one after the other") {
  std::vector<std::string> log;
  TakeTurns::run(
      [&] {
        TakeTurns::run(
            [&] {
              log.push_back("inner a");
              TakeTurns::pass();  // the outer partner's turn, not the inner's
              log.push_back("inner a again");
            },
            [&] { log.push_back("inner b"); });
      },
      [&] { log.push_back("b"); });
  CHECK(log == std::vector<std::string>{"inner a", "b", "inner a again", "inner b"});
}
