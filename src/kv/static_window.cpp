#include "kv/static_window.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/checked.hpp"

namespace kvrt::kv {

namespace {

// ceil(R * W) as whole rows, or false when it does not fit in uint32_t.
bool reservation_for(double reserve, uint32_t window_rows, uint32_t* out) {
    const double rows = std::ceil(reserve * static_cast<double>(window_rows));
    if (!(rows <= static_cast<double>(std::numeric_limits<uint32_t>::max()))) return false;
    *out = static_cast<uint32_t>(rows);
    if (*out < window_rows) *out = window_rows;  // R >= 1; guards rounding only
    return true;
}

}  // namespace

Result StaticGeometry::create(uint32_t n_layers, uint32_t n_kv_heads, uint32_t head_dim, uint32_t elem_bytes,
                              uint32_t max_seq, double reserve, StaticGeometry* out) {
    if (out == nullptr) return fail(KVRT_ERROR_INVALID_ARGUMENT, "static geometry: null output");
    if (n_layers == 0 || n_kv_heads == 0 || head_dim == 0)
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "static geometry: layers (%u), KV heads (%u) and head dim (%u) must all be nonzero", n_layers,
                    n_kv_heads, head_dim);
    if (elem_bytes != 1 && elem_bytes != 2 && elem_bytes != 4)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "static geometry: element size %u bytes is not 1, 2 or 4",
                    elem_bytes);
    if (max_seq < 2)
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "static geometry: maximum sequence length S = %u must be at least 2 (window of S-1 rows)",
                    max_seq);
    if (std::isnan(reserve) || !std::isfinite(reserve) || reserve < 1.0)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "static geometry: reserve factor R = %g must be finite and >= 1",
                    reserve);

    StaticGeometry g;
    g.n_layers = n_layers;
    g.n_kv_heads = n_kv_heads;
    g.head_dim = head_dim;
    g.elem_bytes = elem_bytes;
    g.max_seq = max_seq;
    g.reserve = reserve;
    g.window_rows = max_seq - 1;
    if (!reservation_for(reserve, g.window_rows, &g.reservation_rows))
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "static geometry: R = %g times %u rows does not fit in 2^32 - 1 reservation rows", reserve,
                    g.window_rows);
    g.row_stride = static_cast<uint64_t>(head_dim) * elem_bytes;  // < 2^34, no overflow
    uint64_t per_kind = 0;
    if (!checked_mul(g.window_rows, g.row_stride, &g.window_bytes) ||
        !checked_mul(g.reservation_rows, g.row_stride, &g.buffer_bytes) ||
        !checked_mul(n_layers, n_kv_heads, &per_kind) || !checked_mul(per_kind, 2, &g.buffer_count) ||
        !checked_mul(g.buffer_count, g.buffer_bytes, &g.total_bytes))
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "static geometry: %u layers x %u heads x %u rows x %u dims x %u bytes overflows 64-bit sizes",
                    n_layers, n_kv_heads, g.reservation_rows, head_dim, elem_bytes);
    g.fractional_bytes = 2.0 * reserve * static_cast<double>(n_layers) * static_cast<double>(n_kv_heads) *
                         static_cast<double>(g.window_rows) * static_cast<double>(head_dim) *
                         static_cast<double>(elem_bytes * 8) / 8.0;
    *out = g;
    return KVRT_SUCCESS;
}

Result StaticGeometry::create_ring(uint32_t n_layers, uint32_t n_kv_heads, uint32_t head_dim, uint32_t elem_bytes,
                                   uint32_t max_seq, StaticGeometry* out) {
    KVRT_TRY(create(n_layers, n_kv_heads, head_dim, elem_bytes, max_seq, 1.0, out));
    out->ring = true;
    return KVRT_SUCCESS;
}

Result StaticWindow::append(uint32_t n, StaticAppend* out) {
    if (out == nullptr) return fail(KVRT_ERROR_INVALID_ARGUMENT, "static window: null output");
    if (window_rows_ == 0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "static window: not made from a geometry");
    if (n == 0 || n > window_rows_)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "static window: appending %u rows; 1 to %u (S-1) allowed", n,
                    window_rows_);
    StaticAppend a;
    a.rows = n;
    if (ring_) {
        // After the newest row, wrapping; the rows past W fall out, oldest first.
        a.write_row = (tail_ + n_valid_) % window_rows_;
        const uint32_t total = n_valid_ + n;
        if (total > window_rows_) {
            tail_ = (tail_ + (total - window_rows_)) % window_rows_;
            n_valid_ = window_rows_;
        } else {
            n_valid_ = total;
        }
        rows_appended_ += n;
        *out = a;
        return KVRT_SUCCESS;
    }
    const uint64_t end = static_cast<uint64_t>(start_) + window_rows_ + n;
    if (end <= reservation_rows_) {
        a.write_row = start_ + window_rows_;
        start_ += n;
    } else {
        // Survivors: the newest valid rows that stay in the window after n more.
        const uint32_t keep = n_valid_ < window_rows_ - n ? n_valid_ : window_rows_ - n;
        // A small batch of rows (draft tokens) restarts n rows in: removing
        // them again then only moves the window back. It costs n of the
        // room's free appends, so only batches of up to a quarter of the room
        // do; one row and larger batches (prefill chunks, loads) restart at 0.
        const uint32_t room = reservation_rows_ - window_rows_;
        const uint32_t lead = n > 1 && n <= room / 4 ? n : 0;
        a.slid = true;
        a.write_row = lead + window_rows_ - n;
        if (keep > 0) {
            a.slide.needed = true;
            a.slide.rows = keep;
            a.slide.src_row = start_ + window_rows_ - keep;
            a.slide.dst_row = a.write_row - keep;
            // src > dst always (src - dst = start + n - lead >= 1, as start + W + n > Rr >= W + lead):
            // overlap when the shift is shorter than the copy.
            a.slide.overlapping = a.slide.src_row - a.slide.dst_row < keep;
            rows_moved_ += keep;
            ++slides_;
        }
        ++restarts_;
        start_ = lead;
    }
    n_valid_ = n_valid_ + n < window_rows_ ? n_valid_ + n : window_rows_;
    rows_appended_ += n;
    a.start_after = start_;
    *out = a;
    return KVRT_SUCCESS;
}

Result StaticWindow::remove_runs(uint32_t first, uint32_t count, std::vector<StaticSlide>* out) {
    if (out == nullptr) return fail(KVRT_ERROR_INVALID_ARGUMENT, "static window: null output");
    out->clear();
    if (!ring_) {
        StaticSlide slide;
        KVRT_TRY(remove(first, count, &slide));
        if (slide.needed) out->push_back(slide);
        return KVRT_SUCCESS;
    }
    if (first > n_valid_ || count > n_valid_ - first)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "static window: removing rows [%u, %llu) of %u valid rows", first,
                    static_cast<unsigned long long>(first) + count, n_valid_);
    const uint32_t older = first, newer = n_valid_ - first - count, W = window_rows_;
    if (count == 0 || newer == 0) {
        // Only the newest rows go (or none): the next append writes after the survivors.
    } else if (older == 0) {
        tail_ = (tail_ + count) % W;
    } else {
        // Move the smaller side across the gap: the newer rows back by
        // `count` (the oldest of them first), or the older rows on by `count`
        // (the newest first), so that no row is overwritten before it is
        // copied. Each copy is a run whose source and destination rows are
        // both contiguous: cut where either wraps.
        const bool back = newer < older;
        const uint32_t rows = back ? newer : older;
        const uint32_t from = back ? first + count : 0, to = back ? first : count;  // valid-row indices
        uint32_t done = 0;
        while (done < rows) {
            StaticSlide slide;
            slide.needed = true;
            if (back) {
                const uint32_t src = valid_row(from + done), dst = valid_row(to + done);
                slide.rows = std::min({rows - done, W - src, W - dst});
                slide.src_row = src;
                slide.dst_row = dst;
            } else {
                const uint32_t left = rows - done;  // runs [.., left) still to copy
                const uint32_t src_end = valid_row(from + left - 1) + 1, dst_end = valid_row(to + left - 1) + 1;
                slide.rows = std::min({left, src_end, dst_end});
                slide.src_row = src_end - slide.rows;
                slide.dst_row = dst_end - slide.rows;
            }
            const uint32_t distance =
                slide.src_row > slide.dst_row ? slide.src_row - slide.dst_row : slide.dst_row - slide.src_row;
            slide.overlapping = distance < slide.rows;
            out->push_back(slide);
            done += slide.rows;
        }
        if (!back) tail_ = (tail_ + count) % W;
        rows_moved_ += rows;
        ++slides_;
    }
    n_valid_ -= count;
    if (n_valid_ == 0) tail_ = 0;
    return KVRT_SUCCESS;
}

Result StaticWindow::remove(uint32_t first, uint32_t count, StaticSlide* out) {
    if (out == nullptr) return fail(KVRT_ERROR_INVALID_ARGUMENT, "static window: null output");
    if (window_rows_ == 0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "static window: not made from a geometry");
    if (ring_)
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "static window: a smart-mask window's removal may need several copies (remove_runs)");
    if (first > n_valid_ || count > n_valid_ - first)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "static window: removing rows [%u, %llu) of %u valid rows", first,
                    static_cast<unsigned long long>(first) + count, n_valid_);
    StaticSlide slide;
    const uint32_t older = first, newer = n_valid_ - first - count;
    const uint32_t first_row = first_valid_row();
    if (count == 0 || older == 0) {
        // Only the padding grows.
    } else if (newer == 0 && start_ >= count) {
        start_ -= count;  // the window ends right after the survivors
    } else if (newer == 0) {
        slide.src_row = first_row;
        slide.dst_row = window_rows_ - older;  // dst - src = count - start > 0
        slide.rows = older;
        start_ = 0;
        ++restarts_;
    } else if (newer < older && start_ >= count) {
        slide.src_row = first_row + older + count;
        slide.dst_row = slide.src_row - count;
        slide.rows = newer;
        start_ -= count;
    } else {
        slide.src_row = first_row;
        slide.dst_row = first_row + count;
        slide.rows = older;
    }
    if (slide.rows > 0) {
        slide.needed = true;
        const uint32_t distance =
            slide.src_row > slide.dst_row ? slide.src_row - slide.dst_row : slide.dst_row - slide.src_row;
        slide.overlapping = distance < slide.rows;
        rows_moved_ += slide.rows;
        ++slides_;
    }
    n_valid_ -= count;
    *out = slide;
    return KVRT_SUCCESS;
}

Result StaticWindow::make_room(uint32_t n, StaticSlide* out) {
    if (out == nullptr) return fail(KVRT_ERROR_INVALID_ARGUMENT, "static window: null output");
    if (window_rows_ == 0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "static window: not made from a geometry");
    const uint32_t room = reservation_rows_ - window_rows_;
    if (ring_)
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "static window: a smart-mask window is its whole region; it has no room after it");
    if (n == 0 || n > room)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "static window: room for %u rows after the window; 1 to %u allowed", n,
                    room);
    StaticSlide slide;
    if (uint64_t{start_} + window_rows_ + n > reservation_rows_) {
        // start_ > 0 here (the region holds W + n rows): the valid rows move
        // down by start_ rows, to the end of a window at row 0.
        if (n_valid_ > 0) {
            slide.needed = true;
            slide.src_row = first_valid_row();
            slide.dst_row = window_rows_ - n_valid_;
            slide.rows = n_valid_;
            slide.overlapping = start_ < n_valid_;
            rows_moved_ += n_valid_;
            ++slides_;
        }
        ++restarts_;
        start_ = 0;
    }
    *out = slide;
    return KVRT_SUCCESS;
}

uint32_t StaticWindow::valid_runs(uint32_t begin[2], uint32_t end[2]) const {
    if (n_valid_ == 0) return 0;
    const uint32_t first = valid_row(0);
    if (!ring_ || first + n_valid_ <= window_rows_) {
        begin[0] = first;
        end[0] = first + n_valid_;
        return 1;
    }
    begin[0] = first;
    end[0] = window_rows_;
    begin[1] = 0;
    end[1] = first + n_valid_ - window_rows_;
    return 2;
}

void StaticWindow::reset() {
    n_valid_ = 0;
    start_ = 0;
    tail_ = 0;
    rows_appended_ = 0;
    rows_moved_ = 0;
    slides_ = 0;
    restarts_ = 0;
}

template <typename T>
Result StaticWindow::write_mask(uint32_t n_new, T valid, T padding, T* out, size_t count) const {
    if (window_rows_ == 0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "static window: not made from a geometry");
    if (n_new == 0 || n_new > window_rows_)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "static window: a graph of %u new rows (S-1 = %u at most)", n_new,
                    window_rows_);
    const size_t s = mask_entries(n_new);
    const size_t need = s * n_new;
    if (out == nullptr || count < need)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "static window: the mask needs %zu entries (%u x %zu), got %zu%s",
                    need, n_new, s, count, out == nullptr ? " and a null pointer" : "");
    // The graph's past: the whole window in the smart-mask style (valid where
    // the ring holds a row), else the window's last S - n_new rows, of which
    // the last min(n_valid, past) are valid.
    const uint32_t past = static_cast<uint32_t>(s) - n_new;
    const uint32_t pad = past - std::min(n_valid_, past);
    for (uint32_t j = 0; j < n_new; ++j) {
        T* row = out + size_t{j} * s;
        for (uint32_t i = 0; i < past; ++i) row[i] = (ring_ ? row_valid(i) : i >= pad) ? valid : padding;
        for (uint32_t k = 0; k < n_new; ++k) row[past + k] = k <= j ? valid : padding;
    }
    return KVRT_SUCCESS;
}

Result StaticWindow::mask_f32(float* out, size_t count) const {
    return write_mask<float>(1, 0.0f, -std::numeric_limits<float>::infinity(), out, count);
}

Result StaticWindow::mask_f16(uint16_t* out, size_t count) const {
    return write_mask<uint16_t>(1, 0x0000, 0xFC00, out, count);
}

Result StaticWindow::graph_mask(uint32_t n_new, float attend, float masked, float* out, size_t count) const {
    return write_mask<float>(n_new, attend, masked, out, count);
}

Result StaticWindow::graph_mask(uint32_t n_new, uint16_t attend, uint16_t masked, uint16_t* out,
                                size_t count) const {
    return write_mask<uint16_t>(n_new, attend, masked, out, count);
}

uint64_t expected_rows_moved(uint32_t max_seq, double reserve, uint64_t tokens) {
    if (max_seq < 2 || !std::isfinite(reserve) || reserve < 1.0) return 0;
    const uint64_t w = max_seq - 1;
    uint32_t rr = 0;
    if (!reservation_for(reserve, static_cast<uint32_t>(w), &rr)) return 0;
    const uint64_t period = static_cast<uint64_t>(rr) - w + 1;  // F free appends, then one restart
    const uint64_t n = tokens / period;                         // restarts
    const uint64_t filling = (w - 1) / period;                  // restarts m with m*P < W
    const uint64_t m = n < filling ? n : filling;
    return period * m * (m + 1) / 2 - m + (n - m) * (w - 1);
}

}  // namespace kvrt::kv
