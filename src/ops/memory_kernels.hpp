// The kernels of the fixed-capacity memory (shaders/memory_*.comp): push
// constant mirrors, pipeline selection, and the recording of one chunk's
// kernels (memory_update.cpp). Callers pass whole buffer pieces (BufferUse)
// and offsets in the units each shader documents; nothing here knows about
// sequences or slots (memory/memory.hpp does).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/result.hpp"
#include "kv/memory_layout.hpp"
#include "vk/pipeline.hpp"
#include "vk/stream.hpp"

namespace kvrt::ops::memory_kernels {

// Mirrors of the `Push` blocks (std430 push constants: tightly packed words).
struct PackPush {
    uint32_t src_base, row_elems, head0, dim, dim8, tokens, rows, f16, gathered, idx_base, dst_off, head_stride;
};
struct ScoresPush {
    uint32_t x_off, s_off, k_off, head_work, head_keys, e8, m8, rows, wq_tiles, q_tiles;
};
struct SoftmaxPush {
    uint32_t s_off, head_work, m, m8, rows, w_rows, q_rows;
    float scale;
};
struct UpdatePush {
    uint32_t src_off, src_head, dst_off, dst_head, head_work, w_off, wv_off, snap_off, m, m8, d8, upd, n_snap, flags;
};
struct IntraPush {
    uint32_t p_off, w_off, a_off, head_work, m8, rows, tokens;
};
struct ReadPush {
    uint32_t p_off, snap_off, a_off, wv_off, head_work, m8, d8, m, rows, tokens, intra, out_row, head0, d;
};
struct OutPush {
    uint32_t words, row_words, f16, dst_base, idx_base;
};

constexpr uint32_t kUpdateZeroSource = 1;
constexpr uint32_t kUpdateWriteState = 2;

#define KVRT_PUSH_WORD(T, field, index) static_assert(offsetof(T, field) == 4 * (index), #T "." #field)
static_assert(sizeof(PackPush) == 48, "PackPush layout");
KVRT_PUSH_WORD(PackPush, src_base, 0);
KVRT_PUSH_WORD(PackPush, row_elems, 1);
KVRT_PUSH_WORD(PackPush, head0, 2);
KVRT_PUSH_WORD(PackPush, dim, 3);
KVRT_PUSH_WORD(PackPush, dim8, 4);
KVRT_PUSH_WORD(PackPush, tokens, 5);
KVRT_PUSH_WORD(PackPush, rows, 6);
KVRT_PUSH_WORD(PackPush, f16, 7);
KVRT_PUSH_WORD(PackPush, gathered, 8);
KVRT_PUSH_WORD(PackPush, idx_base, 9);
KVRT_PUSH_WORD(PackPush, dst_off, 10);
KVRT_PUSH_WORD(PackPush, head_stride, 11);
static_assert(sizeof(ScoresPush) == 40, "ScoresPush layout");
KVRT_PUSH_WORD(ScoresPush, x_off, 0);
KVRT_PUSH_WORD(ScoresPush, s_off, 1);
KVRT_PUSH_WORD(ScoresPush, k_off, 2);
KVRT_PUSH_WORD(ScoresPush, head_work, 3);
KVRT_PUSH_WORD(ScoresPush, head_keys, 4);
KVRT_PUSH_WORD(ScoresPush, e8, 5);
KVRT_PUSH_WORD(ScoresPush, m8, 6);
KVRT_PUSH_WORD(ScoresPush, rows, 7);
KVRT_PUSH_WORD(ScoresPush, wq_tiles, 8);
KVRT_PUSH_WORD(ScoresPush, q_tiles, 9);
static_assert(sizeof(SoftmaxPush) == 32, "SoftmaxPush layout");
KVRT_PUSH_WORD(SoftmaxPush, s_off, 0);
KVRT_PUSH_WORD(SoftmaxPush, head_work, 1);
KVRT_PUSH_WORD(SoftmaxPush, m, 2);
KVRT_PUSH_WORD(SoftmaxPush, m8, 3);
KVRT_PUSH_WORD(SoftmaxPush, rows, 4);
KVRT_PUSH_WORD(SoftmaxPush, w_rows, 5);
KVRT_PUSH_WORD(SoftmaxPush, q_rows, 6);
KVRT_PUSH_WORD(SoftmaxPush, scale, 7);
static_assert(sizeof(UpdatePush) == 56, "UpdatePush layout");
KVRT_PUSH_WORD(UpdatePush, src_off, 0);
KVRT_PUSH_WORD(UpdatePush, src_head, 1);
KVRT_PUSH_WORD(UpdatePush, dst_off, 2);
KVRT_PUSH_WORD(UpdatePush, dst_head, 3);
KVRT_PUSH_WORD(UpdatePush, head_work, 4);
KVRT_PUSH_WORD(UpdatePush, w_off, 5);
KVRT_PUSH_WORD(UpdatePush, wv_off, 6);
KVRT_PUSH_WORD(UpdatePush, snap_off, 7);
KVRT_PUSH_WORD(UpdatePush, m, 8);
KVRT_PUSH_WORD(UpdatePush, m8, 9);
KVRT_PUSH_WORD(UpdatePush, d8, 10);
KVRT_PUSH_WORD(UpdatePush, upd, 11);
KVRT_PUSH_WORD(UpdatePush, n_snap, 12);
KVRT_PUSH_WORD(UpdatePush, flags, 13);
static_assert(sizeof(IntraPush) == 28, "IntraPush layout");
KVRT_PUSH_WORD(IntraPush, p_off, 0);
KVRT_PUSH_WORD(IntraPush, w_off, 1);
KVRT_PUSH_WORD(IntraPush, a_off, 2);
KVRT_PUSH_WORD(IntraPush, head_work, 3);
KVRT_PUSH_WORD(IntraPush, m8, 4);
KVRT_PUSH_WORD(IntraPush, rows, 5);
KVRT_PUSH_WORD(IntraPush, tokens, 6);
static_assert(sizeof(ReadPush) == 56, "ReadPush layout");
KVRT_PUSH_WORD(ReadPush, p_off, 0);
KVRT_PUSH_WORD(ReadPush, snap_off, 1);
KVRT_PUSH_WORD(ReadPush, a_off, 2);
KVRT_PUSH_WORD(ReadPush, wv_off, 3);
KVRT_PUSH_WORD(ReadPush, head_work, 4);
KVRT_PUSH_WORD(ReadPush, m8, 5);
KVRT_PUSH_WORD(ReadPush, d8, 6);
KVRT_PUSH_WORD(ReadPush, m, 7);
KVRT_PUSH_WORD(ReadPush, rows, 8);
KVRT_PUSH_WORD(ReadPush, tokens, 9);
KVRT_PUSH_WORD(ReadPush, intra, 10);
KVRT_PUSH_WORD(ReadPush, out_row, 11);
KVRT_PUSH_WORD(ReadPush, head0, 12);
KVRT_PUSH_WORD(ReadPush, d, 13);
static_assert(sizeof(OutPush) == 20, "OutPush layout");
KVRT_PUSH_WORD(OutPush, words, 0);
KVRT_PUSH_WORD(OutPush, row_words, 1);
KVRT_PUSH_WORD(OutPush, f16, 2);
KVRT_PUSH_WORD(OutPush, dst_base, 3);
KVRT_PUSH_WORD(OutPush, idx_base, 4);
#undef KVRT_PUSH_WORD

// The pipelines of one memory, fetched once (pipeline creation can fail, so
// every call gets them before it changes anything).
struct Pipelines {
    const vk::Pipeline* pack = nullptr;
    const vk::Pipeline* scores = nullptr;
    const vk::Pipeline* softmax = nullptr;
    const vk::Pipeline* update = nullptr;
    const vk::Pipeline* intra = nullptr;
    const vk::Pipeline* read = nullptr;
    const vk::Pipeline* out = nullptr;
    uint32_t rows = 0;        // MEM_ROWS of the chosen variant (scores, read)
    uint32_t cols = 0;        // MEM_COLS
    uint32_t intra_rows = 0;  // INTRA_T
    uint32_t update_m = 0;    // UPD_M
    uint32_t update_dg = 0;   // UPD_DG
    uint32_t max_groups = 0;  // workgroups of one dispatch, at most
};

Result get_pipelines(vk::Context& ctx, bool state_f16, Pipelines* out);

// One input of a chunk (wq, wv or q rows), ready to bind.
struct Input {
    vk::BufferUse use;
    uint32_t base = 0;  // element index of row 0 (head 0) in the bound piece
    bool gathered = false;
    bool f16 = false;
};

// A state binding: a whole piece, and the offset of the group's block and the
// distance between heads in 8-element units of the state precision.
struct StateBinding {
    vk::BufferUse use;
    uint32_t off = 0;
    uint32_t head_stride = 0;
};

// Everything the kernels of one chunk bind for one group of heads.
struct GroupArgs {
    bool updates = false, reads = false;
    uint32_t group = 0;            // index of the group of heads
    uint32_t tokens = 0, rows = 0; // the chunk's tokens and padded rows
    const Input* wq = nullptr;     // updates
    const Input* wv = nullptr;     // updates
    const Input* q = nullptr;      // reads
    vk::BufferUse idx;             // the chunk's batch rows (gathered inputs)
    uint32_t idx_base = 0;
    vk::BufferUse keys;            // the piece holding the group's keys block
    uint64_t keys_in = 0;          // byte offset of that block in the piece
    StateBinding src, dst;
    bool src_zero = false;         // the source state is all zero
    vk::BufferUse work;            // the whole working memory, written
    vk::BufferUse stage;           // the staged reads, written
    float scale = 0.0f;            // 0: 1/sqrt(key size)
};

// Records pack, scores, softmax, update and (for reads) intra and read.
Result record_group(vk::Stream& s, const Pipelines& pipes, const kv::MemoryLayout& l, const GroupArgs& a);

// Records memory_out: the chunk's staged reads into `dst` at word `dst_base`,
// rows scattered to their batch rows.
Result record_out(vk::Stream& s, const Pipelines& pipes, const vk::BufferUse& stage, const vk::BufferUse& dst,
                  uint32_t dst_base, uint32_t tokens, uint32_t row_words, bool f16, const vk::BufferUse& idx,
                  uint32_t idx_base);

// Records one dispatch of `pipeline` over `items` invocations (rounded up to
// workgroups) for `heads` heads.
Result dispatch(vk::Stream& stream, const Pipelines& pipes, const vk::Pipeline& pipeline, const vk::BufferUse* uses,
                uint32_t n_uses, const void* push, uint64_t items, uint32_t heads);

// Softmax: one workgroup per row.
Result dispatch_rows(vk::Stream& stream, const Pipelines& pipes, const vk::Pipeline& pipeline,
                     const vk::BufferUse* uses, uint32_t n_uses, const void* push, uint32_t rows, uint32_t heads);

}  // namespace kvrt::ops::memory_kernels
