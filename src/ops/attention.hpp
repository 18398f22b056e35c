// Recording the attention kernels (shaders/attention.comp and
// attention_merge.comp) for prepared inputs.
#pragma once

#include <cstdint>
#include <vector>

#include "core/result.hpp"
#include "kv/geometry.hpp"
#include "vk/stream.hpp"

namespace kvrt::ops {

// Per attended cell, as the kernel reads it (uvec4).
struct AttnCell {
    uint32_t k_byte;  // offset of the cell's K row in its piece
    uint32_t v_byte;
    int32_t pos;
    uint32_t pad;
};
static_assert(sizeof(AttnCell) == 16, "AttnCell mirrors uvec4");

// A run of attended cells whose K rows lie in one piece and V rows in one.
struct AttnSegment {
    const vk::Buffer* k = nullptr;
    size_t k_piece = 0;
    const vk::Buffer* v = nullptr;
    size_t v_piece = 0;
    uint32_t first = 0;   // index of its first cell in the cell list
    uint32_t count = 0;
    uint32_t splits = 1;  // partial results it produces per row
};

struct AttnShape {
    kvrt_type k_type, v_type, q_type, out_type;
    uint32_t head_dim_k, head_dim_v;
    uint32_t n_heads, n_kv_heads;
    uint32_t n_queries;
    uint64_t k_head_bytes, v_head_bytes;  // bytes between heads inside a row
    uint32_t seq_words;                   // 32-bit words of sequence bits per cell
    // Deferred RoPE (K stored unrotated): pair frequencies and magnitude.
    bool deferred = false;
    uint32_t n_rot = 0;
    bool neox = false;
    const std::vector<float>* thetas = nullptr;
    float mscale = 1.0f;
    // The layer's quantization of static-scale K / V types; ignored for others.
    kv::StaticScale k_scale, v_scale;
};

struct AttnOptions {
    float scale, softcap, max_bias;
    int32_t window, n_keep;
    bool causal;
    const float* sinks;  // n_heads, or null
};

// Records both passes. `cells` and `cell_seq_words` (seq_words per cell) are
// the attended cells, `queries` (pos, seq) pairs; `q` and `out` are the query
// rows and the output rows (word offsets and strides inside their pieces:
// query i's head h at offset + i * stride + h * head).
struct AttnIo {
    vk::BufferUse q;       // whole binding of the queries' piece
    uint32_t q_offset_words, q_stride_words, q_head_words;
    vk::BufferUse out;     // whole binding of the output's piece
    uint32_t out_offset_words, out_stride_words, out_head_words;
};

Result record_attention(vk::Stream& stream, const AttnShape& shape, const AttnOptions& opt,
                        const std::vector<AttnCell>& cells, const std::vector<uint32_t>& cell_seq_words,
                        const std::vector<uint32_t>& queries, std::vector<AttnSegment> segments, const AttnIo& io);

}  // namespace kvrt::ops
