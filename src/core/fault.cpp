#include "core/fault.hpp"

#include <atomic>

namespace kvrt::fault {

namespace {
std::atomic<bool> g_armed{false};
std::atomic<uint64_t> g_target{0};
std::atomic<uint64_t> g_passed{0};
}  // namespace

void arm(uint64_t n) {
    g_passed.store(0);
    g_target.store(n);
    g_armed.store(n != 0);
}

uint64_t points_passed() { return g_passed.load(); }

Result point(const char* site, Result code) {
    if (!g_armed.load(std::memory_order_relaxed)) return KVRT_SUCCESS;
    const uint64_t k = g_passed.fetch_add(1) + 1;
    if (k != g_target.load()) return KVRT_SUCCESS;
    g_armed.store(false);
    return fail(code, "injected failure at %s", site);
}

}  // namespace kvrt::fault
