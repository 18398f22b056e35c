/*
 * kvrt_state.h: saving and loading a kvrt cache's state (a whole cache or
 * one sequence, to memory or to a file) and host swap of sequences.
 *
 * kvrt.h includes this header, so applications include kvrt.h only; it
 * follows kvrt.h's conventions (structs, results, threading).
 */
#ifndef KVRT_STATE_H
#define KVRT_STATE_H

#include "kvrt/kvrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ========================================================================== */
/* State: save, load, host swap                                               */
/* ========================================================================== */

/* A state is the cells of a whole cache, or of one sequence, as bytes: a
 * header with a magic, the format version, the geometry, the K and V types
 * (and static scales), then each cell's position and sequences, each layer's
 * K and V rows in the stored type, bit for bit, and an XXH3-64 checksum. The
 * format is documented byte for byte in state-format.md, installed with the
 * headers in share/doc/kvrt/ (docs/ of the source distribution); it is
 * little-endian on every platform.
 *
 * - Saving applies pending RoPE shifts first (kvrt_cache_apply_shifts), so
 *   saved K is rotated to the saved positions (a deferred-RoPE cache saves K
 *   before rotation and says so).
 * - Loading is strict: every length is checked against the bytes that remain
 *   before anything is allocated, and anything malformed (truncated or
 *   trailing bytes, a bad magic, unknown fields, a checksum mismatch) fails
 *   with KVRT_ERROR_CORRUPT_STATE and a message that names the field and its
 *   offset. Every format version up to the library's loads; a newer one
 *   fails with KVRT_ERROR_UNSUPPORTED.
 * - Loading is all or nothing: a failed load leaves every cell, position,
 *   sequence and row of the cache as it was (also on a device failure before
 *   the device ran the load's work; a synchronous wait that times out keeps
 *   the load, whose work completes later).
 * - A state loads into a cache of the same n_layers, n_kv_heads, head dims
 *   and RoPE mode (deferred or not), whatever its K/V types, layout and
 *   capacity: rows of the cache's type (and scales) are copied bit for bit,
 *   others are converted on the host to f32 and quantized by the cache's
 *   store kernels, exactly as kvrt_cache_store quantizes f32 values. Into the
 *   static layout each sequence gets its newest seq_len - 1 tokens, and a
 *   cell shared by several sequences becomes a row of each one's window;
 *   into the paged layout each sequence is appended in position order (see
 *   kvrt_paged.h for how sharing is kept).
 * - A cache with a window group (kvrt_window_layout_desc) saves its
 *   windowed layers' rows only for the cells, and sequences, the group
 *   holds (format version 3); such a state loads into a cache of either
 *   layout with the same windowed layers and a window group, and restores
 *   exactly what the group held. A state without a group loads into such a
 *   cache too (every cell takes a group cell). */

/* Saves the state of sequence `seq`, or of the whole cache when seq is -1.
 * With `data` NULL, writes the state's size in bytes to *size and changes
 * nothing. Otherwise applies pending shifts and writes the state into
 * data[0, *size) and its size to *size. Synchronous. Fails with
 * KVRT_ERROR_INVALID_HANDLE; KVRT_ERROR_INVALID_ARGUMENT for a NULL `size`,
 * `seq` below -1 or out of range, or *size below the state's size ("buffer
 * too small"; nothing is written, *size is unchanged); and the device errors
 * of kvrt_cache_read_raw. On failure the bytes of `data` are undefined.
 * Thread-safety: Unsafe. */
KVRT_API kvrt_result kvrt_cache_state_save(kvrt_cache cache, int32_t seq, void* data, uint64_t* size);

/* Loads a state from `size` bytes at `data`: with seq -1 a whole-cache
 * state, which replaces every cell of the cache (the saved cells are used
 * when the cache has them, else the lowest cells in the saved order); with
 * seq >= 0 a sequence state, which replaces the tokens of sequence `seq`
 * (whatever sequence it was saved from; into the saved cells when they are
 * all free, else into the lowest cells that were free before the call, and
 * only when those are too few also into the sequence's own). Pending shifts
 * of the cells that stay are kept. Synchronous; all or nothing. Fails with
 * KVRT_ERROR_INVALID_HANDLE; KVRT_ERROR_INVALID_ARGUMENT for a NULL `data`
 * with size > 0, `seq` below -1 or out of range, a sequence state with seq
 * -1 or a whole-cache state with seq >= 0, a state of another geometry or
 * RoPE mode, sequence ids the cache does not have, or a window group's
 * state into a cache without the same group;
 * KVRT_ERROR_CORRUPT_STATE for malformed bytes; KVRT_ERROR_UNSUPPORTED for a
 * newer format version; KVRT_ERROR_CACHE_FULL when the cells do not fit;
 * and the device errors of kvrt_cache_store. Thread-safety: Unsafe. */
KVRT_API kvrt_result kvrt_cache_state_load(kvrt_cache cache, int32_t seq, const void* data, uint64_t size);

/* Saves the state of `seq` (-1: the whole cache) into the file `path`,
 * atomically: the bytes go to a temporary file beside it, which is flushed
 * to the disk and then renamed over `path`, so that a crash or a failure at
 * any point leaves either the old file or the new one, never a mix (a
 * failure removes the temporary file). Fails like kvrt_cache_state_save,
 * with KVRT_ERROR_INVALID_ARGUMENT for a NULL or empty `path`, and with
 * KVRT_ERROR_IO when the file cannot be written. Thread-safety: Unsafe. */
KVRT_API kvrt_result kvrt_cache_state_save_file(kvrt_cache cache, int32_t seq, const char* path);

/* Loads the state in the file `path` as kvrt_cache_state_load loads bytes.
 * Fails like it, with KVRT_ERROR_INVALID_ARGUMENT for a NULL or empty
 * `path`, and with KVRT_ERROR_IO when the file cannot be read.
 * Thread-safety: Unsafe. */
KVRT_API kvrt_result kvrt_cache_state_load_file(kvrt_cache cache, int32_t seq, const char* path);

/* Host swap: moves sequence `seq` out of the cache into host memory, as a
 * sequence state (kvrt_cache_state_save), then removes it from the cache
 * (kvrt_cache_seq_rm(cache, seq, -1, -1)). With `data` NULL, writes the size
 * to *size and changes nothing. The cell and paged layouts allocate their
 * rows up front, so swapping out returns no device memory: it frees the
 * sequence's cells (or blocks) for other sequences. kvrt_cache_seq_swap_in
 * brings it back; in the cell layout, when its cells are still free it
 * returns to them, and attention then gives the same outputs, bit for bit,
 * as before the swap (the paged layout appends it into blocks the pool
 * chooses: the same rows, attended in another cell order). Fails like
 * kvrt_cache_state_save, and with KVRT_ERROR_INVALID_ARGUMENT for a negative
 * `seq`; on failure the sequence stays in the cache. Thread-safety: Unsafe. */
KVRT_API kvrt_result kvrt_cache_seq_swap_out(kvrt_cache cache, int32_t seq, void* data, uint64_t* size);

/* kvrt_cache_seq_swap_out into the file `path` (written atomically, as
 * kvrt_cache_state_save_file writes). Fails like both.
 * Thread-safety: Unsafe. */
KVRT_API kvrt_result kvrt_cache_seq_swap_out_file(kvrt_cache cache, int32_t seq, const char* path);

/* Brings a swapped-out sequence back into sequence `seq`, which must hold no
 * token: kvrt_cache_state_load(cache, seq, data, size) otherwise. Fails like
 * it, and with KVRT_ERROR_INVALID_ARGUMENT for a negative `seq` or a
 * sequence that holds tokens. Thread-safety: Unsafe. */
KVRT_API kvrt_result kvrt_cache_seq_swap_in(kvrt_cache cache, int32_t seq, const void* data, uint64_t size);

/* kvrt_cache_seq_swap_in from the file `path`. Fails like it and like
 * kvrt_cache_state_load_file. Thread-safety: Unsafe. */
KVRT_API kvrt_result kvrt_cache_seq_swap_in_file(kvrt_cache cache, int32_t seq, const char* path);

#ifdef __cplusplus
}
#endif

#endif /* KVRT_STATE_H */
