// Helpers of the paged-layout tests: the shape of their caches (either layout),
// K and V rows that are a function of a token's id and position (so equal
// prefixes give equal rows), their stored bytes, a sequence's cells in its
// block-table order, and what a failed call must leave as it was.
#pragma once

#include <cstdint>
#include <vector>

#include "gpu_test.hpp"

namespace kvrt_test::paged {

// The paged tests' cache shape: 2 layers, 4 query and 2 KV heads, head dims
// 32, F16; a test adds the cells and the layout (CacheSpec::cells, ::paged).
struct Shape : CacheSpec {
    Shape() { shape(2, 4, 2, 32, 32); }
};

// Element (layer, head, d) of K or V of token `id` at position `pos`: what a
// model computes is a function of the token and its place (here, of its id
// and position only), so equal prefixes give equal rows.
float value(int32_t id, int32_t pos, uint32_t layer, uint32_t head, uint32_t d, bool v);

// f32 rows [layer][token][head][dim] of K and V for the tokens.
void token_rows(const Shape& sh, const std::vector<int32_t>& ids, const std::vector<int32_t>& pos,
                std::vector<float>* k, std::vector<float>* v);

// Writes the rows of tokens [from, ids.size()) into `cells` (all layers).
void write_rows(kvrt_cache c, const Shape& sh, const std::vector<int32_t>& ids, const std::vector<int32_t>& pos,
                size_t from, const uint32_t* cells);

// The stored bytes of `cells` of one layer and array.
std::vector<uint8_t> raw_rows(kvrt_cache c, int32_t layer, kvrt_kv_array a, const std::vector<uint32_t>& cells);

// The cells of sequence `seq` of a paged cache, in its block-table order.
std::vector<uint32_t> paged_cells(kvrt_cache c, int32_t seq);

// Attention of one query per sequence (at the given positions), layer `layer`.
std::vector<float> attend(kvrt_cache c, const Shape& sh, uint32_t layer, const std::vector<int32_t>& seqs,
                          const std::vector<int32_t>& positions, const std::vector<float>& q);

// A prompt of n tokens, ids from `seed`, positions 0..n-1.
struct Prompt {
    std::vector<int32_t> ids, pos;
};
Prompt prompt(uint32_t n, int32_t seed);

// Admits `p` into `seq` and writes the uncached rows; returns n_cached.
uint32_t admit(kvrt_cache c, const Shape& sh, int32_t seq, const Prompt& p);

// Everything a failed call must leave as it was.
struct State {
    kvrt_paged_stats stats = KVRT_PAGED_STATS_INIT;
    uint32_t used = 0;
    std::vector<std::vector<uint32_t>> cells;
    bool operator==(const State& o) const;
};
State state_of(kvrt_cache c, uint32_t n_seqs);

// The stored bytes every sequence sees (K and V of every layer, its tokens in
// order), to compare before and after a failed call.
std::vector<uint8_t> seen_rows(kvrt_cache c, const Shape& sh, uint32_t n_seqs);

// Checks the pool's invariants and that the cell table mirrors every block
// table exactly (the library's own paged_verify, through the handle).
void verify(kvrt_cache c);

}  // namespace kvrt_test::paged
