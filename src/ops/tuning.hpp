// Device tuning: every number the recording of a kernel picks for a device
// (workgroup sizes, grid limits, split counts, tile sizes, and the choice of
// kernel variant), in one table filled from the device's properties and the
// context's options. Numbers measured on one driver say so next to them.
#pragma once

#include <cstdint>
#include <string>

namespace kvrt::vk {
class Context;
}

namespace kvrt::ops {

struct Tuning {
    bool cpu = false;  // a CPU implementation (lavapipe, SwiftShader)

    // ---- Attention (ops/attention.cpp, cache/attention.cpp) ----
    // Portable kernels (one invocation per row tile) instead of subgroup
    // shuffles: asked for, no basic+shuffle subgroup operations, subgroups of
    // one lane, or a CPU driver, where a subgroup is the SIMD lanes of one
    // core and cross-lane shuffles cost more than they save (one invocation
    // per row tile streams whole rows 2-3x faster on lavapipe). Asking for
    // the shuffle kernels overrides the CPU rule (the context refuses them
    // on a device that lacks what they need).
    bool attn_portable = true;
    // The wide build of the portable kernel: F32 and F16 rows 32 bytes at a
    // time (u64vec4) where rows and heads are aligned to 32, Q8_0 and Q4_0
    // blocks from 16-byte units (3 and 2 loads instead of 9 and 5 words). On
    // CPU drivers with shaderInt64, unless the context asks for portable
    // kernels. On llvmpipe each load in the cell loop is a loop over the SIMD
    // lanes whatever its width, so fewer, wider loads pay. Measured on
    // lavapipe (AMD EPYC, 2 cores), 4,096 cells, 32/8 heads, dim 128, against
    // 16-byte rows and word-wise blocks, interleaved (16 MiB copy: 7.6-7.8 ms):
    // 32 queries f16 54-55 ms against 65 ms, q8_0 51-52 against 70, q4_0 48
    // against 53; 512 queries f16 852-890 ms against 1,027-1,063; decode f16
    // 3.2-3.3 against 3.8-4.4, q8_0 2.8-2.9 against 4.0-4.2.
    bool attn_wide = false;
    // Subgroups as the shuffle kernels see them. With subgroup size control
    // (subgroup_require), a pipeline requires a size in [subgroup_min,
    // subgroup_max] for compute; without it, the shader runs with
    // subgroup_size, and lane groups stay within subgroup_min (the smallest
    // size the device may use) so that they fit whatever the device picks.
    uint32_t subgroup_size = 1;
    uint32_t subgroup_min = 1, subgroup_max = 1;
    bool subgroup_require = false;        // may require a subgroup size
    bool subgroup_full = false;           // may require full subgroups
    uint32_t subgroup_max_per_workgroup = 0;  // maxComputeWorkgroupSubgroups; 0: unknown
    // Lane groups per workgroup of the row-tile kernel (portable; shuffle:
    // see attn_lanes). CPU: 8, one SIMD row of lanes: llvmpipe runs each
    // workgroup on one thread, and decode has few lane groups (64 for 1
    // query, 8 KV heads): in workgroups of 64 they were one workgroup on one
    // core. Measured on lavapipe (2 cores), 1 query over 4,096 cells, 32/8
    // heads, dim 128, f16: 11.6-11.9 ms with 64, 5.3-5.5 ms with 8, against
    // a 16 MiB copy of 7.2-8.3 ms in the same runs.
    uint32_t attn_workgroup = 64;
    uint32_t attn_tile_rows = 8;          // query rows per tile, at most
    uint32_t attn_merge_workgroup = 64;
    // Splits of the cells: enough lane groups in flight to fill the device,
    // without splits so small that merging dominates.
    uint32_t attn_target_groups = 1024;   // CPU: 64
    uint32_t attn_min_split_cells = 64;   // CPU: 128
    // llvmpipe (lavapipe) ends any loop of an invocation after 65535 total
    // back-edges (its guard against endless loops), silently. The kernel's
    // inner loops are unrolled, so only its cell loop counts: keep every
    // split at or below 32768 cells.
    uint32_t attn_max_split_cells = 32768;
    uint32_t attn_max_splits = 4096;
    // The shared-memory tiled kernel (attention_tiled.comp): used for calls
    // with at least attn_tiled_min_rows query rows per KV head (every call
    // when forced), WG rows per workgroup, tiles of cells as large as the
    // shared memory holds, up to attn_tiled_max_cells. Splits: enough
    // workgroups in flight to fill the device. Not picked by default on any
    // device yet: on lavapipe it is 10x slower than the row-tile kernel for
    // 32 queries over 4,096 cells (1,266 ms against 114 ms: llvmpipe runs a
    // workgroup with barriers as coroutines, and compiles it for seconds),
    // and it has not been measured on a GPU.
    // A cooperative variant of the row-tile kernel was measured and left
    // out: the lanes of a subgroup owned consecutive row tiles of one KV head
    // and read each cell's K and V rows once between them, passing octets
    // around with subgroup shuffles. Lavapipe, 2 cores, 32/8 heads, dim 128,
    // f16 over 4,096 cells: on one machine 128 queries took 644 ms against
    // 887 ms with the row-tile kernel; on an AMD EPYC (Zen 4) 930-1,000 ms
    // against 365-369 ms (32 queries: 244-269 ms against 92 ms), and each of
    // its pipelines compiled 3 to 4 times longer (64-80 s at dim 128).
    bool attn_tiled_forced = false;
    uint32_t attn_tiled_min_rows = UINT32_MAX;
    uint32_t attn_tiled_workgroup = 64;
    uint32_t attn_tiled_max_cells = 32;
    uint32_t attn_tiled_target_groups = 512;  // CPU: 16
    uint32_t shared_memory_bytes = 16384;     // maxComputeSharedMemorySize

    // ---- Fixed-capacity memory (ops/memory_kernels.cpp) ----
    // "wide" kernels (64-bit loads, 32-row tiles) on CPU implementations with
    // shaderInt64, portable ones everywhere else and whenever the context asks
    // for portable kernels.
    bool memory_wide = false;
    uint32_t memory_workgroup = 64;
    // The softmax reduces across its workgroup through shared memory: one
    // SIMD row of lanes on CPUs (no barrier cost), a wider group on GPUs.
    uint32_t memory_softmax_workgroup = 64;  // CPU: 8
    uint32_t memory_rows = 8;        // MEM_ROWS (scores, read); wide: 16
    uint32_t memory_cols = 1;        // MEM_COLS; wide: 2
    uint32_t memory_intra_rows = 8;  // INTRA_T; wide: 16
    uint32_t memory_update_m = 8;    // UPD_M; wide: 16
    uint32_t memory_update_dg = 1;   // UPD_DG; wide: 2
    uint32_t memory_max_groups = 65535;  // the smallest maxComputeWorkGroupCount[0]

    // ---- Row stores and copies (ops/rows.cpp) ----
    uint32_t rows_workgroup = 64;
    // A store's workgroup writes one row, sized to the row's units (quantized
    // rows have few, large units): from this up to rows_workgroup.
    uint32_t store_min_workgroup = 8;
    uint32_t rows_max_groups = 8192;

    // ---- RoPE shifts (ops/rope.cpp) ----
    uint32_t shift_workgroup = 64;
    // Cells per workgroup of the streaming kernel: 16 measured best on
    // lavapipe (13-16 ms for a 4096-cell F16 layer against 20 ms with 128
    // and 26 ms with 4).
    uint32_t shift_cells_per_group = 16;
    uint32_t shift_max_groups = 4096;

    // ---- Fills and copies (ops/transfer.cpp) ----
    uint32_t transfer_workgroup = 128;  // the smallest maxComputeWorkGroupInvocations
    uint32_t transfer_max_groups = 4096;  // grid-stride beyond this

    // ---- Static-layout slides (cache/static_layout.cpp) ----
    // Rows of a slide's copy go in chunks of about this many bytes, so that
    // the copy spreads over many workgroups (the row kernel gives each row one).
    uint64_t slide_chunk_bytes = 64 * 1024;

    // The table for `ctx`'s device and options.
    static Tuning of(const vk::Context& ctx);

    // How the shuffle attention kernel forms its lane groups for heads of
    // `octets` octets (8 values): `lanes` per group (a power of two that
    // divides the subgroup), the subgroup size its pipeline requires (0:
    // none can be required), whether it requires full subgroups, and the
    // workgroup size (a multiple of the subgroup size).
    struct Lanes {
        uint32_t lanes = 1;
        uint32_t required_subgroup = 0;
        bool full_subgroups = false;
        uint32_t workgroup = 64;
    };
    Lanes attn_lanes(uint32_t octets) const;
    // The choices as text, one "name value" line each (kvrt_context_get_tuning,
    // kvrt info): the kernel variants, workgroups, splits, tiles and lane
    // groups for heads of 64 and 128 values, and the device they are for.
    std::string describe(const vk::Context& ctx) const;
    // Cells per tile of the tiled kernel for heads of dk and dv values: the
    // most (up to attn_tiled_max_cells) whose f32 K and V fit the shared
    // memory; 0 when not even one does.
    uint32_t attn_tile_cells(uint32_t dk, uint32_t dv) const;
};

}  // namespace kvrt::ops
