// The one random generator of the tests (unit and GPU): seeded, so every run
// draws the same values. Engines and distributions are the standard ones the
// tests always used, so the data of a test is what it was.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace kvrt_test {

template <class Engine>
class BasicRng {
public:
    // A standard uniform random bit generator: the engine's values and range,
    // so a std distribution or std::shuffle given this draws what it drew
    // given the engine.
    using result_type = typename Engine::result_type;
    static constexpr result_type min() { return Engine::min(); }
    static constexpr result_type max() { return Engine::max(); }

    explicit BasicRng(result_type seed) : engine_(seed) {}

    // The engine's next raw value (next() is the same).
    result_type operator()() { return engine_(); }
    result_type next() { return engine_(); }
    // A value in [0, n), as raw % n: no distribution, so the same sequence on
    // every standard library.
    uint32_t below(uint32_t n) { return static_cast<uint32_t>(engine_() % n); }
    // A value in [lo, hi], as lo + raw % (hi - lo + 1) in 64 bits.
    int64_t between(int64_t lo, int64_t hi) {
        return lo + static_cast<int64_t>(engine_() % static_cast<uint64_t>(hi - lo + 1));
    }
    // True with probability p percent (below(100) < p).
    bool percent(uint32_t p) { return below(100) < p; }
    // n floats of std::uniform_real_distribution<float>(lo, hi).
    std::vector<float> uniform(size_t n, float lo, float hi) {
        std::uniform_real_distribution<float> dist(lo, hi);
        std::vector<float> out(n);
        for (float& x : out) x = dist(engine_);
        return out;
    }
    // n floats of std::normal_distribution<float>(0, 1).
    std::vector<float> normal(size_t n) {
        std::normal_distribution<float> dist(0.0f, 1.0f);
        std::vector<float> out(n);
        for (float& x : out) x = dist(engine_);
        return out;
    }
    // n bytes, each the low byte of one raw value.
    std::vector<uint8_t> bytes(size_t n) {
        std::vector<uint8_t> out(n);
        for (uint8_t& b : out) b = static_cast<uint8_t>(engine_());
        return out;
    }
    // The engine itself (the generator draws the same values from it).
    Engine& engine() { return engine_; }

private:
    Engine engine_;
};

// 32-bit Mersenne twister, the tests' usual engine.
using Rng = BasicRng<std::mt19937>;
// 64-bit Mersenne twister, for the schedules that draw from 64-bit values.
using Rng64 = BasicRng<std::mt19937_64>;

}  // namespace kvrt_test
