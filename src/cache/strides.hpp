// Strided rows as kvrt_tensor_ref and kvrt_output_ref address them: for each
// (layer, token, head) one row of `head_bytes` at
//
//     offset + layer * layer_stride + token * row_stride + head * head_stride,
//
// with zero strides resolved to packed ones. Pure arithmetic: the checks of
// every call that reads or writes such rows.
#pragma once

#include <cstdint>

#include "core/result.hpp"

namespace kvrt::cache {

struct StridedRows {
    uint64_t offset = 0;
    uint64_t head_bytes = 0;  // bytes of one row
    uint64_t head = 0;        // resolved strides
    uint64_t row = 0;
    uint64_t layer = 0;
    uint32_t n_heads = 0, n_tokens = 0, n_layers = 0;
    uint64_t end = 0;         // one past the last byte of any row (offset when there is none)

    uint64_t at(uint32_t l, uint32_t t, uint32_t h) const { return offset + l * layer + t * row + h * head; }
    bool heads_packed() const { return head == head_bytes; }
};

// Resolves the strides (0 = packed: head_stride one row, row_stride n_heads *
// head_stride, layer_stride max(n_tokens * row_stride, n_heads * head_stride),
// which is the token-major "n_tokens rows" and also covers head-major data)
// and checks them: offset and strides multiples of `align`, and the extent of
// every row computable in 64 bits. `what` names the argument in messages.
Result resolve_strided(const char* what, uint64_t offset, uint64_t row_stride, uint64_t head_stride,
                       uint64_t layer_stride, uint32_t n_layers, uint32_t n_tokens, uint32_t n_heads,
                       uint64_t head_bytes, uint64_t align, StridedRows* out);

// Checks that the rows lie inside a buffer of `size` bytes, or, for host
// memory at `host`, that no address wraps around.
Result check_strided_extent(const char* what, const StridedRows& rows, uint64_t buffer_size, const void* host);

// True when no two rows of one layer share a byte (exact, for any strides).
bool strided_rows_disjoint(const StridedRows& rows);

}  // namespace kvrt::cache
