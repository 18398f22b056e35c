#include "kv/memory_layout.hpp"

#include <algorithm>

#include "core/checked.hpp"

namespace kvrt::kv {

namespace {

// Overflow-tracking arithmetic: once a step overflows, every later result is
// meaningless and `ok` stays false.
struct Calc {
    bool ok = true;
    uint64_t mul(uint64_t a, uint64_t b) {
        uint64_t r = 0;
        if (!checked_mul(a, b, &r)) ok = false;
        return r;
    }
    uint64_t add(uint64_t a, uint64_t b) {
        uint64_t r = 0;
        if (!checked_add(a, b, &r)) ok = false;
        return r;
    }
    uint64_t align(uint64_t v) {
        uint64_t r = 0;
        if (!checked_align_up(v, kMemoryAlign, &r)) ok = false;
        return r;
    }
    uint64_t mul_align(uint64_t a, uint64_t b, uint64_t c = 1, uint64_t d = 1) { return align(mul(mul(a, b), mul(c, d))); }
};

uint32_t pad8(uint32_t v) { return static_cast<uint32_t>(align_up(v, 8)); }

}  // namespace

Result MemoryLayout::compute(const MemoryGeometry& g, uint64_t cap) {
    geo = g;
    piece_cap = align_down(cap, kMemoryAlign);
    mp = pad8(g.m);
    ep = pad8(g.e);
    dp = pad8(g.d);
    tp = static_cast<uint32_t>(align_up(g.chunk, kMemoryRowPad));
    nsub = (g.chunk + kMemorySubchunk - 1) / kMemorySubchunk;
    const uint64_t esize = g.state_f16 ? 2 : 4;

    Calc c;
    keys_head = c.mul_align(ep, mp, 4);
    state_head = c.mul_align(g.m, dp, esize);
    w_x = 0;
    w_s = c.add(w_x, c.mul_align(2, tp, ep, 4));
    w_wv = c.add(w_s, c.mul_align(2, tp, mp, 4));
    w_snap = c.add(w_wv, c.mul_align(tp, dp, 4));
    w_a = c.add(w_snap, c.mul_align(nsub, g.m, dp, 4));
    w_temp = c.add(w_a, c.mul_align(tp, kMemorySubchunk, 4));
    work_head = c.add(w_temp, state_head);
    stage_bytes = c.align(c.mul(c.mul(tp, g.n_heads), c.mul(g.d, 4)));
    // One chunk of host inputs is uploaded into one binding of its stream.
    const uint64_t upload_bytes = c.mul(c.mul(tp, g.n_heads), c.mul(std::max(g.e, g.d), 4));
    if (!c.ok) return fail(KVRT_ERROR_INVALID_ARGUMENT, "the memory's sizes overflow 64 bits");

    const uint64_t per_head = std::max({keys_head, state_head, work_head});
    if (per_head > piece_cap)
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "one head needs %llu bytes of keys, state or working memory, more than a %llu-byte binding "
                    "(lower n_slots, key_dim, value_dim or chunk_tokens)",
                    static_cast<unsigned long long>(per_head), static_cast<unsigned long long>(piece_cap));
    if (std::max(stage_bytes, upload_bytes) > piece_cap)
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "the inputs or reads of one chunk (%llu bytes) exceed a %llu-byte binding "
                    "(lower chunk_tokens, n_heads, key_dim or value_dim)",
                    static_cast<unsigned long long>(std::max(stage_bytes, upload_bytes)),
                    static_cast<unsigned long long>(piece_cap));
    // Balanced groups: as few as fit, each as even as possible.
    const uint64_t max_group = std::max<uint64_t>(
        1, std::min({static_cast<uint64_t>(g.n_heads), piece_cap / per_head, kMemoryWorkBudget / work_head}));
    n_groups = static_cast<uint32_t>((g.n_heads + max_group - 1) / max_group);
    group = (g.n_heads + n_groups - 1) / n_groups;

    keys_block = c.mul(group, keys_head);
    state_block = c.mul(group, state_head);
    keys_piece = c.mul(piece_cap / keys_block, keys_block);
    state_piece = c.mul(piece_cap / state_block, state_block);
    keys_bytes = c.mul(c.mul(g.n_layers, n_groups), keys_block);
    state_bytes = c.mul(c.mul(c.mul(g.max_seqs, 2), c.mul(g.n_layers, n_groups)), state_block);
    init_bytes = g.has_init ? c.mul(c.mul(g.n_layers, n_groups), state_block) : 0;
    work_bytes = c.mul(group, work_head);
    total_bytes = c.add(c.add(c.add(keys_bytes, state_bytes), c.add(init_bytes, work_bytes)), stage_bytes);
    if (!c.ok) return fail(KVRT_ERROR_INVALID_ARGUMENT, "the memory's sizes overflow 64 bits");
    return KVRT_SUCCESS;
}

uint32_t MemoryLayout::groups_heads(uint32_t g) const {
    const uint32_t first = g * group;
    return std::min(group, geo.n_heads - first);
}

}  // namespace kvrt::kv
