#pragma once
// A tensor shape: up to kMaxRank dimensions, stored inline (no allocation), row-major.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace pt {

class Shape {
 public:
  static constexpr int kMaxRank = 6;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  template <class It>
  Shape(It first, It last) {
    for (; first != last; ++first) push_back(static_cast<int64_t>(*first));
  }

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[static_cast<size_t>(i)]; }
  int64_t& operator[](int i) { return dims_[static_cast<size_t>(i)]; }
  int64_t back() const { return dims_[static_cast<size_t>(rank_ - 1)]; }
  const int64_t* begin() const { return dims_.data(); }
  const int64_t* end() const { return dims_.data() + rank_; }

  int64_t numel() const;
  void push_back(int64_t d);

  // (B, ...this): the per-sample shape with a leading batch dimension.
  Shape with_batch(int64_t batch) const;
  // The shape without its leading dimension.
  Shape drop_first() const;
  // Product of all dimensions except the last (rows of a row-major matrix view).
  int64_t rows() const { return rank_ == 0 ? 1 : numel() / back(); }

  std::string str() const;  // "(256, 784)"
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

}  // namespace pt
