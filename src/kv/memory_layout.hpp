// Sizes and device layout of a fixed-capacity memory (kvrt_memory): pure
// arithmetic, shared by kvrt_memory_estimate_size and kvrt_memory_create.
//
// Per (layer, head):
//   keys  MK^T [ep][mp] f32: transposed and padded, so the score kernel reads
//         8 consecutive slots of one key element per load.
//   state MV [m][dp] (f32 or f16) per sequence and slot (two slots, see
//         memory/memory.hpp), rows padded to 8 elements.
//   init  the initial MV in the state's precision (absent when zero).
// Heads are processed in groups of `group` heads; the keys, state and initial
// values of one group (one layer, one sequence and slot) form a block that
// never straddles a buffer piece, so one binding covers every head of a group.
//
// The working memory of one chunk (tp = chunk tokens rounded up to 32):
//   x    [2][tp][ep]  f32: the chunk's wq rows, then its q rows
//   s    [2][tp][mp]  f32: scores, normalized in place: the wq half becomes
//                     the update weights WW, the q half the read weights P
//   wv   [tp][dp]     f32
//   snap [nsub][m][dp] f32: the state at the start of each 64-token sub-chunk
//   a    [tp][64]     f32: the causal block of the reads
//   temp [m][dp]      state precision: a third state slot for calls with
//                     several chunks of one sequence (memory/memory.hpp)
// one region set per head of a group, in one buffer of one piece. The reads of
// a chunk are staged as f32 [tp][n_heads][value_dim] in a buffer of their own.
#pragma once

#include <cstdint>

#include "core/result.hpp"

namespace kvrt::kv {

constexpr uint32_t kMemoryMaxChunk = 512;          // tokens per chunk, at most
constexpr uint32_t kMemorySubchunk = 64;           // MEM_SUBCHUNK in the shaders
constexpr uint32_t kMemoryRowPad = 32;             // chunk rows round up to this (a multiple of every tile)
constexpr uint64_t kMemoryPieceCap = 128ull << 20; // Vulkan's minimum maxStorageBufferRange
constexpr uint64_t kMemoryAlign = 256;             // alignment of every block and region
// Working memory kvrt aims for: heads are grouped so that one group's working
// memory stays below this (at least one head per group). Fewer, larger groups
// mean fewer dispatches; a chunk of one head already has ample parallelism.
constexpr uint64_t kMemoryWorkBudget = 64ull << 20;

struct MemoryGeometry {
    uint32_t n_layers = 0;
    uint32_t n_heads = 0;
    uint32_t m = 0;  // slots
    uint32_t e = 0;  // key size
    uint32_t d = 0;  // value size
    uint32_t max_seqs = 0;
    uint32_t chunk = 0;  // tokens per chunk (1..kMemoryMaxChunk)
    bool state_f16 = false;
    bool has_init = false;  // initial MV is not all zero
};

struct MemoryLayout {
    MemoryGeometry geo;
    uint32_t mp = 0, ep = 0, dp = 0;  // padded to multiples of 8
    uint32_t tp = 0;                  // padded chunk rows
    uint32_t nsub = 0;                // sub-chunks of a full chunk
    uint32_t group = 0;               // heads per group
    uint32_t n_groups = 0;
    uint64_t piece_cap = 0;

    // Bytes per head and per group block.
    uint64_t keys_head = 0, state_head = 0;
    uint64_t keys_block = 0, state_block = 0;
    // Piece sizes (whole blocks) and buffer sizes.
    uint64_t keys_piece = 0, state_piece = 0;
    uint64_t keys_bytes = 0, state_bytes = 0, init_bytes = 0;
    // Working memory: byte offsets of the regions inside one head's share.
    uint64_t w_x = 0, w_s = 0, w_wv = 0, w_snap = 0, w_a = 0, w_temp = 0;
    uint64_t work_head = 0, work_bytes = 0;
    uint64_t stage_bytes = 0;
    uint64_t total_bytes = 0;

    // Fills every field for `geo` with pieces of at most `piece_cap` bytes.
    // Fails with KVRT_ERROR_INVALID_ARGUMENT (and a message) for sizes that
    // overflow or a head whose share does not fit one piece.
    Result compute(const MemoryGeometry& geo, uint64_t piece_cap);

    uint32_t groups_heads(uint32_t g) const;  // heads in group g

    // Byte offset of a block in its buffer (blocks never straddle pieces).
    uint64_t keys_offset(uint32_t layer, uint32_t g) const {
        return (static_cast<uint64_t>(layer) * n_groups + g) * keys_block;
    }
    uint64_t init_offset(uint32_t layer, uint32_t g) const {
        return (static_cast<uint64_t>(layer) * n_groups + g) * state_block;
    }
    uint64_t state_offset(uint32_t seq, uint32_t slot, uint32_t layer, uint32_t g) const {
        return ((static_cast<uint64_t>(seq) * 2 + slot) * geo.n_layers + layer) * n_groups * state_block +
               static_cast<uint64_t>(g) * state_block;
    }
};

}  // namespace kvrt::kv
