#include "core/fault.hpp"

#include <atomic>
#include <cstring>

namespace kvrt::fault {

namespace {
std::atomic<bool> g_armed{false};
std::atomic<uint64_t> g_target{0};
std::atomic<uint64_t> g_passed{0};
std::atomic<const char*> g_site{nullptr};  // arm_site(): the site that fails
}  // namespace

void arm(uint64_t n) {
    g_passed.store(0);
    g_site.store(nullptr);
    g_target.store(n);
    g_armed.store(n != 0);
}

void arm_site(const char* site) {
    g_passed.store(0);
    g_target.store(0);
    g_site.store(site);
    g_armed.store(site != nullptr);
}

uint64_t points_passed() { return g_passed.load(); }

Result point(const char* site, Result code) {
    if (!g_armed.load(std::memory_order_relaxed)) return KVRT_SUCCESS;
    const uint64_t k = g_passed.fetch_add(1) + 1;
    const char* armed_site = g_site.load();
    if (armed_site ? std::strcmp(armed_site, site) != 0 : k != g_target.load()) return KVRT_SUCCESS;
    if (!g_armed.exchange(false)) return KVRT_SUCCESS;  // another thread's point took it
    return fail(code, "injected failure at %s", site);
}

Result named_point(const char* site, Result code) {
    if (!g_armed.load(std::memory_order_relaxed)) return KVRT_SUCCESS;
    const char* armed_site = g_site.load();
    if (!armed_site || std::strcmp(armed_site, site) != 0) return KVRT_SUCCESS;
    if (!g_armed.exchange(false)) return KVRT_SUCCESS;
    return fail(code, "injected failure at %s", site);
}

}  // namespace kvrt::fault
