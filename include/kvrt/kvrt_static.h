/*
 * kvrt_static.h: kvrt's static padded layout (KVRT_LAYOUT_STATIC), the
 * fixed windows that NPU and DSP graphs bind in either of two styles, their
 * counters, the export of their memory to other processes and processors,
 * and the copy of a sequence between caches of any two layouts.
 *
 * kvrt.h includes this header, so applications include kvrt.h only; it
 * follows kvrt.h's conventions (structs, results, threading).
 */
#ifndef KVRT_STATIC_H
#define KVRT_STATIC_H

#include "kvrt/kvrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ========================================================================== */
/* Static padded layout (NPU/DSP interop)                                     */
/* ========================================================================== */

/* A cache created with KVRT_LAYOUT_STATIC keeps, for each sequence and each
 * (layer, KV head), a K buffer region and a V buffer region of
 * ceil(R * (S-1)) rows of head_dim values (S = seq_len, R = reserve, rows
 * packed back to back: row_stride = head_dim * element size). The window is
 * S-1 consecutive rows of the region, bound by a static graph as its
 * [1,1,S-1,D] past tensor. Its rows follow one of two styles
 * (kvrt_static_style_desc, chosen at creation):
 *
 * - Shift pointer (KVRT_STATIC_STYLE_SHIFT_POINTER, the default): the window
 *   is left-padded: its n_valid valid rows are its LAST n_valid rows, oldest
 *   first, and the mask excludes the others. It moves through the region as
 *   described below.
 * - Smart mask (KVRT_STATIC_STYLE_SMART_MASK; the style of ExecuTorch's
 *   StaticAttentionIOManager and Qualcomm's llama runners): R = 1, the window
 *   is the whole region and never moves, so a graph binds the same offset
 *   at every step. Rows form a ring: the k-th token appended to an empty
 *   sequence goes to row k mod (S-1). While the ring fills, the valid rows
 *   are rows 0..n_valid-1 (right-padded; the mask opens from the left);
 *   once full, each new token overwrites the oldest row. Valid rows are
 *   n_valid consecutive rows of the ring, oldest first, wrapping past row
 *   S-2 to row 0; the mask marks them. kvrt_cache_store and kvrt_cache_place
 *   write after the newest row (never a copy); removing the oldest or the
 *   newest rows changes metadata only, and a range in the middle copies the
 *   smaller side across the gap (synchronous, as below). Store only the
 *   tokens a step accepted (a graph's draft rows stay in its own output):
 *   in a full ring, a stored row overwrites the oldest, and removing it
 *   again does not bring that row back. There is no room after the window
 *   (kvrt_cache_static_make_room refuses). A sequence's windows of one
 *   layer lie head after head in one VkBuffer (head h's offset = head 0's +
 *   h * bytes), so a graph that takes one [1, H, S-1, D] tensor per layer
 *   binds it at head 0's offset. (So do the shift pointer's with R = 1,
 *   whose windows always start at their region's first row; with R > 1 the
 *   heads' windows are ceil(R*(S-1)) rows apart and such a graph takes one
 *   [1, 1, S-1, D] tensor per head.) Everything else below holds for both
 *   styles unless it says otherwise.
 *
 * - K and V types: F32, F16, KVRT_TYPE_U8_STATIC or KVRT_TYPE_U16_STATIC
 *   (what static graphs bind); the block-quantized types (Q8_0, Q4_0) are
 *   refused at creation with KVRT_ERROR_INVALID_ARGUMENT.
 * - kvrt_cache_store / kvrt_cache_place append: each token belongs to exactly
 *   one sequence, a sequence's positions must increase (within the batch and
 *   past the ones it holds), and at most S-1 tokens of a sequence per call.
 *   Shift pointer: appending writes the new rows after the window and
 *   advances it (no bytes move); when the region runs out, one copy first
 *   moves the rows that stay
 *   in the window to the region's start (never re-quantized: bit-identical),
 *   and the oldest rows fall out. A call appending n rows to a sequence,
 *   2 <= n <= (ceil(R*(S-1)) - (S-1)) / 4, restarts its window n rows in, so
 *   that removing those rows again (rejected draft tokens) needs no copy.
 *   The cache is never full.
 * - A cell of this layout is a row: cell = seq * ceil(R*(S-1)) + row. Cells
 *   move when the window slides, so cells returned by store/place are valid
 *   for kvrt_cache_write / kvrt_cache_read until the sequence's next append
 *   or removal.
 * - kvrt_cache_seq_rm removes any range; the rows left keep their order.
 *   Shift pointer: they stay the window's last rows; dropping the oldest
 *   rows, or dropping the newest k rows (rejected draft tokens) while the
 *   window starts k or more rows into the region, changes metadata only: the
 *   mask or the window's offset moves. Otherwise one copy per sequence (in
 *   the smart-mask style, up to three where the ring wraps) moves the smaller side
 *   (the survivors of a suffix removal to the region's start): it is
 *   synchronous, on the cache's own submission, so work already recorded
 *   for the sequence into a stream not yet submitted must be submitted first;
 *   the removal is all or nothing (a failed copy leaves windows and rows as
 *   they were; KVRT_ERROR_TIMEOUT keeps it, as the copy completes later).
 *   kvrt_cache_discard_for_reevaluation removes the suffix from n_keep on.
 *   seq_keep, clear, pos_min/max and attention work as in the cell layout;
 *   compaction moves nothing. seq_cp, seq_add, seq_div and context shifts
 *   fail with KVRT_ERROR_UNSUPPORTED (positions and windows are the graph's).
 * - If a store's recording is dropped, or its submission fails before the
 *   device ran it, the sequences it appended to get their previous windows
 *   back. Bad input is refused before anything is recorded and changes
 *   nothing, as everywhere; a store that fails later, while recording into
 *   a stream (out of host or device memory, a lost device), leaves that
 *   recording unsubmittable (kvrt_stream_submit fails with
 *   KVRT_ERROR_INVALID_STATE and drops it), as a slide copy may be in it.
 *   A synchronous store that fails with KVRT_ERROR_TIMEOUT keeps its
 *   append: the work was submitted and completes later.
 * - The same tokens give the same attention results as in the cell layout.
 * - kvrt_cache_get_info reports capacity = max_seqs * (S-1), used = the
 *   valid rows of all windows, and fragmentation 0. kvrt_cache_seq_transfer
 *   and the state (kvrt_state.h) carry tokens in position order, so a
 *   sequence or state moves between the two styles and the other layouts.
 * - Creation fails with KVRT_ERROR_UNSUPPORTED when one sequence's region of
 *   all KV heads of one layer (n_kv_heads * ceil(R*(S-1)) * row_stride bytes)
 *   exceeds the device's largest storage binding (the kernels bind it whole),
 *   and with KVRT_ERROR_INVALID_ARGUMENT for S < 2, R < 1 (or not finite), R
 *   other than 0 or 1 in the smart-mask style, an unknown style, a
 *   capacity other than 0, a row_stride that is not a multiple of 4, or
 *   more than 2^30 reserved rows in all (max_seqs * ceil(R*(S-1)); checked
 *   first, so a region that large fails with this code). */

/* How a static layout's windows take new rows (kvrt_static_style_desc): the
 * two KV-cache styles of static-graph engines (ExecuTorch's static
 * attention, Qualcomm's llama runners). See kvrt_static.h. */
typedef enum kvrt_static_style {
    /* The window slides through a region of ceil(R*(S-1)) rows: left-padded,
     * new rows after it, one copy when the region runs out (the default). */
    KVRT_STATIC_STYLE_SHIFT_POINTER = 0,
    /* The window is the whole region of S-1 rows and never moves: new rows
     * go to a ring position, right-padded while it fills, the mask opening
     * from the left ("smart mask"). reserve must be 0 or 1. */
    KVRT_STATIC_STYLE_SMART_MASK = 1,
    KVRT_STATIC_STYLE_MAX_ENUM = 0x7FFFFFFF
} kvrt_static_style;

/* The style of a static layout, chained on kvrt_cache_desc.next beside its
 * kvrt_static_layout_desc (KVRT_ERROR_INVALID_ARGUMENT on a cache of another
 * layout). Without it: KVRT_STATIC_STYLE_SHIFT_POINTER. */
typedef struct kvrt_static_style_desc {
    kvrt_struct_type type;   /* KVRT_STRUCT_TYPE_STATIC_STYLE_DESC */
    const void* next;
    kvrt_static_style style;
} kvrt_static_style_desc;

#define KVRT_STATIC_STYLE_DESC_INIT { KVRT_STRUCT_TYPE_STATIC_STYLE_DESC, NULL, KVRT_STATIC_STYLE_SHIFT_POINTER }

/* Where one window lies (kvrt_cache_static_get_window). */
typedef struct kvrt_static_window {
    kvrt_struct_type type;    /* KVRT_STRUCT_TYPE_STATIC_WINDOW */
    const void* next;
    /* The buffer holding the window: owned by the cache and valid until it is
     * destroyed (kvrt_buffer_destroy refuses it). It holds every sequence's
     * regions of one (layer, K|V); kvrt_buffer_get_vulkan gives its VkBuffer
     * for `offset` (a window never crosses one of its VkBuffers). */
    kvrt_buffer buffer;
    KVRT_ALIGN8 uint64_t offset;          /* bytes to the window's first row (row 0 of [1,1,S-1,D]);
                               * the region's first row in the smart-mask style */
    KVRT_ALIGN8 uint64_t row_stride;      /* bytes between rows: head_dim * element size */
    KVRT_ALIGN8 uint64_t bytes;           /* (S-1) * row_stride */
    uint32_t rows;            /* S-1 */
    uint32_t n_valid;         /* valid rows: the window's last n_valid rows (shift
                               * pointer), or n_valid rows of the ring (smart mask) */
    int32_t pos_first;        /* position of the oldest valid row; -1 when empty */
    int32_t pos_last;         /* position of the newest valid row; -1 when empty */
    kvrt_type element_type;   /* the array's stored type */
    /* The layer's quantization for static-scale types (value = scale *
     * (q - zero_point)); 0 and 0 for the other types. */
    float scale;
    int32_t zero_point;
} kvrt_static_window;

#define KVRT_STATIC_WINDOW_INIT \
    { KVRT_STRUCT_TYPE_STATIC_WINDOW, NULL, NULL, 0, 0, 0, 0, 0, -1, -1, KVRT_TYPE_UNDEFINED, 0.0f, 0 }

/* Describes the current window of `seq` for (`layer`, `kv_head`, `array`).
 * The offset moves with every append (one row per token), slide (back near
 * the region's start) and removal: ask again after each store and removal,
 * or bind per step. Fails with KVRT_ERROR_INVALID_HANDLE for a bad cache;
 * KVRT_ERROR_INVALID_ARGUMENT for a NULL, mistyped or badly chained `out`, a
 * cache of another layout, an unknown sequence, a layer or head out of range,
 * or an undefined array.
 * Thread-safety: Unsafe (on the cache). */
KVRT_API kvrt_result kvrt_cache_static_get_window(kvrt_cache cache, int32_t seq, int32_t layer, uint32_t kv_head,
                                                  kvrt_kv_array array, kvrt_static_window* out);

/* Writes the attention mask of `seq`'s next step: S entries, entry i < S-1
 * for window row i (0 when valid, -inf when padding: the first
 * S-1-n_valid entries in the shift-pointer style; the rows outside the ring's
 * valid run in the smart-mask style), entry S-1 for the step's own new token (0). It is the
 * same for every layer and head. `element_type` is KVRT_TYPE_F32 (floats) or
 * KVRT_TYPE_F16 (IEEE half bits: 0x0000 and 0xFC00); `out_bytes` must hold S
 * entries. Fails with KVRT_ERROR_INVALID_HANDLE for a bad cache;
 * KVRT_ERROR_INVALID_ARGUMENT for another element type, a NULL `out` or
 * `out_bytes` too small, a cache of another layout or an unknown sequence.
 * Thread-safety: Unsafe. */
KVRT_API kvrt_result kvrt_cache_static_get_mask(kvrt_cache cache, int32_t seq, kvrt_type element_type, void* out,
                                                uint64_t out_bytes);

/* How a graph's mask says "attend" and "masked" (kvrt_static_mask_desc):
 * the encodings the DSP graphs of static-layout engines take. */
typedef enum kvrt_mask_format {
    /* float entries added to the scores: 0 attend, -inf masked (or
     * `masked_value` with KVRT_MASK_FINITE). */
    KVRT_MASK_F32 = 0,
    /* IEEE half entries: 0x0000 attend, 0xFC00 (-inf) masked (or
     * `masked_value` rounded to half with KVRT_MASK_FINITE; a value below
     * -65504 rounds to -inf). */
    KVRT_MASK_F16 = 1,
    /* uint16 entries: 65535 attend, 0 masked (a quantized mask, as uint16
     * graphs of Qualcomm's runners take it). */
    KVRT_MASK_U16 = 2,
    KVRT_MASK_FORMAT_MAX_ENUM = 0x7FFFFFFF
} kvrt_mask_format;

/* kvrt_static_mask_desc.flags: masked entries of KVRT_MASK_F32 and
 * KVRT_MASK_F16 hold `masked_value`, not -inf (graphs that keep their
 * scores finite, such as the -65535 of Qualcomm's float masks). */
#define KVRT_MASK_FINITE 0x1u

/* The mask a graph takes (kvrt_cache_static_get_graph_mask). */
typedef struct kvrt_static_mask_desc {
    kvrt_struct_type type;    /* KVRT_STRUCT_TYPE_STATIC_MASK_DESC */
    const void* next;
    kvrt_mask_format format;
    uint32_t flags;           /* KVRT_MASK_FINITE or 0 */
    /* With KVRT_MASK_FINITE: the masked entries' value, finite and below 0. */
    float masked_value;
    /* New tokens per step: 1 for a decode graph (0 means 1), N for a graph
     * of N new rows (1 <= N <= S-1). */
    uint32_t n_new;
} kvrt_static_mask_desc;

#define KVRT_STATIC_MASK_DESC_INIT { KVRT_STRUCT_TYPE_STATIC_MASK_DESC, NULL, KVRT_MASK_F32, 0, 0.0f, 1 }

/* Writes the mask of `seq`'s next step for a graph that takes N = n_new new
 * tokens per step, in the encoding `desc` names (NULL: a decode graph's f32
 * mask, as kvrt_cache_static_get_mask writes it). The graph's context is S
 * (seq_len) and its past is the window's last S-N rows, which it binds at
 * the window's offset + (N-1) * row_stride (kvrt_cache_static_get_window);
 * N = 1 is the whole window. The mask is N rows of S entries, row-major;
 * row j (the step's new token j) holds:
 *   entries 0..S-N-1: the past rows, attended where valid (the last
 *     min(n_valid, S-N) of them), masked where padding;
 *   entries S-N..S-1: the step's new tokens 0..N-1, attended up to token j
 *     (causal), masked after it.
 * After the graph ran, kvrt_cache_store appends the N tokens' rows.
 * In the smart-mask style the graph's past is the whole window (its cache
 * input of S-1 rows, bound at the window's offset, whatever N): row j holds
 * S-1+N entries, entries 0..S-2 the window's rows (attended where the ring
 * holds a valid row), then the N new tokens, causal, as ExecuTorch's
 * StaticAttentionMask lays out [1, N, cache_len + N]. With
 * n_new = 1 and KVRT_MASK_F32 or KVRT_MASK_F16 and no flags it is exactly
 * kvrt_cache_static_get_mask's mask. `out_bytes` must hold N * S entries
 * (N * (S-1+N) in the smart-mask style; 4
 * bytes each for KVRT_MASK_F32, 2 for the others). Fails with
 * KVRT_ERROR_INVALID_HANDLE for a bad cache; KVRT_ERROR_INVALID_ARGUMENT for
 * a mistyped or badly chained `desc`, an unknown format or flag, a
 * masked_value that is not finite and below 0 (with KVRT_MASK_FINITE), an
 * n_new above S-1, a NULL `out` or `out_bytes` too small, a cache of another
 * layout or an unknown sequence.
 * Thread-safety: Unsafe. */
KVRT_API kvrt_result kvrt_cache_static_get_graph_mask(kvrt_cache cache, int32_t seq,
                                                      const kvrt_static_mask_desc* desc, void* out,
                                                      uint64_t out_bytes);

/* Makes room for `n_rows` rows right after `seq`'s window, so that a graph
 * can write the K and V rows of its next tokens there in place (as the
 * shift-pointer graphs of Qualcomm's flow write each new row after the
 * window) and kvrt_cache_place then takes them with no copy and no store.
 * The rows after the window: for each (layer, KV head, K|V), row i of the
 * new tokens at the window's offset + (S-1 + i) * row_stride, in the
 * array's stored type (a static-scale type with the layer's scale and zero
 * point), head_dim values, as kvrt_cache_static_get_window describes it once
 * this call returned. The steps of one decode or draft step:
 *
 *   1. kvrt_cache_static_make_room(cache, seq, n): where the region lacks n
 *      rows after the window, the window's valid rows are copied to the
 *      region's start first (synchronous, on the cache's own submission:
 *      work already recorded for the sequence into a stream not yet
 *      submitted must be submitted first); ask for the windows after it.
 *   2. The graph reads the window and writes its tokens' rows after it.
 *   3. kvrt_cache_place with the accepted tokens, in order: the first k <= n
 *      of the rows written become the window's newest rows (metadata only).
 *      Rejected draft rows are never placed, so the window keeps its S-1
 *      valid rows; a store or place of more rows than the room made may
 *      slide, and then moves only the rows already in the window.
 *
 * Fails with KVRT_ERROR_INVALID_HANDLE for a bad cache;
 * KVRT_ERROR_INVALID_ARGUMENT for a cache of another layout or of the
 * smart-mask style (its window is its whole region), an unknown
 * sequence, or n_rows 0 or above ceil(R*(S-1)) - (S-1) (the room a region
 * has beyond its window; R = 1 has none); the copy's errors
 * (KVRT_ERROR_OUT_OF_DEVICE_MEMORY, KVRT_ERROR_DEVICE_LOST, ...) leave the
 * window as it was, and KVRT_ERROR_TIMEOUT keeps the move (the copy
 * completes later).
 * Thread-safety: Unsafe (on the cache). */
KVRT_API kvrt_result kvrt_cache_static_make_room(kvrt_cache cache, int32_t seq, uint32_t n_rows);

/* Counters of the windows' movement (kvrt_cache_static_get_stats). */
typedef struct kvrt_static_stats {
    kvrt_struct_type type;    /* KVRT_STRUCT_TYPE_STATIC_STATS */
    const void* next;
    KVRT_ALIGN8 uint64_t rows_appended;   /* tokens appended */
    KVRT_ALIGN8 uint64_t slides;          /* slides and partial removals that copied rows */
    KVRT_ALIGN8 uint64_t rows_moved;      /* rows they copied per (layer, KV head, K|V) region */
    KVRT_ALIGN8 uint64_t bytes_moved;     /* device bytes they copied, over all layers,
                               * heads, K and V */
} kvrt_static_stats;

#define KVRT_STATIC_STATS_INIT { KVRT_STRUCT_TYPE_STATIC_STATS, NULL, 0, 0, 0, 0 }

/* Reads the counters of `seq`, or of every sequence together when seq < 0.
 * They count since creation (or since all of the sequence's tokens were last
 * removed) and include appends still recorded in a stream. Fails with
 * KVRT_ERROR_INVALID_HANDLE for a bad cache; KVRT_ERROR_INVALID_ARGUMENT for
 * a NULL, mistyped or badly chained `out`, a cache of another layout or an
 * unknown sequence.
 * Thread-safety: Unsafe. */
KVRT_API kvrt_result kvrt_cache_static_get_stats(kvrt_cache cache, int32_t seq, kvrt_static_stats* out);

/* ========================================================================== */
/* Sharing memory with other processes and processors                         */
/* ========================================================================== */

/* How exported memory is handed over (kvrt_buffer_export_memory). */
typedef enum kvrt_memory_handle_type {
    KVRT_MEMORY_HANDLE_UNDEFINED = 0,
    /* A POSIX file descriptor of Vulkan's opaque type
     * (VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT): imported by another
     * Vulkan instance, in this process or another, on a device with the same
     * device and driver UUIDs, with the same allocation size and memory type
     * index (VkImportMemoryFdInfoKHR). */
    KVRT_MEMORY_HANDLE_OPAQUE_FD = 1,
    /* A Linux dma-buf file descriptor
     * (VK_EXTERNAL_MEMORY_HANDLE_TYPE_DMA_BUF_BIT_EXT): mapped by other
     * processors and drivers, such as a DSP through Android's rpcmem and
     * QnnMem_register; on devices with VK_EXT_external_memory_dma_buf. */
    KVRT_MEMORY_HANDLE_DMA_BUF = 2,
    KVRT_MEMORY_HANDLE_TYPE_MAX_ENUM = 0x7FFFFFFF
} kvrt_memory_handle_type;

/* Where a byte of an exported buffer lies (kvrt_buffer_export_memory). A
 * kvrt buffer is made of pieces, each its own device memory allocation; one
 * export describes the allocation holding the byte asked for. */
typedef struct kvrt_exported_memory {
    kvrt_struct_type type;    /* KVRT_STRUCT_TYPE_EXPORTED_MEMORY */
    const void* next;
    /* A new file descriptor of the allocation, owned by the caller: close()
     * it, or hand it to an importer that takes ownership of it. */
    int32_t fd;
    /* The allocation's memory type index, which an opaque-fd import uses. */
    uint32_t memory_type_index;
    /* The allocation's size in bytes (an import's allocationSize; the bytes
     * to map of a dma-buf). */
    KVRT_ALIGN8 uint64_t memory_size;
    /* The byte asked for is at this offset in the allocation ... */
    KVRT_ALIGN8 uint64_t offset;
    /* ... and this many bytes of the buffer follow it there contiguously. */
    KVRT_ALIGN8 uint64_t contiguous_bytes;
    /* VkPhysicalDeviceIDProperties of kvrt's device: an opaque-fd importer's
     * device must have the same two. */
    uint8_t device_uuid[16];
    uint8_t driver_uuid[16];
} kvrt_exported_memory;

#define KVRT_EXPORTED_MEMORY_INIT \
    { KVRT_STRUCT_TYPE_EXPORTED_MEMORY, NULL, -1, 0, 0, 0, 0, {0}, {0} }

/* Exports the device memory holding byte `offset` of `buffer` as a file
 * descriptor of `handle_type`, so that another process, driver or processor
 * maps the same bytes: no copy is made, and later writes by kvrt are seen
 * there (and the other way round). The buffer must have been created with
 * KVRT_BUFFER_EXPORTABLE, or belong to a cache created with
 * KVRT_CACHE_EXPORTABLE (kvrt_static_window.buffer): for a static-layout
 * window pass window.offset; the window lies whole in the allocation
 * (contiguous_bytes >= window.bytes).
 *
 * Ordering is the application's: kvrt's writes are complete once the call
 * that made them returned (synchronous calls) or its stream's wait did; the
 * other side reads after that, and kvrt reads what the other side wrote
 * only from calls made after the other side's writes completed. kvrt records
 * no queue-family ownership transfer: its buffers are linear, uncompressed
 * memory. On a device whose memory is not coherent with the other
 * processor (a dma-buf on some phones), the other side also does the
 * dma-buf's own cache maintenance (DMA_BUF_IOCTL_SYNC, rpcmem). The memory
 * stays allocated while an exported descriptor or an import of it is open,
 * but kvrt may reuse or change its bytes for as long as the buffer lives.
 *
 * Fails with KVRT_ERROR_INVALID_HANDLE for a bad buffer;
 * KVRT_ERROR_INVALID_ARGUMENT for a NULL, mistyped or badly chained `out`,
 * an offset outside the buffer or an undefined or unknown handle type;
 * KVRT_ERROR_UNSUPPORTED for a buffer not allocated exportable, a handle
 * type the device does not export (dma-buf needs
 * VK_EXT_external_memory_dma_buf), a context imported from the application
 * (kvrt_context_import_vulkan: the application allocates exportable memory
 * itself and wraps it with kvrt_buffer_import_vulkan) or a platform without
 * file descriptors; KVRT_ERROR_OUT_OF_HOST_MEMORY when no descriptor is
 * left. `out` is written only on success.
 * Thread-safety: Safe, except against kvrt_buffer_destroy of the buffer (or
 * kvrt_cache_destroy of its cache). */
KVRT_API kvrt_result kvrt_buffer_export_memory(kvrt_buffer buffer, uint64_t offset,
                                               kvrt_memory_handle_type handle_type,
                                               kvrt_exported_memory* out);

/* ========================================================================== */
/* Moving a sequence between caches                                           */
/* ========================================================================== */

/* Copies sequence `src_seq` of `src` into sequence `dst_seq` of `dst`, which
 * must hold no token: positions and rows, bit for bit, between any two
 * layouts (cells to static, static to cells, or the same layout). The caches
 * must belong to one context and have the same n_layers, n_kv_heads, head
 * dims, K and V types (and scales), and RoPE mode (deferred or not); pending
 * RoPE shifts of `src` are applied first. A static `dst` receives the newest
 * S-1 tokens when `src_seq` holds more; a cell `dst` receives all of them or
 * fails with KVRT_ERROR_CACHE_FULL. `out_count` (may be NULL) gets the number
 * of tokens copied. Synchronous; all or nothing: on failure `dst` is
 * unchanged. Fails with KVRT_ERROR_INVALID_HANDLE for a bad cache;
 * KVRT_ERROR_INVALID_ARGUMENT for mismatched caches, the same sequence of
 * the same cache, an unknown sequence or a `dst_seq` in use;
 * KVRT_ERROR_CACHE_FULL; and the device errors of kvrt_cache_store.
 * Thread-safety: Unsafe (on both). */
KVRT_API kvrt_result kvrt_cache_seq_transfer(kvrt_cache src, int32_t src_seq, kvrt_cache dst, int32_t dst_seq,
                                             uint32_t* out_count);

#ifdef __cplusplus
}
#endif

#endif /* KVRT_STATIC_H */
