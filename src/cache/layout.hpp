// A layout decides which cell holds each token of a cache, owns the metadata
// that says so beyond the cell table (a static cache's windows, a paged
// cache's block pool), and keeps the rules of its arrangement: which
// sequence operations it allows, how a store places tokens, how a state is
// loaded into it, which rows an attention reads.
//
// Every layout keeps the cache's cell table (kv::CellTable) current: it is
// what the kernels read (through the device mirror), so attention, shifts,
// readback and writes run unchanged on any layout. The cache (cache::Cache)
// is the front: it validates what is common, records device work and commits
// it, and asks its layout for everything that depends on the arrangement.
// Nothing outside the layout classes asks which layout a cache has.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cache/arena.hpp"
#include "cache/types.hpp"
#include "core/result.hpp"
#include "kv/cell_table.hpp"
#include "ops/attention.hpp"
#include "state/state_format.hpp"
#include "vk/stream.hpp"

namespace kvrt::cache {

class Layout {
public:
    // The layout `cache`'s geometry names, with its arena (cache.arena_ is set
    // from *out_arena by the caller).
    static Result create(Cache& cache, const kvrt_cache_desc& desc, std::unique_ptr<Layout>* out,
                         std::unique_ptr<Arena>* out_arena);
    explicit Layout(Cache& cache) : c_(cache) {}
    Layout(const Layout&) = delete;
    Layout& operator=(const Layout&) = delete;
    virtual ~Layout() = default;

    // kvrt_cache_store (k and v set) and kvrt_cache_place (both null): places
    // `n` tokens and writes their rows, all or nothing. `stream` null:
    // synchronous. `tree`: the tokens form a token tree (checked by the
    // caller).
    virtual Result store(vk::Stream* stream, const kv::Token* tokens, uint32_t n, int32_t layer, const Source* k,
                         const Source* v, uint32_t* out_cells, bool tree) = 0;
    // kvrt_cache_seq_rm / _seq_cp / _seq_add / _seq_div / _seq_keep /
    // kvrt_cache_clear, as the layout allows them.
    virtual Result seq_rm(int32_t seq, int32_t p0, int32_t p1) = 0;
    virtual Result seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1) = 0;
    virtual Result seq_add(int32_t seq, int32_t p0, int32_t p1, int32_t delta) = 0;
    virtual Result seq_div(int32_t seq, int32_t p0, int32_t p1, int32_t d) = 0;
    virtual Result seq_keep(int32_t seq) = 0;
    virtual void clear() = 0;
    // kvrt_cache_compact: moves that close holes (none where a row's place is
    // fixed by the layout). `stream` is recording or null.
    virtual Result compact(vk::Stream* stream, double threshold, uint32_t max_moves, uint32_t* out_moved);
    // kvrt_cache_tree_accept: removes the tokens of a tree (its cells
    // checked by the caller) that keep[i] does not keep.
    virtual Result tree_accept(uint32_t n, const int32_t* positions, const int32_t* seq_ids, const uint32_t* cells,
                               const std::vector<uint8_t>& keep) = 0;
    // kvrt_cache_state_load of a parsed, checked state: replaces the whole
    // cache (seq < 0) or sequence `seq`, all or nothing.
    virtual Result load(int32_t seq, const state::Plan& plan) = 0;

    // KVRT_ERROR_UNSUPPORTED, naming `op`, for an operation that needs cells
    // placed freely (the cell layout's).
    virtual Result require_cells(const char* op) const = 0;
    // KVRT_ERROR_UNSUPPORTED, naming `op`, where token trees cannot be placed.
    virtual Result require_trees(const char* op) const { (void)op; return KVRT_SUCCESS; }
    // Tokens the cache holds at most (kvrt_cache_info.capacity).
    virtual uint32_t capacity() const;
    // kvrt_cache_info.fragmentation: 0 where there are no holes to close.
    virtual double fragmentation() const { return 0.0; }

    // The runs of cells an attention over `layer` reads for queries of the
    // sequences seq_ids[0..n_queries), and how many cells they hold.
    virtual void attention_cells(uint32_t layer, uint32_t n_queries, const int32_t* seq_ids,
                                 std::vector<ops::AttnSegment>* out, uint32_t* out_cells) const;

    // kvrt_cache_seq_transfer: the cells of `seq`'s tokens (in the order the
    // layout keeps them; the transfer orders them by position), the most
    // tokens a sequence holds here (the newest are kept), and the undo of a
    // placement of `n` cells into the empty sequence `seq` whose rows were
    // never written.
    virtual Result seq_cells(int32_t seq, std::vector<uint32_t>* out) const;
    virtual uint32_t max_seq_tokens() const { return UINT32_MAX; }
    virtual void drop_placed(int32_t seq, const uint32_t* cells, uint32_t n);

protected:
    Cache& c_;
};

}  // namespace kvrt::cache
