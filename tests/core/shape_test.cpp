#include <doctest/doctest.h>

#include "engine/core/arena.h"
#include "engine/core/device.h"
#include "engine/core/error.h"
#include "engine/core/shape.h"

using namespace pt;

TEST_CASE("shape basics") {
  Shape s{2, 3, 4};
  CHECK(s.rank() == 3);
  CHECK(s.numel() == 24);
  CHECK(s.str() == "(2, 3, 4)");
  CHECK(s.with_batch(5) == Shape{5, 2, 3, 4});
  CHECK(s.drop_first() == Shape{3, 4});
  CHECK(s.rows() == 6);
  CHECK_THROWS_AS((Shape{1, 2, 3, 4, 5, 6, 7}), ShapeError);
}

TEST_CASE("device parsing") {
  CHECK(DeviceId::parse("cpu:3").index == 3);
  CHECK(DeviceId::parse("cuda:1").kind == DeviceKind::cuda);
  CHECK(parse_device_list("cpu:0..3").size() == 4);
  CHECK(parse_device_list("cpu:0,cuda:1")[1].str() == "cuda:1");
  CHECK_THROWS_AS(DeviceId::parse("tpu:0"), UsageError);
  CHECK_THROWS_AS(DeviceId::parse("cpu:x"), UsageError);
  CHECK_THROWS_AS(parse_device_list("cpu:3..1"), UsageError);
}

TEST_CASE("size table aligns every entry") {
  SizeTable t;
  t.add("a", Shape{3});
  t.add("b", Shape{5, 2});
  CHECK(t.entries()[0].offset == 0);
  CHECK(t.entries()[1].offset == kArenaAlignment);
  CHECK(t.total_bytes() % kArenaAlignment == 0);
  CHECK(t.total_bytes() >= kArenaAlignment + 40);
}
