// Fill and copy kernels over buffers of any size (split at piece boundaries).
#pragma once

#include <cstdint>

#include "core/result.hpp"

namespace kvrt::vk {
class Buffer;
class Stream;
}  // namespace kvrt::vk

namespace kvrt::ops {

// Records a kernel writing `value` over [offset, offset + size) of `buffer`.
// Offset and size are multiples of 4 and inside the buffer (checked by the
// caller).
Result record_fill(vk::Stream& stream, const vk::Buffer& buffer, uint64_t offset, uint64_t size,
                   uint32_t value);

// Records a kernel copying `size` bytes from src to dst (multiples of 4, inside
// both buffers, not overlapping).
Result record_copy(vk::Stream& stream, const vk::Buffer& src, uint64_t src_offset,
                   const vk::Buffer& dst, uint64_t dst_offset, uint64_t size);

}  // namespace kvrt::ops
