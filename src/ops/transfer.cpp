#include "ops/transfer.hpp"

#include <algorithm>
#include <cstddef>

#include "ops/tuning.hpp"
#include "vk/buffer.hpp"
#include "vk/stream.hpp"

namespace kvrt::ops {

namespace {

// Mirrors `Push` in shaders/fill.comp.
struct FillPush {
    uint32_t offset_words;
    uint32_t count_words;
    uint32_t value;
};
static_assert(sizeof(FillPush) == 12, "FillPush layout");
static_assert(offsetof(FillPush, offset_words) == 0 && offsetof(FillPush, count_words) == 4 &&
                  offsetof(FillPush, value) == 8, "FillPush offsets");

// Mirrors `Push` in shaders/copy.comp.
struct CopyPush {
    uint32_t src_offset_words;
    uint32_t dst_offset_words;
    uint32_t count_words;
};
static_assert(sizeof(CopyPush) == 12, "CopyPush layout");
static_assert(offsetof(CopyPush, src_offset_words) == 0 && offsetof(CopyPush, dst_offset_words) == 4 &&
                  offsetof(CopyPush, count_words) == 8, "CopyPush offsets");

uint32_t groups_for(const Tuning& t, uint64_t words) {
    return static_cast<uint32_t>(
        std::min<uint64_t>((words + t.transfer_workgroup - 1) / t.transfer_workgroup, t.transfer_max_groups));
}

}  // namespace

Result record_fill(vk::Stream& stream, const vk::Buffer& buffer, uint64_t offset, uint64_t size,
                   uint32_t value) {
    KVRT_TRY(stream.require_recording());
    const vk::Pipeline* pipeline = nullptr;
    const Tuning t = Tuning::of(stream.context());
    KVRT_TRY(stream.context().pipelines().get({"fill_u32", 1, uint32_t{sizeof(FillPush)}, {t.transfer_workgroup}},
                                              &pipeline));
    stream.begin_op("fill");
    Result r = KVRT_SUCCESS;
    while (size > 0 && r == KVRT_SUCCESS) {
        size_t piece;
        uint64_t in;
        buffer.locate(offset, &piece, &in);
        const uint64_t n = std::min(size, buffer.piece(piece).size - in);
        const vk::BufferUse use{&buffer, piece, in, n, true};
        const FillPush push{static_cast<uint32_t>(in / 4), static_cast<uint32_t>(n / 4), value};
        r = stream.dispatch(*pipeline, &use, 1, &push, groups_for(t, n / 4));
        offset += n;
        size -= n;
    }
    stream.end_op();
    return r;
}

Result record_copy(vk::Stream& stream, const vk::Buffer& src, uint64_t src_offset, const vk::Buffer& dst,
                   uint64_t dst_offset, uint64_t size) {
    KVRT_TRY(stream.require_recording());
    const vk::Pipeline* pipeline = nullptr;
    const Tuning t = Tuning::of(stream.context());
    KVRT_TRY(stream.context().pipelines().get({"copy_u32", 2, uint32_t{sizeof(CopyPush)}, {t.transfer_workgroup}},
                                              &pipeline));
    stream.begin_op("copy");
    Result r = KVRT_SUCCESS;
    // Each dispatch covers a span that lies in one piece of src and one of dst.
    while (size > 0 && r == KVRT_SUCCESS) {
        size_t sp, dp;
        uint64_t si, di;
        src.locate(src_offset, &sp, &si);
        dst.locate(dst_offset, &dp, &di);
        const uint64_t n = std::min({size, src.piece(sp).size - si, dst.piece(dp).size - di});
        const vk::BufferUse uses[2] = {{&src, sp, si, n, false}, {&dst, dp, di, n, true}};
        const CopyPush push{static_cast<uint32_t>(si / 4), static_cast<uint32_t>(di / 4), static_cast<uint32_t>(n / 4)};
        r = stream.dispatch(*pipeline, uses, 2, &push, groups_for(t, n / 4));
        src_offset += n;
        dst_offset += n;
        size -= n;
    }
    stream.end_op();
    return r;
}

}  // namespace kvrt::ops
