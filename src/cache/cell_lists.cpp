// CellStore::update_lists: per-sequence lists of cells for attention.
//
// A sequence's run of cells (kv::CellTable::seq_cell_span) bounds what a
// tile of its queries reads. When sequences take cells in turns, as
// continuous batching does (one token per sequence per step), every run
// spans nearly the whole cache and a tile reads every other sequence's
// cells' metadata too: S sequences cost S times what they hold. A list of
// the sequence's own cells, built once on the device for every layer of a
// token (the table changes once per step), lets the tile read only those.
#include <algorithm>
#include <string>

#include "cache/cache.hpp"
#include "ops/cell_lists.hpp"

namespace kvrt::cache {

namespace {

// A run shorter than this is cheap to read whole.
constexpr uint32_t kMinListRun = 64;

}  // namespace

Result CellStore::create_lists(const char* label) {
    // The build reads the mirror as one binding and writes one list word per
    // cell in use (kv::CacheGeometry::list_bytes); larger caches read whole
    // runs.
    if (geo_.list_bytes == 0) return KVRT_SUCCESS;
    const std::string name = std::string(label && *label ? label : "kvrt cache") + " cell lists";
    KVRT_TRY(vk::Buffer::create(ctx_, geo_.list_bytes, geo_.list_bytes, name.c_str(), &lists_.buffer));
    try {
        lists_.first.assign(geo_.max_seqs, 0);
        lists_.count.assign(geo_.max_seqs, 0);
        lists_.seen.assign(geo_.max_seqs, 0);
        lists_.listed.reserve(geo_.max_seqs);
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "out of host memory for %u sequences' cell lists", geo_.max_seqs);
    }
    return KVRT_SUCCESS;
}

void CellStore::list_of(int32_t seq, uint32_t* first, uint32_t* count) const {
    *first = *count = 0;
    if (!lists_.buffer || lists_.revision != table_.revision()) return;
    *first = lists_.first[static_cast<uint32_t>(seq)];
    *count = lists_.count[static_cast<uint32_t>(seq)];
}

Result CellStore::update_lists(vk::Stream& s, uint32_t n_queries, const int32_t* seq_ids) {
    if (!lists_.buffer) return KVRT_SUCCESS;
    // The call's sequences worth a list (each once): their cells fill at
    // most half of their run.
    std::vector<int32_t> want;
    bool current = lists_.revision == table_.revision();
    if (++lists_.call == 0) {  // the stamps wrapped: none may look seen
        std::fill(lists_.seen.begin(), lists_.seen.end(), 0);
        lists_.call = 1;
    }
    for (uint32_t i = 0; i < n_queries; ++i) {
        const int32_t seq = seq_ids[i];
        uint32_t& seen = lists_.seen[static_cast<uint32_t>(seq)];
        if (seen == lists_.call) continue;
        seen = lists_.call;
        uint32_t lo = 0, hi = 0;
        table_.seq_cell_span(seq, &lo, &hi);
        const uint32_t count = table_.seq_cell_count(seq);
        if (hi - lo < kMinListRun || uint64_t{count} * 2 > hi - lo) continue;
        want.push_back(seq);
        if (lists_.count[static_cast<uint32_t>(seq)] == 0) current = false;
    }
    if (want.empty() || current) return KVRT_SUCCESS;

    // New lists, back to back, as many as the buffer (one word per cell)
    // and one binding of counts hold.
    for (int32_t seq : lists_.listed) lists_.count[static_cast<uint32_t>(seq)] = 0;
    lists_.listed.clear();
    const uint32_t n_cells = table_.used_end();
    std::vector<ops::CellListEntry> entries;
    uint64_t used = 0;
    for (int32_t seq : want) {
        ops::CellListEntry e;
        e.seq = static_cast<uint32_t>(seq);
        e.count = table_.seq_cell_count(seq);
        e.first = static_cast<uint32_t>(used);
        if (used + e.count > geo_.capacity ||
            ops::cell_list_scratch_bytes(static_cast<uint32_t>(entries.size() + 1), n_cells) > ctx_.max_binding_bytes())
            break;
        used += e.count;
        entries.push_back(e);
    }
    const vk::BufferUse meta{meta_.get(), 0, 0, 0, false};
    const vk::BufferUse lists{lists_.buffer.get(), 0, 0, 0, true};
    Result r = ops::record_cell_lists(s, meta, geo_.meta_words, n_cells, entries, lists);
    if (r != KVRT_SUCCESS) {
        lists_.revision = 0;
        return r;
    }
    for (const ops::CellListEntry& e : entries) {
        lists_.first[e.seq] = e.first;
        lists_.count[e.seq] = e.count;
        lists_.listed.push_back(static_cast<int32_t>(e.seq));
    }
    lists_.revision = table_.revision();
    // Until the passes have run, no list is on the device.
    s.on_abort(this, [this]() { lists_.revision = 0; });
    return KVRT_SUCCESS;
}

}  // namespace kvrt::cache
