// The static padded layout (SPEC 5): each sequence owns regions of
// reservation_rows rows per (layer, KV head), and its tokens sit in a window
// of S-1 rows that slides through them (kv::StaticWindow plans where each
// append goes and which slide copy it needs). Tokens arrive in rising
// position order, one sequence each; a sequence's rows are never shared.
//
// The cell table holds cell seq * reservation_rows + row for row `row` of
// seq's regions: attention, readback, writes and the sequence queries then
// work unchanged, and a slide is a metadata move of the surviving cells plus
// the device copy.
#pragma once

#include <memory>
#include <vector>

#include "cache/layout.hpp"
#include "kv/static_window.hpp"

namespace kvrt::cache {

class StaticArena;

class StaticLayout final : public Layout {
public:
    static Result create(Cache& cache, const kvrt_cache_desc& desc, std::unique_ptr<Layout>* out,
                         std::unique_ptr<Arena>* out_arena);

    Result store(vk::Stream* stream, const kv::Token* tokens, uint32_t n, int32_t layer, const Source* k,
                 const Source* v, uint32_t* out_cells, bool tree) override;
    // Any range; a copy within the windows, synchronous, when the survivors
    // must move.
    Result seq_rm(int32_t seq, int32_t p0, int32_t p1) override;
    Result seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1) override;
    Result seq_add(int32_t seq, int32_t p0, int32_t p1, int32_t delta) override;
    Result seq_div(int32_t seq, int32_t p0, int32_t p1, int32_t d) override;
    Result seq_keep(int32_t seq) override;
    void clear() override;
    Result tree_accept(uint32_t n, const int32_t* positions, const int32_t* seq_ids, const uint32_t* cells,
                       const std::vector<uint8_t>& keep) override;
    Result load(int32_t seq, const state::Plan& plan) override;
    Result require_cells(const char* op) const override;
    Result require_trees(const char* op) const override { return require_cells(op); }
    uint32_t capacity() const override;
    void attention_cells(uint32_t layer, uint32_t n_queries, const int32_t* seq_ids,
                         std::vector<ops::AttnSegment>* out, uint32_t* out_cells) const override;
    uint32_t max_seq_tokens() const override { return geometry_.window_rows; }
    void drop_placed(int32_t seq, const uint32_t* cells, uint32_t n) override;

    // Where one window lies (kvrt_cache_static_get_window without the handle).
    struct WindowView {
        std::shared_ptr<vk::Buffer> buffer;
        uint64_t offset = 0, row_stride = 0, bytes = 0;
        uint32_t rows = 0, n_valid = 0;
        int32_t pos_first = -1, pos_last = -1;
        kvrt_type type = KVRT_TYPE_F16;
        kv::StaticScale scale;
    };
    // kvrt_cache_static_get_window / _get_mask / _get_graph_mask (desc
    // checked as a struct by the caller; NULL: the decode graph's f32 mask)
    // / _get_stats.
    Result window(int32_t seq, int32_t layer, uint32_t head, Array array, WindowView* out) const;
    Result mask(int32_t seq, kvrt_type type, void* out, uint64_t out_bytes) const;
    Result graph_mask(int32_t seq, const kvrt_static_mask_desc* desc, void* out, uint64_t out_bytes) const;
    // kvrt_cache_static_make_room: room for n rows after `seq`'s window
    // (synchronous; a slide copy when the region lacks it).
    Result make_room(int32_t seq, uint32_t n);
    Result stats(int32_t seq, kvrt_static_stats* out) const;

private:
    StaticLayout(Cache& cache, const StaticArena* arena, const kv::StaticGeometry& geometry);

    // Appends `n` tokens to their sequences' windows and, with k and v,
    // writes their rows.
    Result append(vk::Stream* stream, const kv::Token* tokens, uint32_t n, int32_t layer, const Source* k,
                  const Source* v, uint32_t* out_cells);
    // Records the slide copy of `seq`'s regions in every layer, K and V.
    Result record_slide(vk::Stream& s, uint32_t seq, const kv::StaticSlide& slide);
    // A sequence's window and cells, to undo an append or a removal.
    struct SeqSnapshot {
        int32_t seq = 0;
        kv::StaticWindow window;
        std::vector<uint32_t> cells;
        std::vector<int32_t> positions;
    };
    Result snapshot(int32_t seq, SeqSnapshot* out) const;
    void restore(const std::vector<SeqSnapshot>& snaps);

    const StaticArena* arena_;  // the cache's arena
    kv::StaticGeometry geometry_;
    std::vector<kv::StaticWindow> windows_;  // per sequence
};

}  // namespace kvrt::cache
