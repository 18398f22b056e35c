// State files of a cache with a window group: kvrt_cache_state_save_file /
// _load_file and the swap-file calls take the same states as the in-memory
// calls, and a file loads to exactly the cache the bytes load to.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpu_test.hpp"

using namespace kvrt_test;

namespace {

constexpr uint32_t kKvHeads = 2, kDim = 32, kLayers = 2;
const std::vector<uint32_t> kWindows = {6, 0};

Cache make_grouped(kvrt_context ctx) {
    CacheSpec spec;
    spec.shape(kLayers, 4, kKvHeads, kDim).cells(64, 2).group(24);
    spec.windows = kWindows;
    return spec.create(ctx);
}

// Tokens 0..n-1 of `seq`, one store each (the group drops rows the window
// no longer sees as decoding goes on).
void decode(kvrt_cache c, int32_t seq, int32_t n) {
    for (int32_t t = 0; t < n; ++t) {
        std::vector<float> k(size_t{kLayers} * kKvHeads * kDim), v(k.size());
        for (size_t e = 0; e < k.size(); ++e) {
            k[e] = std::sin(0.3f * static_cast<float>(t) + 0.01f * static_cast<float>(e));
            v[e] = std::cos(0.2f * static_cast<float>(t + seq) + 0.02f * static_cast<float>(e));
        }
        const kvrt_tensor_ref kt = host_tensor(k.data()), vt = host_tensor(v.data());
        const kvrt_batch b = make_batch(1, &t, &seq);
        REQUIRE(kvrt_cache_store(c, nullptr, &b, -1, &kt, &vt, nullptr) == KVRT_SUCCESS);
    }
}

}  // namespace

TEST_CASE("window group: state files load like state bytes", "[window][state]") {
    GpuContext ctx;
    Cache g = make_grouped(ctx);
    decode(g, 0, 20);
    decode(g, 1, 9);
    char dir_template[] = "/tmp/kvrt-window-files-XXXXXX";
    REQUIRE(mkdtemp(dir_template) != nullptr);
    const std::string dir = dir_template, whole = dir + "/whole.kvrt", one = dir + "/seq1.kvrt";

    // The whole cache through a file and through bytes: the same cache.
    REQUIRE(kvrt_cache_state_save_file(g, -1, whole.c_str()) == KVRT_SUCCESS);
    Cache from_file = make_grouped(ctx), from_bytes = make_grouped(ctx);
    const std::vector<uint8_t> bytes = save_state(g, -1);
    CHECK(kvrt_cache_state_load_file(from_file, -1, whole.c_str()) == KVRT_SUCCESS);
    REQUIRE(kvrt_cache_state_load(from_bytes, -1, bytes.data(), bytes.size()) == KVRT_SUCCESS);
    CHECK(save_state(from_file, -1) == bytes);
    CHECK(save_state(from_bytes, -1) == bytes);

    // One sequence out to a file and back in: the cache as it was.
    REQUIRE(kvrt_cache_seq_swap_out_file(g, 1, one.c_str()) == KVRT_SUCCESS);
    CHECK(save_state(g, -1) != bytes);
    CHECK(kvrt_cache_seq_swap_in_file(g, 1, one.c_str()) == KVRT_SUCCESS);
    CHECK(save_state(g, 1) == save_state(from_bytes, 1));
    // And a sequence state file loads into a sequence of another cache.
    REQUIRE(kvrt_cache_seq_rm(from_file, 1, -1, -1) == KVRT_SUCCESS);
    CHECK(kvrt_cache_state_load_file(from_file, 1, one.c_str()) == KVRT_SUCCESS);
    CHECK(save_state(from_file, -1) == save_state(from_bytes, -1));

    (void)unlink(whole.c_str());
    (void)unlink(one.c_str());
    (void)rmdir(dir.c_str());
    REQUIRE(ctx.validation_errors() == 0);
}
