// Valid states built with the format's writer and made-up rows, for the unit
// tests of the format, the fuzzer's seed corpus and the fuzzer itself.
#pragma once

#include <cstdint>
#include <vector>

#include "common/random.hpp"
#include "state/state_format.hpp"

namespace kvrt_test {

struct SampleSpec {
    uint32_t n_layers = 2;
    uint32_t n_kv_heads = 2;
    uint32_t head_dim_k = 32;
    uint32_t head_dim_v = 32;
    kvrt_type type_k = KVRT_TYPE_F16;
    kvrt_type type_v = KVRT_TYPE_F16;
    uint32_t capacity = 16;
    uint32_t max_seqs = 4;
    uint32_t n_cells = 5;
    int32_t seq = -1;  // >= 0: a sequence state of that sequence
    bool deferred = false;
    uint32_t layout = KVRT_LAYOUT_CELLS;  // the saving cache's (KVRT_LAYOUT_PAGED: format version 2)
    // A window group (format version 3): layer 0 is windowed, and the group
    // holds every other cell, for its first sequence.
    bool window_group = false;
    uint32_t seed = 1;
};

// A valid state: cells spread over the capacity, positions rising, in a
// whole-cache state some cells shared by two sequences, random rows.
inline std::vector<uint8_t> make_sample_state(const SampleSpec& spec) {
    using namespace kvrt;
    Rng rng(spec.seed);
    state::Description d;
    state::Header& h = d.header;
    h.flags = (spec.seq >= 0 ? state::kFlagSequence : 0) | (spec.deferred ? state::kFlagDeferredRope : 0);
    h.n_layers = spec.n_layers;
    h.n_kv_heads = spec.n_kv_heads;
    h.head_dim_k = spec.head_dim_k;
    h.head_dim_v = spec.head_dim_v;
    h.type_k = spec.type_k;
    h.type_v = spec.type_v;
    h.capacity = spec.capacity;
    h.max_seqs = spec.max_seqs;
    h.n_cells = spec.n_cells;
    h.seq = spec.seq;
    h.layout = spec.layout;
    for (uint32_t l = 0; l < spec.n_layers; ++l) {
        const kv::StaticScale s{0.01f * float(l + 1), 100.0f / float(l + 1), int32_t(7 + l)};
        if (kv::is_static_scale(spec.type_k)) d.k_scales.push_back(s);
        if (kv::is_static_scale(spec.type_v)) d.v_scales.push_back(s);
    }
    const uint32_t step = spec.capacity / (spec.n_cells ? spec.n_cells : 1);
    for (uint32_t i = 0; i < spec.n_cells; ++i) {
        state::CellRecord c{i * (step ? step : 1), int32_t(3 * i), uint32_t(d.seq_ids.size()), 1};
        if (spec.seq >= 0) {
            d.seq_ids.push_back(spec.seq);
        } else {
            d.seq_ids.push_back(int32_t(i % spec.max_seqs));
            if (i % 2 == 0 && spec.max_seqs > 1 && i % spec.max_seqs + 1 < spec.max_seqs) {
                d.seq_ids.push_back(int32_t(i % spec.max_seqs + 1));
                c.n_seq = 2;
            }
        }
        d.cells.push_back(c);
    }
    if (spec.window_group) {
        h.flags |= state::kFlagWindowGroup;
        d.windowed.assign(spec.n_layers, 0);
        d.windowed[0] = 1;
        for (uint32_t i = 0; i < spec.n_cells; i += 2) {
            d.group.push_back({i, uint32_t(d.group_seq_ids.size()), 1});
            d.group_seq_ids.push_back(d.seq_ids[d.cells[i].seq_begin]);
        }
    }
    state::Extents e;
    if (state::extents_of(d, &e) != KVRT_SUCCESS) return {};
    std::vector<uint8_t> out(static_cast<size_t>(e.total));
    state::write_prefix(d, e, out.data());
    for (uint64_t i = e.data_offset; i < e.checksum_offset; ++i) out[i] = static_cast<uint8_t>(rng());
    state::seal(out.data(), e.total);
    return out;
}

}  // namespace kvrt_test
