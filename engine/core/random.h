#pragma once
// Counter-based randomness: every random number is a pure function of (key, counter), so the
// same values come out on any backend, any thread count and any partition of the model.
// Used for parameter initialisation (key from seed and global layer index), dropout masks (key
// from seed, step, micro-batch, layer) and data shuffling (key from seed and epoch).
#include <cstdint>

#if defined(__CUDACC__)
#define PT_HOST_DEVICE __host__ __device__
#else
#define PT_HOST_DEVICE
#endif

namespace pt {

// SplitMix64's finaliser: a bijective 64-bit mix with good avalanche.
PT_HOST_DEVICE constexpr uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Combines keys: hash_keys(a, b) differs for every (a, b) with overwhelming probability.
PT_HOST_DEVICE constexpr uint64_t hash_keys(uint64_t a, uint64_t b) {
  return mix64(a ^ mix64(b + 0x632BE59BD9B4E019ull));
}

// Uniform in [0, 1) with 24 random bits (exactly representable as float).
PT_HOST_DEVICE constexpr float counter_uniform(uint64_t key, uint64_t counter) {
  return static_cast<float>(mix64(key ^ mix64(counter)) >> 40) * (1.0f / 16777216.0f);
}

// A small sequential generator over the same mix, for host-side code (shuffles, init).
class CounterRng {
 public:
  explicit constexpr CounterRng(uint64_t key) : key_(key) {}
  constexpr uint64_t next_u64() { return mix64(key_ ^ mix64(counter_++)); }
  // Uniform in [0, 1) with 53 random bits.
  constexpr double next_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n) (n > 0), by rejection so it is unbiased.
  uint64_t next_below(uint64_t n) {
    const uint64_t limit = ~uint64_t{0} - (~uint64_t{0} % n);
    uint64_t x;
    do x = next_u64();
    while (x >= limit);
    return x % n;
  }

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
};

}  // namespace pt
