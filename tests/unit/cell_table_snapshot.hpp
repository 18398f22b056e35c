// Shared by the cell-table tests: a flattened snapshot of everything
// observable about a table, to prove that a failed call changed nothing.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "kv/cell_table.hpp"

namespace cell_table_test {

using kvrt::kv::CellTable;
using kvrt::kv::Placement;
using kvrt::kv::Token;

// Everything observable about a table, flattened, to prove that a call changed
// nothing; the revision is kept apart (a rollback restores the state but is
// itself a change).
struct Snapshot {
    std::vector<int64_t> state;
    uint64_t revision = 0;
    bool same_state(const Snapshot& o) const { return state == o.state; }
    bool identical(const Snapshot& o) const { return state == o.state && revision == o.revision; }
};

inline Snapshot snapshot(const CellTable& t) {
    const uint32_t cap = t.capacity();
    const size_t n_words = size_t(cap) * t.words_per_cell();
    Snapshot s;
    s.state.resize(2 * size_t(cap) + n_words + 3 * size_t(t.max_seqs()) + 4);
    int64_t* out = s.state.data();  // raw writes: this is hot in a debug build
    for (uint32_t c = 0; c < cap; ++c) *out++ = t.positions()[c];
    for (uint32_t c = 0; c < cap; ++c) *out++ = t.deltas()[c];
    for (size_t w = 0; w < n_words; ++w) *out++ = int64_t(t.seq_words()[w]);
    for (int32_t q = 0; q < int32_t(t.max_seqs()); ++q) {
        *out++ = t.seq_pos_min(q);
        *out++ = t.seq_pos_max(q);
        *out++ = t.seq_cell_count(q);
    }
    *out++ = t.used();
    *out++ = t.used_end();
    *out++ = t.head();
    *out++ = t.shifted_cell_count();
    s.revision = t.revision();
    return s;
}

// Places tokens at positions [p0, p0 + n), each in all of `seqs`.
inline kvrt::Result place(CellTable& t, std::vector<int32_t> seqs, int32_t p0, uint32_t n,
                   std::vector<uint32_t>* cells = nullptr) {
    std::vector<Token> tokens(n);
    for (uint32_t i = 0; i < n; ++i) tokens[i] = Token{p0 + int32_t(i), seqs.data(), uint32_t(seqs.size())};
    Placement p;
    KVRT_TRY(t.plan(tokens.data(), n, &p));
    KVRT_TRY(t.apply(p));
    if (cells != nullptr) *cells = p.cells();
    return KVRT_SUCCESS;
}

inline std::vector<uint32_t> iota_cells(uint32_t first, uint32_t n) {
    std::vector<uint32_t> v(n);
    for (uint32_t i = 0; i < n; ++i) v[i] = first + i;
    return v;
}

inline std::vector<uint32_t> cells_of(const CellTable& t, int32_t seq) {
    std::vector<uint32_t> v;
    REQUIRE(t.cells_of_seq(seq, &v) == KVRT_SUCCESS);
    return v;
}

}  // namespace cell_table_test
