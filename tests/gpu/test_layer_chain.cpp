// A decode step of several layers recorded into one submission, with no host
// wait between layers: each layer's K and V are made on the device from the
// previous layer's attention output (a copy stands in for an engine's
// matmuls on the same device), written into the token's cell, and attended
// over. kvrt's barriers order each layer's write after the copy that made
// its input, its attention after the write, and the next copy after the
// attention. The outputs must equal the same step run layer by layer with
// synchronous calls and a host round trip per layer, bit for bit.
#include <cmath>
#include <cstring>
#include <vector>

#include "gpu_test.hpp"

using namespace kvrt_test;

namespace {

constexpr uint32_t kLayers = 4, kHeads = 4, kDim = 64, kPrompt = 37;
constexpr uint32_t kRow = kHeads * kDim;  // one token's row of every head: attention output = next K/V

float prompt_value(int32_t pos, uint32_t layer, uint32_t head, uint32_t d, bool v) {
    return std::sin(0.37f * static_cast<float>(pos) + 0.11f * static_cast<float>(d) +
                    0.7f * static_cast<float>(head) + 1.3f * static_cast<float>(layer) + (v ? 0.5f : 0.0f));
}

std::vector<float> first_row() {
    std::vector<float> x(kRow);
    for (uint32_t i = 0; i < kRow; ++i) x[i] = std::cos(0.05f * static_cast<float>(i));
    return x;
}

}  // namespace

TEST_CASE("layers chained on the device in one submission equal layer-by-layer calls", "[stream][chain]") {
    GpuContext ctx;
    const kvrt_type type = GENERATE(KVRT_TYPE_F16, KVRT_TYPE_Q8_0);
    INFO("type " << type);
    // As many KV heads as query heads: an attention output row is a K/V row.
    const CacheSpec spec = CacheSpec{}.shape(kLayers, kHeads, kHeads, kDim).type(type).cells(64);
    Cache chained = spec.create(ctx);
    Cache stepwise = spec.create(ctx);
    store_values(chained, 0, 0, kPrompt, kLayers, kHeads, kDim, prompt_value);
    store_values(stepwise, 0, 0, kPrompt, kLayers, kHeads, kDim, prompt_value);

    int32_t pos = kPrompt, seq = 0;
    const kvrt_batch token = make_batch(1, &pos, &seq);
    const std::vector<float> x0 = first_row();
    const uint64_t row_bytes = uint64_t{kRow} * sizeof(float);

    // Chained: one recording for the whole step, one submission, one wait.
    uint32_t cell = 0;
    KVRT_REQUIRE_OK(kvrt_cache_place(chained, &token, &cell));
    Buffer inputs(ctx, kLayers * row_bytes);   // layer l's K and V row (and its query)
    Buffer outputs(ctx, kLayers * row_bytes);  // layer l's attention output
    KVRT_REQUIRE_OK(kvrt_buffer_upload(inputs, 0, x0.data(), row_bytes));
    Stream s(ctx);
    run_stream(s, [&] {
        for (uint32_t l = 0; l < kLayers; ++l) {
            const kvrt_tensor_ref in = buffer_tensor(inputs, l * row_bytes);
            const kvrt_output_ref out = buffer_output(outputs, l * row_bytes);
            KVRT_REQUIRE_OK(kvrt_cache_write(chained, s, 1, &cell, static_cast<int32_t>(l), &in, &in));
            KVRT_REQUIRE_OK(kvrt_cache_attention(chained, s, static_cast<int32_t>(l), &token, &in, &out, nullptr));
            if (l + 1 < kLayers)  // the engine's matmuls: next layer's K, V and query from this output
                KVRT_REQUIRE_OK(kvrt_cmd_copy(s, outputs, l * row_bytes, inputs, (l + 1) * row_bytes, row_bytes));
        }
    });

    // Layer by layer: synchronous calls, each output back to the host and up
    // again as the next layer's input.
    KVRT_REQUIRE_OK(kvrt_cache_place(stepwise, &token, &cell));
    std::vector<float> x = x0, y(kRow);
    for (uint32_t l = 0; l < kLayers; ++l) {
        const kvrt_tensor_ref in = host_tensor(x.data());
        const kvrt_output_ref out = host_output(y.data());
        KVRT_REQUIRE_OK(kvrt_cache_write(stepwise, nullptr, 1, &cell, static_cast<int32_t>(l), &in, &in));
        KVRT_REQUIRE_OK(kvrt_cache_attention(stepwise, nullptr, static_cast<int32_t>(l), &token, &in, &out, nullptr));
        std::vector<float> got(kRow);
        KVRT_REQUIRE_OK(kvrt_buffer_download(outputs, l * row_bytes, got.data(), row_bytes));
        INFO("layer " << l);
        REQUIRE(std::memcmp(got.data(), y.data(), row_bytes) == 0);
        // Each layer changes the row: the chain carries real dependencies.
        CHECK(std::memcmp(x.data(), y.data(), row_bytes) != 0);
        x = y;
    }
    CHECK(ctx.validation_errors() == 0);
}
