// The paged layout's operations (see paged_layout.hpp for how a mutation
// goes); its window group's side is in paged_window.cpp, its state load in
// state.cpp.
#include "cache/paged_layout.hpp"

#include <algorithm>
#include <string>

#include "cache/cache.hpp"
#include "cache/cell_layout.hpp"

namespace kvrt::cache {

namespace {

constexpr uint32_t kNone = kv::BlockPool::none;

// Keeps the detail message of a failure while its cleanup runs.
template <class F>
void keep_message(F&& cleanup) {
    const std::string message = last_error_message();
    cleanup();
    (void)fail(KVRT_SUCCESS, "%s", message.c_str());
}

}  // namespace

Result PagedLayout::create(Cache& cache, const kvrt_cache_desc& desc, std::unique_ptr<Layout>* out,
                           std::unique_ptr<Arena>* out_arena) {
    const kv::CacheGeometry& geo = cache.geo_;
    std::unique_ptr<PagedLayout> layout(new PagedLayout(cache));
    KVRT_TRY(layout->pool_.init(geo.capacity / geo.block_size, geo.block_size, geo.max_seqs));
    std::unique_ptr<CellArena> arena;
    KVRT_TRY(CellArena::create(cache.ctx_, geo, desc.label, &arena));
    *out = std::move(layout);
    *out_arena = std::move(arena);
    return KVRT_SUCCESS;
}

Result PagedLayout::require_cells(const char* op) const {
    return fail(KVRT_ERROR_UNSUPPORTED,
                "%s is not available in the paged layout (its block tables keep tokens in append order)", op);
}

Result PagedLayout::seq_div(int32_t, int32_t, int32_t, int32_t) { return require_cells("kvrt_cache_seq_div"); }

// In block-table order: among equal positions, the order they were appended.
Result PagedLayout::seq_cells(int32_t seq, std::vector<uint32_t>* out) const {
    const uint32_t len = pool_.seq_length(seq);
    try {
        out->resize(len);
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "out of host memory for %u cells", len);
    }
    for (uint32_t t = 0; t < len; ++t) (*out)[t] = pool_.slot(seq, t);
    return KVRT_SUCCESS;
}

// Allocates nothing: the pool forgets the blocks (never written), the table
// drops the cells placed.
void PagedLayout::drop_placed(int32_t seq, const uint32_t* cells, uint32_t n) {
    (void)pool_.forget_tail(seq, 0);
    (void)c_.table_.mirror_seq(seq, cells, n, nullptr, 0);
}

Result PagedLayout::record_block_copies(vk::Stream& s, const char* label, const std::vector<kv::BlockCopy>& copies,
                                        const WindowEdits& group) {
    const uint32_t B = c_.geo_.block_size;
    std::vector<uint32_t> from, to;
    try {
        for (const kv::BlockCopy& c : copies)
            for (uint32_t j = 0; j < B; ++j) {
                from.push_back(c.src * B + j);
                to.push_back(c.dst * B + j);
            }
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "paged layout: out of host memory for block copies");
    }
    s.begin_op(label);
    Result r = c_.record_copy_cells(s, c_, from, to);
    if (r == KVRT_SUCCESS && !group.from.empty()) r = c_.group_->record_copies(s, group.from, group.to);
    s.end_op();
    return r;
}

Result PagedLayout::view(int32_t seq, View* out) const {
    const std::vector<uint32_t>& t = pool_.block_table(seq);
    try {
        out->table.assign(t.begin(), t.end());
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "paged layout: out of host memory for a block table");
    }
    out->seq = seq;
    out->n_tokens = pool_.seq_length(seq);
    return KVRT_SUCCESS;
}

Result PagedLayout::reserve(size_t n_set, size_t n_drop) {
    KVRT_TRY(c_.table_.reserve(n_set));
    if (c_.group_) KVRT_TRY(c_.group_->table().reserve(n_set));
    try {
        set_.reserve(n_set);
        drop_.reserve(n_drop);
        if (c_.group_) group_drop_.reserve(n_drop);
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "paged layout: out of host memory for %zu cells", n_set + n_drop);
    }
    return KVRT_SUCCESS;
}

// What `before.seq` now sees against what it saw, as cell-table edits (into
// `drop` and `set`, appended). Reads the table as it was before the
// mutation; `copies` are the mutation's block copies (a copied slot keeps its
// source's pending shift, adjusted by any position change).
void PagedLayout::diff(const View& before, const std::vector<kv::BlockCopy>& copies,
                       std::vector<uint32_t>* drop, std::vector<kv::CellSet>* set) const {
    const uint32_t B = c_.geo_.block_size;
    const std::vector<uint32_t>& now = pool_.block_table(before.seq);
    const uint32_t n_now = pool_.seq_length(before.seq);
    const int32_t* pos = pool_.positions();
    const size_t entries = std::max(now.size(), before.table.size());
    auto seen = [B](uint32_t n_tokens, size_t i) {
        const uint64_t first = uint64_t(i) * B;
        return n_tokens <= first ? 0u : uint32_t(std::min<uint64_t>(B, n_tokens - first));
    };
    auto source_of = [&](uint32_t block) {
        for (const kv::BlockCopy& c : copies)
            if (c.dst == block) return c.src;
        return kNone;
    };
    // The pending shift a slot's rows carry when it now shows position p.
    auto delta_for = [&](uint32_t from_cell, int32_t p) {
        if (from_cell == kNone || c_.table_.cell_is_empty(from_cell)) return 0;
        return int32_t(int64_t(c_.table_.cell_delta(from_cell)) + p - c_.table_.cell_pos(from_cell));
    };
    for (size_t i = 0; i < entries; ++i) {
        const uint32_t ob = i < before.table.size() ? before.table[i] : kNone;
        const uint32_t nb = i < now.size() ? now[i] : kNone;
        const uint32_t oc = ob == kNone ? 0 : seen(before.n_tokens, i);
        const uint32_t nc = nb == kNone ? 0 : seen(n_now, i);
        if (ob == nb) {
            const uint32_t base = ob * B;
            for (uint32_t j = nc; j < oc; ++j) drop->push_back(base + j);
            for (uint32_t j = 0; j < std::min(oc, nc); ++j) {
                const uint32_t c = base + j;
                if (c_.table_.cell_pos(c) != pos[c]) set->push_back({c, pos[c], delta_for(c, pos[c])});
            }
            for (uint32_t j = oc; j < nc; ++j) set->push_back({base + j, pos[base + j], 0});
            continue;
        }
        for (uint32_t j = 0; j < oc; ++j) drop->push_back(ob * B + j);
        const uint32_t src = nb == kNone ? kNone : source_of(nb);
        for (uint32_t j = 0; j < nc; ++j) {
            const uint32_t c = nb * B + j;
            set->push_back({c, pos[c], delta_for(src == kNone ? kNone : src * B + j, pos[c])});
        }
    }
}

Result PagedLayout::apply(int32_t seq, const std::vector<uint32_t>& drop, const std::vector<kv::CellSet>& set,
                          const WindowEdits* group) {
    KVRT_TRY(c_.table_.mirror_seq(seq, drop.data(), drop.size(), set.data(), set.size()));
    return window_mirror(seq, drop.data(), drop.size(), group, 0);
}

// Applies edits of several sequences, back to back in drop_ and
// set_.
Result PagedLayout::commit(const std::vector<EditSpan>& spans, const WindowEdits* group) {
    size_t d0 = 0, s0 = 0;
    for (size_t i = 0; i < spans.size(); ++i) {
        const EditSpan& e = spans[i];
        KVRT_TRY(c_.table_.mirror_seq(e.seq, drop_.data() + d0, e.drop_end - d0, set_.data() + s0,
                                   e.set_end - s0));
        KVRT_TRY(window_mirror(e.seq, drop_.data() + d0, e.drop_end - d0, group, i));
        d0 = e.drop_end;
        s0 = e.set_end;
    }
    return KVRT_SUCCESS;
}

// Mirrors a pool mutation of one sequence that needs no device work.
Result PagedLayout::mirror(const View& before, const std::vector<kv::BlockCopy>& copies) {
    drop_.clear();
    set_.clear();
    diff(before, copies, &drop_, &set_);
    return apply(before.seq, drop_, set_);
}

Result PagedLayout::cut(int32_t seq, uint32_t keep, bool forget) {
    View before;
    KVRT_TRY(view(seq, &before));
    if (keep >= before.n_tokens) return KVRT_SUCCESS;
    KVRT_TRY(reserve(0, before.n_tokens));
    KVRT_TRY(forget ? pool_.forget_tail(seq, keep) : pool_.truncate(seq, keep));
    return mirror(before, {});
}

Result PagedLayout::extend(vk::Stream* stream, std::vector<Run>& runs, uint32_t n, int32_t layer,
                           const Source* k, const Source* v, uint32_t* out_cells) {
    if (stream) KVRT_TRY(stream->require_recording());
    if (k) KVRT_TRY(c_.check_write(n, layer, *k, *v));
    const uint32_t B = c_.geo_.block_size;
    // Reserve: each run's view, the table's index nodes, the edit lists.
    size_t n_set = 0, n_drop = 0;
    std::vector<uint32_t> cells;
    try {
        cells.resize(n);
        for (Run& r : runs) {
            KVRT_TRY(view(r.seq, &r.before));
            n_set += r.ids.size() + B;
            n_drop += B;
        }
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "paged layout: out of host memory for %u tokens", n);
    }
    KVRT_TRY(reserve(n_set, n_drop));
    // The window group's cells for the tokens (the windows checked first).
    kv::Placement group;
    if (c_.group_) KVRT_TRY(window_place(runs, n, &group));

    // Undoes the pool's mutations and the group's placement.
    auto undo_pool = [&]() {
        if (c_.group_) (void)c_.group_->table().rollback(group);
        pool_.rewind();
    };

    pool_.mark();
    std::vector<kv::BlockCopy> copies;
    Result r = KVRT_SUCCESS;
    size_t done = 0;
    for (; done < runs.size(); ++done) {
        Run& run = runs[done];
        r = pool_.append(run.seq, uint32_t(run.pos.size()), run.ids.data(), run.pos.data(), &work_);
        if (r != KVRT_SUCCESS) break;
        for (size_t i = 0; i < work_.slots.size(); ++i) cells[run.token_index[i]] = work_.slots[i];
        try {
            copies.insert(copies.end(), work_.copies.begin(), work_.copies.end());
            run.copied = !work_.copies.empty();
        } catch (const std::bad_alloc&) {
            r = fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "paged layout: out of host memory for block copies");
            break;
        }
    }
    if (r != KVRT_SUCCESS) {
        keep_message(undo_pool);
        return r;
    }

    // Each token's group cell.
    for (uint32_t i = 0; c_.group_ && i < n; ++i) c_.group_->link(cells[i], group.cells()[i]);

    // The table edits, computed against the table as it still is.
    drop_.clear();
    set_.clear();
    std::vector<EditSpan> spans;
    WindowEdits group_edits;
    try {
        for (const Run& run : runs) {
            const size_t s0 = set_.size();
            diff(run.before, copies, &drop_, &set_);
            spans.push_back({run.seq, drop_.size(), set_.size()});
            if (r == KVRT_SUCCESS)
                r = window_edits(run.seq, set_.data() + s0, set_.size() - s0, copies,
                                       &group_edits);
        }
    } catch (const std::bad_alloc&) {
        r = fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "paged layout: out of host memory for the cell edits");
    }

    // Device work: block copies first, then the rows.
    const bool device = !copies.empty() || k != nullptr;
    vk::Transaction tx(&c_, stream, c_.own_);
    if (r == KVRT_SUCCESS && device) {
        r = tx.begin();
        // Recorded copies into blocks that the undo gives back must never run.
        if (r == KVRT_SUCCESS) tx.break_on_failure("a paged-layout store or append failed while recording");
        // A synchronous wait that times out keeps the call: its work runs later.
        tx.keep_on_timeout();
        if (r == KVRT_SUCCESS && !copies.empty())
            r = record_block_copies(tx.stream(), "paged copy-on-write", copies, group_edits);
        if (r == KVRT_SUCCESS && k) r = c_.record_writes(tx.stream(), n, cells.data(), layer, *k, *v);
        if (r == KVRT_SUCCESS) r = tx.finish();
    }
    const bool timed_out = r == KVRT_ERROR_TIMEOUT;
    if (r != KVRT_SUCCESS && !timed_out) {
        keep_message(undo_pool);
        return r;
    }
    pool_.commit();

    // Commit the table: it cannot fail now but for a bug.
    KVRT_TRY(commit(spans, &group_edits));
    if (stream && device) {
        // The recording may still be dropped: cut each sequence back so that
        // it never shows rows that were not written.
        std::vector<std::pair<int32_t, uint32_t>> cuts;
        for (const Run& run : runs)
            cuts.push_back({run.seq, run.copied ? run.before.n_tokens / B * B : run.before.n_tokens});
        tx.on_undo([this, cuts]() {
            for (const auto& [seq, keep] : cuts) (void)cut(seq, keep, true);
        });
    }
    if (out_cells) std::copy(cells.begin(), cells.end(), out_cells);
    return timed_out ? fail(KVRT_ERROR_TIMEOUT, "the wait for a paged-layout store or append timed out; it completes "
                                                "later and its tokens stay")
                     : KVRT_SUCCESS;
}

Result PagedLayout::split_runs(const kv::Token* tokens, uint32_t n, std::vector<Run>* runs) const {
    try {
        std::vector<int32_t> run_of(c_.geo_.max_seqs, -1);
        for (uint32_t i = 0; i < n; ++i) {
            if (tokens[i].n_seq != 1 || !tokens[i].seq_ids)
                return fail(KVRT_ERROR_INVALID_ARGUMENT,
                            "token %u has %u sequences; in the paged layout each token belongs to exactly one (share "
                            "with kvrt_cache_paged_fork)",
                            i, tokens[i].n_seq);
            const int32_t s = tokens[i].seq_ids[0];
            if (s < 0 || uint32_t(s) >= c_.geo_.max_seqs)
                return fail(KVRT_ERROR_INVALID_ARGUMENT, "token %u: sequence %d is out of range (0..%u)", i, s,
                            c_.geo_.max_seqs - 1);
            if (run_of[size_t(s)] < 0) {
                run_of[size_t(s)] = int32_t(runs->size());
                runs->emplace_back();
                runs->back().seq = s;
            }
            Run& r = (*runs)[size_t(run_of[size_t(s)])];
            r.ids.push_back(kv::BlockPool::unknown_token);
            r.pos.push_back(tokens[i].pos);
            r.token_index.push_back(i);
        }
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "paged layout: out of host memory for %u tokens", n);
    }
    return KVRT_SUCCESS;
}

Result PagedLayout::store(vk::Stream* stream, const kv::Token* tokens, uint32_t n, int32_t layer, const Source* k,
                          const Source* v, uint32_t* out_cells, bool) {
    if (n && !tokens) return fail(KVRT_ERROR_INVALID_ARGUMENT, "tokens are NULL");
    std::vector<Run> runs;
    KVRT_TRY(split_runs(tokens, n, &runs));
    if (n == 0) return k ? c_.check_write(n, layer, *k, *v) : KVRT_SUCCESS;
    return extend(stream, runs, n, layer, k, v, out_cells);
}

Result PagedLayout::append(vk::Stream* stream, int32_t seq, uint32_t n, const int32_t* token_ids,
                           const int32_t* positions, uint32_t* out_cells) {
    if (seq < 0 || uint32_t(seq) >= c_.geo_.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, c_.geo_.max_seqs - 1);
    if (n == 0) return stream ? stream->require_recording() : KVRT_SUCCESS;
    if (!positions) return fail(KVRT_ERROR_INVALID_ARGUMENT, "positions is NULL");
    std::vector<Run> runs(1);
    try {
        runs[0].seq = seq;
        if (token_ids) runs[0].ids.assign(token_ids, token_ids + n);
        else runs[0].ids.assign(n, kv::BlockPool::unknown_token);
        runs[0].pos.assign(positions, positions + n);
        runs[0].token_index.resize(n);
        for (uint32_t i = 0; i < n; ++i) runs[0].token_index[i] = i;
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "paged layout: out of host memory for %u tokens", n);
    }
    if (token_ids)
        for (uint32_t i = 0; i < n; ++i)
            if (token_ids[i] < 0)
                return fail(KVRT_ERROR_INVALID_ARGUMENT, "token %u has a negative id (%d)", i, token_ids[i]);
    return extend(stream, runs, n, -1, nullptr, nullptr, out_cells);
}

Result PagedLayout::admit(int32_t seq, uint32_t n, const int32_t* token_ids, const int32_t* positions, uint64_t salt,
                          uint32_t* out_n_cached, uint32_t* out_cells) {
    if (!out_n_cached) return fail(KVRT_ERROR_INVALID_ARGUMENT, "out_n_cached is NULL");
    *out_n_cached = 0;
    if (seq < 0 || uint32_t(seq) >= c_.geo_.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, c_.geo_.max_seqs - 1);
    View before;
    KVRT_TRY(view(seq, &before));
    KVRT_TRY(reserve(size_t(n) + c_.geo_.block_size, 0));
    // With a window group: only as many blocks as the group still holds the
    // windowed rows for, and group cells for the rest, planned first.
    uint32_t max_blocks = UINT32_MAX;
    kv::Placement group;
    if (c_.group_) {
        if (n && (!token_ids || !positions))
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "token_ids or positions is NULL");
        for (uint32_t t = 0; t < n; ++t)
            if (positions[t] < 0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "token %u has position %d", t, positions[t]);
        KVRT_TRY(window_admit_blocks(seq, n, token_ids, positions, salt, &max_blocks));
        KVRT_TRY(window_admit_plan(seq, n, positions, max_blocks * c_.geo_.block_size, &group));
    }
    pool_.mark();
    Result r = pool_.admit(seq, n, token_ids, positions, salt, &work_, max_blocks, c_.group_ != nullptr);
    if (r != KVRT_SUCCESS) {
        pool_.commit();  // a failed admit changed nothing
        return r;
    }
    // Admit maps whole blocks and fills new ones: no copies, no device work.
    // A failure gives the pool back exactly as it was.
    const uint32_t n_cached = work_.n_cached;
    r = mirror(before, work_.copies);
    if (r != KVRT_SUCCESS) {
        keep_message([&] {
            if (c_.group_) (void)c_.group_->table().rollback(group);
            pool_.rewind();
        });
        return r;
    }
    pool_.commit();
    if (c_.group_) {
        r = n_cached == max_blocks * c_.geo_.block_size
                ? window_admit(seq, n, positions, n_cached, group)
                : fail(KVRT_ERROR_INTERNAL, "admit mapped %u tokens, the window group planned for %u", n_cached,
                       max_blocks * c_.geo_.block_size);
        if (r != KVRT_SUCCESS) {
            keep_message([&] {
                (void)c_.group_->table().rollback(group);
                (void)cut(seq, n_cached, true);
                (void)cut(seq, 0, false);
            });
            return r;
        }
    }
    *out_n_cached = work_.n_cached;
    if (out_cells)
        for (uint32_t t = 0; t < n; ++t) out_cells[t] = pool_.slot(seq, t);
    return KVRT_SUCCESS;
}

Result PagedLayout::fork(int32_t src, int32_t dst) {
    View before;
    KVRT_TRY(view(dst, &before));
    KVRT_TRY(reserve(pool_.seq_length(src), 0));
    KVRT_TRY(pool_.fork(src, dst));
    Result r = mirror(before, {});
    if (r == KVRT_SUCCESS && c_.group_) {
        r = c_.group_->table().seq_cp(src, dst, -1, -1);
        if (r == KVRT_SUCCESS) c_.group_->copy_floor(src, dst);
    }
    if (r != KVRT_SUCCESS) keep_message([&] { (void)cut(dst, 0, false); });
    return r;
}

Result PagedLayout::seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    if (src == dst) return KVRT_SUCCESS;
    for (int32_t s : {src, dst})
        if (s < 0 || uint32_t(s) >= c_.geo_.max_seqs)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", s, c_.geo_.max_seqs - 1);
    const int32_t lo = c_.table_.seq_pos_min(src), hi = c_.table_.seq_pos_max(src);
    const bool whole = (p0 < 0 || p0 <= lo) && (p1 < 0 || p1 > hi);
    if (!whole || pool_.seq_length(dst) != 0)
        return fail(KVRT_ERROR_UNSUPPORTED,
                    "the paged layout copies whole sequences into empty ones only (kvrt_cache_paged_fork): [%d, %d) "
                    "of sequence %d (positions %d..%d) into sequence %d (%u tokens)",
                    p0, p1, src, lo, hi, dst, pool_.seq_length(dst));
    return fork(src, dst);
}

Result PagedLayout::seq_rm(int32_t seq, int32_t p0, int32_t p1) {
    if (p0 >= 0 && p1 >= 0 && p1 < p0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "range [%d, %d) is reversed", p0, p1);
    if (seq >= 0 && uint32_t(seq) >= c_.geo_.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, c_.geo_.max_seqs - 1);
    const uint32_t first = seq < 0 ? 0 : uint32_t(seq), last = seq < 0 ? c_.geo_.max_seqs : first + 1;
    // Check every sequence before changing any.
    size_t most = 0;
    for (uint32_t s = first; s < last; ++s) {
        uint32_t keep = 0;
        KVRT_TRY(pool_.suffix_start(int32_t(s), p0, p1, &keep));
        most = std::max<size_t>(most, pool_.seq_length(int32_t(s)));
    }
    KVRT_TRY(reserve(0, most));
    for (uint32_t s = first; s < last; ++s) {
        uint32_t keep = 0;
        KVRT_TRY(pool_.suffix_start(int32_t(s), p0, p1, &keep));
        KVRT_TRY(cut(int32_t(s), keep, false));
    }
    return KVRT_SUCCESS;
}

Result PagedLayout::seq_add(int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
    if (p0 >= 0 && p1 >= 0 && p1 < p0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "range [%d, %d) is reversed", p0, p1);
    if (seq < 0 || uint32_t(seq) >= c_.geo_.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, c_.geo_.max_seqs - 1);
    uint32_t from = 0;
    KVRT_TRY(pool_.suffix_start(seq, p0, p1, &from));
    const uint32_t n = pool_.seq_length(seq);
    if (delta == 0 || from >= n) return KVRT_SUCCESS;
    for (uint32_t t = from; t < n; ++t) {
        const int64_t p = int64_t(pool_.positions()[pool_.slot(seq, t)]) + delta;
        if (p < 0)
            return fail(KVRT_ERROR_UNSUPPORTED,
                        "seq_add: token %u of sequence %d would move to position %lld; the paged layout does not "
                        "drop tokens by shifting (remove them with kvrt_cache_seq_rm first)",
                        t, seq, static_cast<long long>(p));
    }
    View before;
    KVRT_TRY(view(seq, &before));
    KVRT_TRY(reserve(n + c_.geo_.block_size, n));
    pool_.mark();
    Result r = pool_.shift(seq, delta, from, &work_);
    if (r != KVRT_SUCCESS) {
        pool_.commit();  // a failed shift changed nothing
        return r;
    }
    drop_.clear();
    set_.clear();
    diff(before, work_.copies, &drop_, &set_);
    WindowEdits group;
    r = window_edits(seq, set_.data(), set_.size(), work_.copies, &group);
    if (r == KVRT_SUCCESS && !work_.copies.empty()) {
        // Copy the shared blocks (synchronously: the call has no stream).
        vk::Transaction tx(&c_, nullptr, c_.own_);
        tx.keep_on_timeout();
        r = tx.begin();
        if (r == KVRT_SUCCESS) r = record_block_copies(tx.stream(), "paged copy-on-shift", work_.copies, group);
        if (r == KVRT_SUCCESS) r = tx.finish();
    }
    if (r != KVRT_SUCCESS && r != KVRT_ERROR_TIMEOUT) {
        keep_message([&] { pool_.rewind(); });
        return r;
    }
    pool_.commit();
    KVRT_TRY(apply(seq, drop_, set_, &group));
    if (c_.group_) c_.group_->forget_floors();
    if (r == KVRT_ERROR_TIMEOUT)
        return fail(KVRT_ERROR_TIMEOUT, "the wait for a paged-layout shift's block copies timed out; the shift stays "
                                        "and its rotation is pending");
    // Rotate now: a pending shift must never outlive a cell that a released
    // block could later show to another sequence.
    return c_.apply_shifts(nullptr);
}

Result PagedLayout::tree_accept(uint32_t n, const int32_t*, const int32_t* seq_ids, const uint32_t* cells,
                                const std::vector<uint8_t>& keep) {
    KVRT_TRY(c_.require_no_window_group("kvrt_cache_tree_accept in the paged layout"));
    // Per sequence: its tree tokens, in batch order, must be its last tokens.
    struct Part {
        int32_t seq = 0;
        std::vector<uint32_t> tokens;  // batch indices
        uint32_t from = 0;             // token index of the first
        std::vector<uint32_t> kept;    // token indices
    };
    std::vector<Part> parts;
    std::vector<std::pair<uint32_t, uint32_t>> moves, all_moves;
    try {
        for (uint32_t i = 0; i < n; ++i) {
            auto it = std::find_if(parts.begin(), parts.end(), [&](const Part& p) { return p.seq == seq_ids[i]; });
            if (it == parts.end()) {
                parts.emplace_back();
                parts.back().seq = seq_ids[i];
                it = parts.end() - 1;
            }
            it->tokens.push_back(i);
        }
        for (Part& p : parts) {
            const uint32_t len = pool_.seq_length(p.seq), m = uint32_t(p.tokens.size());
            p.from = len - m;  // m <= len: every token's cell holds it (checked)
            for (uint32_t j = 0; j < m; ++j) {
                if (pool_.slot(p.seq, p.from + j) != cells[p.tokens[j]])
                    return fail(KVRT_ERROR_UNSUPPORTED,
                                "the paged layout accepts a tree whose tokens are their sequence's last ones, in batch "
                                "order: tree token %u (cell %u) is not token %u of sequence %d",
                                p.tokens[j], cells[p.tokens[j]], p.from + j, p.seq);
                if (keep[p.tokens[j]]) p.kept.push_back(p.from + j);
            }
            for (uint32_t t = p.from; t < len; t += c_.geo_.block_size) {
                const uint32_t block = pool_.slot(p.seq, t) / c_.geo_.block_size;
                if (pool_.refcount(block) > 1)
                    return fail(KVRT_ERROR_UNSUPPORTED,
                                "sequence %d shares the block of its tree token %u with another sequence (a fork "
                                "since the tree was stored)",
                                p.seq, t);
            }
        }
        all_moves.reserve(n);
        moves.reserve(n);
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "paged layout: out of host memory for a tree of %u tokens", n);
    }
    KVRT_TRY(reserve(n, n));

    // The table edits, from the table before: the kept tokens take the
    // first slots of the tree's range (their rows copied there), the others
    // leave. A moved slot carries its source's pending shift.
    drop_.clear();
    set_.clear();
    std::vector<EditSpan> spans;
    Result r = KVRT_SUCCESS;
    try {
        for (const Part& p : parts) {
            const uint32_t m = uint32_t(p.tokens.size()), kept = uint32_t(p.kept.size());
            for (uint32_t j = 0; j < m; ++j) {
                const uint32_t dst = cells[p.tokens[j]];
                if (j >= kept) {
                    drop_.push_back(dst);
                    continue;
                }
                const uint32_t src = cells[p.tokens[p.kept[j] - p.from]];
                if (src != dst) set_.push_back({dst, c_.table_.cell_pos(src), c_.table_.cell_delta(src)});
            }
            spans.push_back({p.seq, drop_.size(), set_.size()});
        }
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "paged layout: out of host memory for a tree of %u tokens", n);
    }

    pool_.mark();
    for (const Part& p : parts) {
        r = pool_.keep_tail(p.seq, p.from, p.kept.data(), uint32_t(p.kept.size()), &moves);
        if (r != KVRT_SUCCESS) break;
        all_moves.insert(all_moves.end(), moves.begin(), moves.end());  // reserved
    }
    if (r == KVRT_SUCCESS && !all_moves.empty()) {
        // The rows of the kept tokens to their new slots (synchronously: the
        // call has no stream). A move may write the slot an earlier move
        // reads (kept tokens slide down), so the moves go in batches in which
        // no destination is a source; the stream orders the batches.
        std::vector<std::vector<uint32_t>> src(1), dst(1);
        try {
            for (const auto& [a, b] : all_moves) {
                if (std::find(src.back().begin(), src.back().end(), b) != src.back().end()) {
                    src.emplace_back();
                    dst.emplace_back();
                }
                src.back().push_back(a);
                dst.back().push_back(b);
            }
        } catch (const std::bad_alloc&) {
            r = fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "paged layout: out of host memory for %zu row moves",
                     all_moves.size());
        }
        vk::Transaction tx(&c_, nullptr, c_.own_);
        tx.keep_on_timeout();
        if (r == KVRT_SUCCESS) r = tx.begin();
        if (r == KVRT_SUCCESS) {
            tx.stream().begin_op("paged tree accept");
            for (size_t i = 0; i < src.size() && r == KVRT_SUCCESS; ++i)
                r = c_.record_copy_cells(tx.stream(), c_, src[i], dst[i]);
            tx.stream().end_op();
        }
        if (r == KVRT_SUCCESS) r = tx.finish();
    }
    if (r != KVRT_SUCCESS && r != KVRT_ERROR_TIMEOUT) {
        keep_message([&] { pool_.rewind(); });
        return r;
    }
    pool_.commit();
    KVRT_TRY(commit(spans));
    if (r == KVRT_ERROR_TIMEOUT)
        return fail(KVRT_ERROR_TIMEOUT, "the wait for a paged-layout tree's row moves timed out; the accept stays");
    return KVRT_SUCCESS;
}

Result PagedLayout::seq_keep(int32_t seq) {
    if (seq < 0 || uint32_t(seq) >= c_.geo_.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, c_.geo_.max_seqs - 1);
    size_t most = 0;
    for (uint32_t s = 0; s < c_.geo_.max_seqs; ++s) most = std::max<size_t>(most, pool_.seq_length(int32_t(s)));
    KVRT_TRY(reserve(0, most));
    for (uint32_t s = 0; s < c_.geo_.max_seqs; ++s)
        if (int32_t(s) != seq) KVRT_TRY(cut(int32_t(s), 0, false));
    return KVRT_SUCCESS;
}

void PagedLayout::clear() {
    for (uint32_t s = 0; s < c_.geo_.max_seqs; ++s) (void)pool_.truncate(int32_t(s), 0);
    pool_.clear_registry();
}

Result PagedLayout::set_sharing(int32_t seq, bool on) {
    return pool_.set_sharing(seq, on);
}

Result PagedLayout::clear_registry() {
    pool_.clear_registry();
    return KVRT_SUCCESS;
}

Result PagedLayout::stats(kvrt_paged_stats* out) const {
    out->block_size = pool_.block_size();
    out->n_blocks = pool_.n_blocks();
    out->free_blocks = pool_.free_count();
    out->cached_blocks = pool_.cached_count();
    out->used_blocks = pool_.used_count();
    out->registered_blocks = pool_.registered_count();
    out->shared_blocks = pool_.shared_count();
    return KVRT_SUCCESS;
}

Result PagedLayout::get_cells(int32_t seq, uint32_t first, uint32_t max_cells, uint32_t* out_cells,
                          uint32_t* out_n_tokens) const {
    if (seq < 0 || uint32_t(seq) >= c_.geo_.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, c_.geo_.max_seqs - 1);
    if (max_cells && !out_cells) return fail(KVRT_ERROR_INVALID_ARGUMENT, "out_cells is NULL");
    const uint32_t n = pool_.seq_length(seq);
    for (uint32_t i = 0; i < max_cells && first < n && i < n - first; ++i) out_cells[i] = pool_.slot(seq, first + i);
    if (out_n_tokens) *out_n_tokens = n;
    return KVRT_SUCCESS;
}

Result PagedLayout::verify() const {
    KVRT_TRY(pool_.verify());
    KVRT_TRY(c_.table_.verify());
    // Every cell shows exactly the sequences whose tables reach it.
    const uint32_t B = c_.geo_.block_size;
    for (uint32_t s = 0; s < c_.geo_.max_seqs; ++s) {
        const uint32_t n = pool_.seq_length(int32_t(s));
        if (c_.table_.seq_cell_count(int32_t(s)) != n)
            return fail(KVRT_ERROR_INTERNAL, "paged layout: sequence %u has %u tokens but %u cells", s, n,
                        c_.table_.seq_cell_count(int32_t(s)));
        for (uint32_t t = 0; t < n; ++t) {
            const uint32_t c = pool_.slot(int32_t(s), t);
            if (!c_.table_.cell_has_seq(c, int32_t(s)) || c_.table_.cell_pos(c) != pool_.positions()[c])
                return fail(KVRT_ERROR_INTERNAL, "paged layout: token %u of sequence %u (cell %u) is not mirrored", t,
                            s, c);
        }
    }
    (void)B;
    return KVRT_SUCCESS;
}

}  // namespace kvrt::cache
