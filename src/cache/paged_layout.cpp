// The paged layout: a kv::BlockPool decides which cell holds each token, and
// the cell table mirrors what every sequence sees, so the kernels (stores,
// attention, shifts, reads) run unchanged on the pool's slots (cell = block *
// B + slot).
//
// Every mutation goes the same way: check and reserve everything (host
// memory, the table's index nodes); change the pool (which checks its own
// budget first and changes nothing on failure); compute from the table as it
// was what each changed sequence now sees (the cells it leaves and the cells
// it joins, with positions and pending shifts); record the device work
// (block copies, row writes); and only when that succeeded, edit the table.
// A failure in between restores the pool: exactly from a snapshot when the
// mutation copied blocks, otherwise by cutting each sequence back to its
// previous length (forget_tail, which also unregisters what was never
// written).
#include <algorithm>
#include <string>

#include "cache/cache.hpp"

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

Result Cache::require_paged(const char* op) const {
    if (!is_paged()) return fail(KVRT_ERROR_UNSUPPORTED, "%s needs a cache with KVRT_LAYOUT_PAGED", op);
    return KVRT_SUCCESS;
}

Result Cache::paged_view(int32_t seq, PagedView* out) const {
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

Result Cache::paged_reserve(size_t n_set, size_t n_drop) {
    KVRT_TRY(table_.reserve(n_set));
    if (win_) KVRT_TRY(win_->table_.reserve(n_set));
    try {
        mirror_set_.reserve(n_set);
        mirror_drop_.reserve(n_drop);
        if (win_) win_drop_.reserve(n_drop);
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "paged layout: out of host memory for %zu cells", n_set + n_drop);
    }
    return KVRT_SUCCESS;
}

// What `before.seq` now sees against what it saw, as cell-table edits (into
// `drop` and `set`, appended). Reads the table as it was before the
// mutation; `copies` are the mutation's block copies (a copied slot keeps its
// source's pending shift, adjusted by any position change).
void Cache::paged_diff(const PagedView& before, const std::vector<kv::BlockCopy>& copies,
                       std::vector<uint32_t>* drop, std::vector<kv::CellSet>* set) const {
    const uint32_t B = geo_.block_size;
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
        if (from_cell == kNone || table_.cell_is_empty(from_cell)) return 0;
        return int32_t(int64_t(table_.cell_delta(from_cell)) + p - table_.cell_pos(from_cell));
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
                if (table_.cell_pos(c) != pos[c]) set->push_back({c, pos[c], delta_for(c, pos[c])});
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

Result Cache::paged_apply(int32_t seq, const std::vector<uint32_t>& drop, const std::vector<kv::CellSet>& set,
                          const WindowEdits* group) {
    KVRT_TRY(table_.mirror_seq(seq, drop.data(), drop.size(), set.data(), set.size()));
    return window_paged_mirror(seq, drop.data(), drop.size(), group, 0);
}

// Applies edits of several sequences, back to back in mirror_drop_ and
// mirror_set_.
Result Cache::paged_commit(const std::vector<EditSpan>& spans, const WindowEdits* group) {
    size_t d0 = 0, s0 = 0;
    for (size_t i = 0; i < spans.size(); ++i) {
        const EditSpan& e = spans[i];
        KVRT_TRY(table_.mirror_seq(e.seq, mirror_drop_.data() + d0, e.drop_end - d0, mirror_set_.data() + s0,
                                   e.set_end - s0));
        KVRT_TRY(window_paged_mirror(e.seq, mirror_drop_.data() + d0, e.drop_end - d0, group, i));
        d0 = e.drop_end;
        s0 = e.set_end;
    }
    return KVRT_SUCCESS;
}

// Mirrors a pool mutation of one sequence that needs no device work.
Result Cache::paged_mirror(const PagedView& before, const std::vector<kv::BlockCopy>& copies) {
    mirror_drop_.clear();
    mirror_set_.clear();
    paged_diff(before, copies, &mirror_drop_, &mirror_set_);
    return paged_apply(before.seq, mirror_drop_, mirror_set_);
}

Result Cache::paged_cut(int32_t seq, uint32_t keep, bool forget) {
    PagedView before;
    KVRT_TRY(paged_view(seq, &before));
    if (keep >= before.n_tokens) return KVRT_SUCCESS;
    KVRT_TRY(paged_reserve(0, before.n_tokens));
    KVRT_TRY(forget ? pool_.forget_tail(seq, keep) : pool_.truncate(seq, keep));
    return paged_mirror(before, {});
}

Result Cache::paged_extend(vk::Stream* stream, std::vector<PagedRun>& runs, uint32_t n, int32_t layer,
                           const Source* k, const Source* v, uint32_t* out_cells) {
    if (stream) KVRT_TRY(stream->require_recording());
    if (k) KVRT_TRY(check_write(n, layer, *k, *v));
    const uint32_t B = geo_.block_size;
    // Reserve: each run's view, the table's index nodes, the edit lists.
    size_t n_set = 0, n_drop = 0;
    std::vector<uint32_t> cells;
    try {
        cells.resize(n);
        for (PagedRun& r : runs) {
            KVRT_TRY(paged_view(r.seq, &r.before));
            n_set += r.ids.size() + B;
            n_drop += B;
        }
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "paged layout: out of host memory for %u tokens", n);
    }
    KVRT_TRY(paged_reserve(n_set, n_drop));
    // The window group's cells for the tokens (the windows checked first).
    kv::Placement group;
    if (win_) KVRT_TRY(window_paged_place(runs, n, &group));

    // Undoes the pool's mutations and the group's placement.
    auto undo_pool = [&]() {
        if (win_) (void)win_->table_.rollback(group);
        pool_.rewind();
    };

    pool_.mark();
    std::vector<kv::BlockCopy> copies;
    Result r = KVRT_SUCCESS;
    size_t done = 0;
    for (; done < runs.size(); ++done) {
        PagedRun& run = runs[done];
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
    for (uint32_t i = 0; win_ && i < n; ++i) {
        win_of_[cells[i]] = static_cast<int32_t>(group.cells()[i]);
        cell_of_[group.cells()[i]] = cells[i];
    }

    // The table edits, computed against the table as it still is.
    mirror_drop_.clear();
    mirror_set_.clear();
    std::vector<EditSpan> spans;
    WindowEdits group_edits;
    try {
        for (const PagedRun& run : runs) {
            const size_t s0 = mirror_set_.size();
            paged_diff(run.before, copies, &mirror_drop_, &mirror_set_);
            spans.push_back({run.seq, mirror_drop_.size(), mirror_set_.size()});
            if (r == KVRT_SUCCESS)
                r = window_paged_edits(run.seq, mirror_set_.data() + s0, mirror_set_.size() - s0, copies,
                                       &group_edits);
        }
    } catch (const std::bad_alloc&) {
        r = fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "paged layout: out of host memory for the cell edits");
    }

    // Device work: block copies first, then the rows.
    const bool device = !copies.empty() || k != nullptr;
    vk::Transaction tx(this, stream, own_);
    if (r == KVRT_SUCCESS && device) {
        r = tx.begin();
        // Recorded copies into blocks that the undo gives back must never run.
        if (r == KVRT_SUCCESS) tx.break_on_failure("a paged-layout store or append failed while recording");
        // A synchronous wait that times out keeps the call: its work runs later.
        tx.keep_on_timeout();
        if (r == KVRT_SUCCESS && !copies.empty()) {
            std::vector<uint32_t> from, to;
            try {
                for (const kv::BlockCopy& c : copies)
                    for (uint32_t j = 0; j < B; ++j) {
                        from.push_back(c.src * B + j);
                        to.push_back(c.dst * B + j);
                    }
            } catch (const std::bad_alloc&) {
                r = fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "paged layout: out of host memory for block copies");
            }
            if (r == KVRT_SUCCESS) {
                tx.stream().begin_op("paged copy-on-write");
                r = record_copy_cells(tx.stream(), *this, from, to);
                if (r == KVRT_SUCCESS && !group_edits.from.empty())
                    r = win_->record_copy_cells(tx.stream(), *win_, group_edits.from, group_edits.to);
                tx.stream().end_op();
            }
        }
        if (r == KVRT_SUCCESS && k) r = record_writes(tx.stream(), n, cells.data(), layer, *k, *v);
        if (r == KVRT_SUCCESS) r = tx.finish();
    }
    const bool timed_out = r == KVRT_ERROR_TIMEOUT;
    if (r != KVRT_SUCCESS && !timed_out) {
        keep_message(undo_pool);
        return r;
    }
    pool_.commit();

    // Commit the table: it cannot fail now but for a bug.
    KVRT_TRY(paged_commit(spans, &group_edits));
    if (stream && device) {
        // The recording may still be dropped: cut each sequence back so that
        // it never shows rows that were not written.
        std::vector<std::pair<int32_t, uint32_t>> cuts;
        for (const PagedRun& run : runs)
            cuts.push_back({run.seq, run.copied ? run.before.n_tokens / B * B : run.before.n_tokens});
        tx.on_undo([this, cuts]() {
            for (const auto& [seq, keep] : cuts) (void)paged_cut(seq, keep, true);
        });
    }
    if (out_cells) std::copy(cells.begin(), cells.end(), out_cells);
    return timed_out ? fail(KVRT_ERROR_TIMEOUT, "the wait for a paged-layout store or append timed out; it completes "
                                                "later and its tokens stay")
                     : KVRT_SUCCESS;
}

Result Cache::paged_runs(const kv::Token* tokens, uint32_t n, std::vector<PagedRun>* runs) const {
    try {
        std::vector<int32_t> run_of(geo_.max_seqs, -1);
        for (uint32_t i = 0; i < n; ++i) {
            if (tokens[i].n_seq != 1 || !tokens[i].seq_ids)
                return fail(KVRT_ERROR_INVALID_ARGUMENT,
                            "token %u has %u sequences; in the paged layout each token belongs to exactly one (share "
                            "with kvrt_cache_paged_fork)",
                            i, tokens[i].n_seq);
            const int32_t s = tokens[i].seq_ids[0];
            if (s < 0 || uint32_t(s) >= geo_.max_seqs)
                return fail(KVRT_ERROR_INVALID_ARGUMENT, "token %u: sequence %d is out of range (0..%u)", i, s,
                            geo_.max_seqs - 1);
            if (run_of[size_t(s)] < 0) {
                run_of[size_t(s)] = int32_t(runs->size());
                runs->emplace_back();
                runs->back().seq = s;
            }
            PagedRun& r = (*runs)[size_t(run_of[size_t(s)])];
            r.ids.push_back(kv::BlockPool::unknown_token);
            r.pos.push_back(tokens[i].pos);
            r.token_index.push_back(i);
        }
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "paged layout: out of host memory for %u tokens", n);
    }
    return KVRT_SUCCESS;
}

Result Cache::paged_store(vk::Stream* stream, const kv::Token* tokens, uint32_t n, int32_t layer, const Source* k,
                          const Source* v, uint32_t* out_cells) {
    if (n && !tokens) return fail(KVRT_ERROR_INVALID_ARGUMENT, "tokens are NULL");
    std::vector<PagedRun> runs;
    KVRT_TRY(paged_runs(tokens, n, &runs));
    if (n == 0) return k ? check_write(n, layer, *k, *v) : KVRT_SUCCESS;
    return paged_extend(stream, runs, n, layer, k, v, out_cells);
}

Result Cache::paged_append(vk::Stream* stream, int32_t seq, uint32_t n, const int32_t* token_ids,
                           const int32_t* positions, uint32_t* out_cells) {
    KVRT_TRY(require_paged("kvrt_cache_paged_append"));
    if (seq < 0 || uint32_t(seq) >= geo_.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, geo_.max_seqs - 1);
    if (n == 0) return stream ? stream->require_recording() : KVRT_SUCCESS;
    if (!positions) return fail(KVRT_ERROR_INVALID_ARGUMENT, "positions is NULL");
    std::vector<PagedRun> runs(1);
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
    return paged_extend(stream, runs, n, -1, nullptr, nullptr, out_cells);
}

Result Cache::paged_admit(int32_t seq, uint32_t n, const int32_t* token_ids, const int32_t* positions, uint64_t salt,
                          uint32_t* out_n_cached, uint32_t* out_cells) {
    KVRT_TRY(require_paged("kvrt_cache_paged_admit"));
    if (!out_n_cached) return fail(KVRT_ERROR_INVALID_ARGUMENT, "out_n_cached is NULL");
    *out_n_cached = 0;
    if (seq < 0 || uint32_t(seq) >= geo_.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, geo_.max_seqs - 1);
    PagedView before;
    KVRT_TRY(paged_view(seq, &before));
    KVRT_TRY(paged_reserve(size_t(n) + geo_.block_size, 0));
    // With a window group: only as many blocks as the group still holds the
    // windowed rows for, and group cells for the rest, planned first.
    uint32_t max_blocks = UINT32_MAX;
    kv::Placement group;
    if (win_) {
        if (n && (!token_ids || !positions))
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "token_ids or positions is NULL");
        for (uint32_t t = 0; t < n; ++t)
            if (positions[t] < 0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "token %u has position %d", t, positions[t]);
        KVRT_TRY(window_admit_blocks(seq, n, token_ids, positions, salt, &max_blocks));
        KVRT_TRY(window_admit_plan(seq, n, positions, max_blocks * geo_.block_size, &group));
    }
    pool_.mark();
    Result r = pool_.admit(seq, n, token_ids, positions, salt, &work_, max_blocks, win_ != nullptr);
    if (r != KVRT_SUCCESS) {
        pool_.commit();  // a failed admit changed nothing
        return r;
    }
    // Admit maps whole blocks and fills new ones: no copies, no device work.
    // A failure gives the pool back exactly as it was.
    const uint32_t n_cached = work_.n_cached;
    r = paged_mirror(before, work_.copies);
    if (r != KVRT_SUCCESS) {
        keep_message([&] {
            if (win_) (void)win_->table_.rollback(group);
            pool_.rewind();
        });
        return r;
    }
    pool_.commit();
    if (win_) {
        r = n_cached == max_blocks * geo_.block_size
                ? window_admit(seq, n, positions, n_cached, group)
                : fail(KVRT_ERROR_INTERNAL, "admit mapped %u tokens, the window group planned for %u", n_cached,
                       max_blocks * geo_.block_size);
        if (r != KVRT_SUCCESS) {
            keep_message([&] {
                (void)win_->table_.rollback(group);
                (void)paged_cut(seq, n_cached, true);
                (void)paged_cut(seq, 0, false);
            });
            return r;
        }
    }
    *out_n_cached = work_.n_cached;
    if (out_cells)
        for (uint32_t t = 0; t < n; ++t) out_cells[t] = pool_.slot(seq, t);
    return KVRT_SUCCESS;
}

Result Cache::paged_fork(int32_t src, int32_t dst) {
    KVRT_TRY(require_paged("kvrt_cache_paged_fork"));
    PagedView before;
    KVRT_TRY(paged_view(dst, &before));
    KVRT_TRY(paged_reserve(pool_.seq_length(src), 0));
    KVRT_TRY(pool_.fork(src, dst));
    Result r = paged_mirror(before, {});
    if (r == KVRT_SUCCESS && win_) {
        r = win_->table_.seq_cp(src, dst, -1, -1);
        if (r == KVRT_SUCCESS) window_copy_floor(src, dst);
    }
    if (r != KVRT_SUCCESS) keep_message([&] { (void)paged_cut(dst, 0, false); });
    return r;
}

Result Cache::paged_seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    if (src == dst) return KVRT_SUCCESS;
    for (int32_t s : {src, dst})
        if (s < 0 || uint32_t(s) >= geo_.max_seqs)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", s, geo_.max_seqs - 1);
    const int32_t lo = table_.seq_pos_min(src), hi = table_.seq_pos_max(src);
    const bool whole = (p0 < 0 || p0 <= lo) && (p1 < 0 || p1 > hi);
    if (!whole || pool_.seq_length(dst) != 0)
        return fail(KVRT_ERROR_UNSUPPORTED,
                    "the paged layout copies whole sequences into empty ones only (kvrt_cache_paged_fork): [%d, %d) "
                    "of sequence %d (positions %d..%d) into sequence %d (%u tokens)",
                    p0, p1, src, lo, hi, dst, pool_.seq_length(dst));
    return paged_fork(src, dst);
}

Result Cache::paged_seq_rm(int32_t seq, int32_t p0, int32_t p1) {
    if (p0 >= 0 && p1 >= 0 && p1 < p0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "range [%d, %d) is reversed", p0, p1);
    if (seq >= 0 && uint32_t(seq) >= geo_.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, geo_.max_seqs - 1);
    const uint32_t first = seq < 0 ? 0 : uint32_t(seq), last = seq < 0 ? geo_.max_seqs : first + 1;
    // Check every sequence before changing any.
    size_t most = 0;
    for (uint32_t s = first; s < last; ++s) {
        uint32_t keep = 0;
        KVRT_TRY(pool_.suffix_start(int32_t(s), p0, p1, &keep));
        most = std::max<size_t>(most, pool_.seq_length(int32_t(s)));
    }
    KVRT_TRY(paged_reserve(0, most));
    for (uint32_t s = first; s < last; ++s) {
        uint32_t keep = 0;
        KVRT_TRY(pool_.suffix_start(int32_t(s), p0, p1, &keep));
        KVRT_TRY(paged_cut(int32_t(s), keep, false));
    }
    return KVRT_SUCCESS;
}

Result Cache::paged_seq_add(int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
    if (p0 >= 0 && p1 >= 0 && p1 < p0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "range [%d, %d) is reversed", p0, p1);
    if (seq < 0 || uint32_t(seq) >= geo_.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, geo_.max_seqs - 1);
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
    PagedView before;
    KVRT_TRY(paged_view(seq, &before));
    KVRT_TRY(paged_reserve(n + geo_.block_size, n));
    pool_.mark();
    Result r = pool_.shift(seq, delta, from, &work_);
    if (r != KVRT_SUCCESS) {
        pool_.commit();  // a failed shift changed nothing
        return r;
    }
    mirror_drop_.clear();
    mirror_set_.clear();
    paged_diff(before, work_.copies, &mirror_drop_, &mirror_set_);
    WindowEdits group;
    r = window_paged_edits(seq, mirror_set_.data(), mirror_set_.size(), work_.copies, &group);
    if (r == KVRT_SUCCESS && !work_.copies.empty()) {
        // Copy the shared blocks (synchronously: the call has no stream).
        std::vector<uint32_t> src, dst;
        const uint32_t B = geo_.block_size;
        try {
            for (const kv::BlockCopy& c : work_.copies)
                for (uint32_t j = 0; j < B; ++j) {
                    src.push_back(c.src * B + j);
                    dst.push_back(c.dst * B + j);
                }
        } catch (const std::bad_alloc&) {
            r = fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "paged layout: out of host memory for block copies");
        }
        vk::Transaction tx(this, nullptr, own_);
        tx.keep_on_timeout();
        if (r == KVRT_SUCCESS) r = tx.begin();
        if (r == KVRT_SUCCESS) {
            tx.stream().begin_op("paged copy-on-shift");
            r = record_copy_cells(tx.stream(), *this, src, dst);
            if (r == KVRT_SUCCESS && !group.from.empty())
                r = win_->record_copy_cells(tx.stream(), *win_, group.from, group.to);
            tx.stream().end_op();
        }
        if (r == KVRT_SUCCESS) r = tx.finish();
    }
    if (r != KVRT_SUCCESS && r != KVRT_ERROR_TIMEOUT) {
        keep_message([&] { pool_.rewind(); });
        return r;
    }
    pool_.commit();
    KVRT_TRY(paged_apply(seq, mirror_drop_, mirror_set_, &group));
    if (win_) window_forget_floors();
    if (r == KVRT_ERROR_TIMEOUT)
        return fail(KVRT_ERROR_TIMEOUT, "the wait for a paged-layout shift's block copies timed out; the shift stays "
                                        "and its rotation is pending");
    // Rotate now: a pending shift must never outlive a cell that a released
    // block could later show to another sequence.
    return apply_shifts(nullptr);
}

Result Cache::paged_tree_accept(uint32_t n, const int32_t* seq_ids, const uint32_t* cells,
                                const std::vector<uint8_t>& keep) {
    KVRT_TRY(require_no_window_group("kvrt_cache_tree_accept in the paged layout"));
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
            for (uint32_t t = p.from; t < len; t += geo_.block_size) {
                const uint32_t block = pool_.slot(p.seq, t) / geo_.block_size;
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
    KVRT_TRY(paged_reserve(n, n));

    // The table edits, from the table before: the kept tokens take the
    // first slots of the tree's range (their rows copied there), the others
    // leave. A moved slot carries its source's pending shift.
    mirror_drop_.clear();
    mirror_set_.clear();
    std::vector<EditSpan> spans;
    Result r = KVRT_SUCCESS;
    try {
        for (const Part& p : parts) {
            const uint32_t m = uint32_t(p.tokens.size()), kept = uint32_t(p.kept.size());
            for (uint32_t j = 0; j < m; ++j) {
                const uint32_t dst = cells[p.tokens[j]];
                if (j >= kept) {
                    mirror_drop_.push_back(dst);
                    continue;
                }
                const uint32_t src = cells[p.tokens[p.kept[j] - p.from]];
                if (src != dst) mirror_set_.push_back({dst, table_.cell_pos(src), table_.cell_delta(src)});
            }
            spans.push_back({p.seq, mirror_drop_.size(), mirror_set_.size()});
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
        vk::Transaction tx(this, nullptr, own_);
        tx.keep_on_timeout();
        if (r == KVRT_SUCCESS) r = tx.begin();
        if (r == KVRT_SUCCESS) {
            tx.stream().begin_op("paged tree accept");
            for (size_t i = 0; i < src.size() && r == KVRT_SUCCESS; ++i)
                r = record_copy_cells(tx.stream(), *this, src[i], dst[i]);
            tx.stream().end_op();
        }
        if (r == KVRT_SUCCESS) r = tx.finish();
    }
    if (r != KVRT_SUCCESS && r != KVRT_ERROR_TIMEOUT) {
        keep_message([&] { pool_.rewind(); });
        return r;
    }
    pool_.commit();
    KVRT_TRY(paged_commit(spans));
    if (r == KVRT_ERROR_TIMEOUT)
        return fail(KVRT_ERROR_TIMEOUT, "the wait for a paged-layout tree's row moves timed out; the accept stays");
    return KVRT_SUCCESS;
}

Result Cache::paged_seq_keep(int32_t seq) {
    if (seq < 0 || uint32_t(seq) >= geo_.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, geo_.max_seqs - 1);
    size_t most = 0;
    for (uint32_t s = 0; s < geo_.max_seqs; ++s) most = std::max<size_t>(most, pool_.seq_length(int32_t(s)));
    KVRT_TRY(paged_reserve(0, most));
    for (uint32_t s = 0; s < geo_.max_seqs; ++s)
        if (int32_t(s) != seq) KVRT_TRY(paged_cut(int32_t(s), 0, false));
    return KVRT_SUCCESS;
}

void Cache::paged_clear() {
    for (uint32_t s = 0; s < geo_.max_seqs; ++s) (void)pool_.truncate(int32_t(s), 0);
    pool_.clear_registry();
}

Result Cache::paged_set_sharing(int32_t seq, bool on) {
    KVRT_TRY(require_paged("kvrt_cache_paged_set_sharing"));
    return pool_.set_sharing(seq, on);
}

Result Cache::paged_clear_registry() {
    KVRT_TRY(require_paged("kvrt_cache_paged_clear_registry"));
    pool_.clear_registry();
    return KVRT_SUCCESS;
}

Result Cache::paged_stats(kvrt_paged_stats* out) const {
    KVRT_TRY(require_paged("kvrt_cache_paged_get_stats"));
    out->block_size = pool_.block_size();
    out->n_blocks = pool_.n_blocks();
    out->free_blocks = pool_.free_count();
    out->cached_blocks = pool_.cached_count();
    out->used_blocks = pool_.used_count();
    out->registered_blocks = pool_.registered_count();
    out->shared_blocks = pool_.shared_count();
    return KVRT_SUCCESS;
}

Result Cache::paged_cells(int32_t seq, uint32_t first, uint32_t max_cells, uint32_t* out_cells,
                          uint32_t* out_n_tokens) const {
    KVRT_TRY(require_paged("kvrt_cache_paged_get_cells"));
    if (seq < 0 || uint32_t(seq) >= geo_.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, geo_.max_seqs - 1);
    if (max_cells && !out_cells) return fail(KVRT_ERROR_INVALID_ARGUMENT, "out_cells is NULL");
    const uint32_t n = pool_.seq_length(seq);
    for (uint32_t i = 0; i < max_cells && first < n && i < n - first; ++i) out_cells[i] = pool_.slot(seq, first + i);
    if (out_n_tokens) *out_n_tokens = n;
    return KVRT_SUCCESS;
}

Result Cache::paged_verify() const {
    KVRT_TRY(pool_.verify());
    KVRT_TRY(table_.verify());
    // Every cell shows exactly the sequences whose tables reach it.
    const uint32_t B = geo_.block_size;
    for (uint32_t s = 0; s < geo_.max_seqs; ++s) {
        const uint32_t n = pool_.seq_length(int32_t(s));
        if (table_.seq_cell_count(int32_t(s)) != n)
            return fail(KVRT_ERROR_INTERNAL, "paged layout: sequence %u has %u tokens but %u cells", s, n,
                        table_.seq_cell_count(int32_t(s)));
        for (uint32_t t = 0; t < n; ++t) {
            const uint32_t c = pool_.slot(int32_t(s), t);
            if (!table_.cell_has_seq(c, int32_t(s)) || table_.cell_pos(c) != pool_.positions()[c])
                return fail(KVRT_ERROR_INTERNAL, "paged layout: token %u of sequence %u (cell %u) is not mirrored", t,
                            s, c);
        }
    }
    (void)B;
    return KVRT_SUCCESS;
}

}  // namespace kvrt::cache
