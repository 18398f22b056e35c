#include "cache/strides.hpp"

#include <algorithm>

#include "core/checked.hpp"

namespace kvrt::cache {

Result resolve_strided(const char* what, uint64_t offset, uint64_t row_stride, uint64_t head_stride,
                       uint64_t layer_stride, uint32_t n_layers, uint32_t n_tokens, uint32_t n_heads,
                       uint64_t head_bytes, uint64_t align, StridedRows* out) {
    if (offset % align || row_stride % align || head_stride % align || layer_stride % align)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: offset and strides must be multiples of %llu", what,
                    static_cast<unsigned long long>(align));
    StridedRows r;
    r.offset = offset;
    r.head_bytes = head_bytes;
    r.n_heads = n_heads;
    r.n_tokens = n_tokens;
    r.n_layers = n_layers;
    r.head = head_stride ? head_stride : head_bytes;
    const auto overflow = [&]() {
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: the offset and strides of %u token(s) of %u layer(s) overflow",
                    what, n_tokens, n_layers);
    };
    if (row_stride) r.row = row_stride;
    else if (!checked_mul(r.head, n_heads, &r.row)) return overflow();
    if (layer_stride) {
        r.layer = layer_stride;
    } else {
        uint64_t a = 0, b = 0;
        if (!checked_mul(r.row, n_tokens, &a) || !checked_mul(r.head, n_heads, &b)) return overflow();
        r.layer = std::max(a, b);
    }
    r.end = offset;
    if (n_layers && n_tokens && n_heads) {
        uint64_t span = 0, t = 0;
        if (!checked_mul(r.layer, n_layers - 1, &span) || !checked_mul(r.row, n_tokens - 1, &t) ||
            !checked_add(span, t, &span) || !checked_mul(r.head, n_heads - 1, &t) || !checked_add(span, t, &span) ||
            !checked_add(span, head_bytes, &span) || !checked_add(offset, span, &r.end))
            return overflow();
    }
    *out = r;
    return KVRT_SUCCESS;
}

Result check_strided_extent(const char* what, const StridedRows& rows, uint64_t buffer_size, const void* host) {
    if (host) {
        if (rows.end > UINTPTR_MAX - reinterpret_cast<uintptr_t>(host))
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: the rows' addresses wrap around", what);
        return KVRT_SUCCESS;
    }
    if (rows.end > buffer_size)
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "%s: %u token(s) of %u layer(s) reach byte %llu, past the buffer's %llu bytes", what, rows.n_tokens,
                    rows.n_layers, static_cast<unsigned long long>(rows.end),
                    static_cast<unsigned long long>(buffer_size));
    return KVRT_SUCCESS;
}

bool strided_rows_disjoint(const StridedRows& rows) {
    // Rows (t, h) and (t', h') overlap when |dt * row + dh * head| < head_bytes
    // for dt = t' - t, dh = h' - h, not both 0. By symmetry dh >= 0 (and dt > 0
    // when dh = 0). The loop runs over the smaller count; for each step of the
    // other stride the closest multiple of this one is the only candidate.
    if (rows.n_tokens == 0 || rows.n_heads == 0) return true;
    uint64_t outer = rows.head, inner = rows.row;
    uint32_t n_outer = rows.n_heads, n_inner = rows.n_tokens;
    if (n_inner < n_outer) {
        std::swap(outer, inner);
        std::swap(n_outer, n_inner);
    }
    const uint64_t len = rows.head_bytes;
    // dh = 0: neighbours along the inner stride.
    if (n_inner > 1 && inner < len) return false;
    if (n_outer > 1 && outer < len) return false;
    // The extent check bounds every product below by the rows' extent.
    for (uint64_t d = 1; d < n_outer; ++d) {
        const uint64_t x = d * outer;
        const uint64_t q = inner ? x / inner : 0;
        for (uint64_t k : {q, q + 1}) {
            k = std::min<uint64_t>(k, n_inner - 1);
            const uint64_t y = k * inner;
            const uint64_t gap = x > y ? x - y : y - x;
            if (gap < len) return false;
        }
    }
    return true;
}

}  // namespace kvrt::cache
