#include "cache/layout.hpp"

#include "cache/cache.hpp"
#include "cache/cell_layout.hpp"
#include "cache/paged_layout.hpp"
#include "cache/static_layout.hpp"

namespace kvrt::cache {

Result Layout::create(Cache& cache, const kvrt_cache_desc& desc, std::unique_ptr<Layout>* out,
                      std::unique_ptr<Arena>* out_arena) {
    switch (cache.geometry().layout) {
        case KVRT_LAYOUT_STATIC:
            return StaticLayout::create(cache, desc, out, out_arena);
        case KVRT_LAYOUT_PAGED:
            return PagedLayout::create(cache, desc, out, out_arena);
        default:
            return CellLayout::create(cache, desc, out, out_arena);
    }
}

Result Cache::static_layout(const char* op, const StaticLayout** out) const {
    *out = dynamic_cast<const StaticLayout*>(layout_.get());
    return *out ? KVRT_SUCCESS : fail(KVRT_ERROR_INVALID_ARGUMENT, "%s needs a cache with KVRT_LAYOUT_STATIC", op);
}

Result Cache::static_layout(const char* op, StaticLayout** out) {
    *out = dynamic_cast<StaticLayout*>(layout_.get());
    return *out ? KVRT_SUCCESS : fail(KVRT_ERROR_INVALID_ARGUMENT, "%s needs a cache with KVRT_LAYOUT_STATIC", op);
}

Result Cache::paged_layout(const char* op, PagedLayout** out) {
    *out = dynamic_cast<PagedLayout*>(layout_.get());
    return *out ? KVRT_SUCCESS : fail(KVRT_ERROR_UNSUPPORTED, "%s needs a cache with KVRT_LAYOUT_PAGED", op);
}

// Static windows have padding, not holes; a paged cell's place is its block's.
Result Layout::compact(vk::Stream*, double, uint32_t, uint32_t*) { return KVRT_SUCCESS; }

uint32_t Layout::capacity() const { return c_.geo_.capacity; }

// Every cell below the table's n_attend(): the kernel tells, from the device
// mirror, which of them each query sees.
void Layout::attention_cells(uint32_t layer, uint32_t, const int32_t*, std::vector<ops::AttnSegment>* out,
                             uint32_t* out_cells) const {
    *out_cells = c_.table_.n_attend();
    c_.attention_segments(layer, 0, *out_cells, out);
}

Result Layout::seq_cells(int32_t seq, std::vector<uint32_t>* out) const { return c_.table_.cells_of_seq(seq, out); }

void Layout::drop_placed(int32_t seq, const uint32_t*, uint32_t) { (void)c_.table_.seq_rm(seq, -1, -1); }

}  // namespace kvrt::cache
