// The cell layout: a token goes to any free cell (kv::CellTable plans where),
// a cell may hold several sequences' token at one position, and compaction
// closes the holes that removals leave. With a window group, the windowed
// layers keep their rows in a smaller cell cache of their own, and every
// change here is followed there.
#pragma once

#include <memory>
#include <vector>

#include "cache/layout.hpp"

namespace kvrt::cache {

class CellLayout final : public Layout {
public:
    static Result create(Cache& cache, const kvrt_cache_desc& desc, std::unique_ptr<Layout>* out,
                         std::unique_ptr<Arena>* out_arena);

    Result store(vk::Stream* stream, const kv::Token* tokens, uint32_t n, int32_t layer, const Source* k,
                 const Source* v, uint32_t* out_cells, bool tree) override;
    Result seq_rm(int32_t seq, int32_t p0, int32_t p1) override;
    Result seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1) override;
    Result seq_add(int32_t seq, int32_t p0, int32_t p1, int32_t delta) override;
    Result seq_div(int32_t seq, int32_t p0, int32_t p1, int32_t d) override;
    Result seq_keep(int32_t seq) override;
    void clear() override;
    Result compact(vk::Stream* stream, double threshold, uint32_t max_moves, uint32_t* out_moved) override;
    Result tree_accept(uint32_t n, const int32_t* positions, const int32_t* seq_ids, const uint32_t* cells,
                       const std::vector<uint8_t>& keep) override;
    Result load(int32_t seq, const state::Plan& plan) override;
    Result require_cells(const char* op) const override { (void)op; return KVRT_SUCCESS; }
    double fragmentation() const override;

private:
    explicit CellLayout(Cache& cache) : Layout(cache) {}

    // kvrt_cache_place: plans and applies, no device work.
    Result place(const kv::Token* tokens, uint32_t n, uint32_t* out_cells, bool tree);
};

}  // namespace kvrt::cache
