/*
 * kvrt_paged.h: kvrt's paged layout (KVRT_LAYOUT_PAGED): block tables,
 * automatic prefix sharing, copy-on-write forks and least-recently-used reuse
 * of cached blocks.
 *
 * kvrt.h includes this header, so applications include kvrt.h only; it
 * follows kvrt.h's conventions (structs, results, threading).
 */
#ifndef KVRT_PAGED_H
#define KVRT_PAGED_H

#include "kvrt/kvrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ========================================================================== */
/* Paged layout (prefix sharing, copy-on-write)                               */
/* ========================================================================== */

/* A cache created with KVRT_LAYOUT_PAGED holds capacity / B blocks of B
 * tokens (B = block_size; capacity must be a multiple of it). Block b is the
 * cells b*B .. b*B + B-1 of every layer, so cells, kvrt_cache_write,
 * kvrt_cache_read, kvrt_cache_read_raw and kvrt_cache_attention work as in
 * the cell layout, with the same results for the same tokens.
 *
 * - Each sequence has a block table: its token t (in append order) lies in
 *   cell table[t / B] * B + t % B. Tokens come in with
 *   kvrt_cache_paged_admit (a new sequence's prompt), kvrt_cache_paged_append,
 *   or kvrt_cache_store / kvrt_cache_place (each token in exactly one
 *   sequence; appended in batch order, token ids unknown).
 * - A block is registered as soon as a call places its last token, before
 *   its rows are written: write the rows of the cells that
 *   kvrt_cache_paged_admit and kvrt_cache_paged_append return (every layer)
 *   before the next admit, or another sequence may map rows not yet written.
 *   kvrt_cache_store writes the rows in the same call.
 * - Prefix sharing: a block filled by a sequence with sharing on is
 *   registered under its exact token ids and positions, the salt of its
 *   sequence and the registered block before it. kvrt_cache_paged_admit maps
 *   the longest run of registered blocks that equal the start of the prompt
 *   (compared token by token; a hash only finds candidates) and says how
 *   many leading tokens need not be computed. The salt stands for whatever
 *   else decides K and V (model, adapter, RoPE parameters): prompts with
 *   different salts never share. Blocks holding tokens of unknown id
 *   (kvrt_cache_store, kvrt_cache_place) are never registered.
 * - Copy-on-write: kvrt_cache_paged_fork (or kvrt_cache_seq_cp of a whole
 *   sequence into an empty one) shares every block. The first append into a
 *   partly filled block that another sequence also uses copies that block
 *   first (every layer, K and V), so no operation changes what another
 *   sequence sees.
 * - Shifts (kvrt_cache_seq_add) copy every shared block whose positions they
 *   change, then rotate the sequence's own rows at once (the call waits for
 *   the device); shared rows are never rotated in place. With
 *   KVRT_CACHE_DEFERRED_ROPE nothing is rotated. A shift must cover a
 *   suffix of the sequence (every token from some point on, in append
 *   order; another range is KVRT_ERROR_UNSUPPORTED), and no position may
 *   become negative (KVRT_ERROR_UNSUPPORTED). If the rotation itself
 *   fails on the device, the call returns that error with the shift made
 *   and its rotation pending (kvrt_cache_apply_shifts or the next attention
 *   applies it), as after a shift in the cell layout.
 * - Blocks no sequence uses keep their rows while registered (cached) and
 *   are reused least recently released first when a new block is needed.
 *   KVRT_ERROR_CACHE_FULL when free plus cached blocks are too few; nothing
 *   changes then.
 * - kvrt_cache_seq_rm removes a suffix of a sequence (or all of it; a
 *   range that leaves tokens after the removed ones is
 *   KVRT_ERROR_UNSUPPORTED, changing nothing); seq_keep, clear, pos_min/max work as in the cell layout; compaction moves
 *   nothing. kvrt_cache_discard_for_reevaluation removes the suffix from
 *   n_keep on, as in the cell layout (shared blocks stay with the other
 *   sequences). seq_div and context shifts fail with KVRT_ERROR_UNSUPPORTED
 *   (they move or remove the middle of a sequence).
 * - State (kvrt_state.h) and kvrt_cache_seq_transfer work as in the cell
 *   layout (states of a paged cache are format version 2). A loaded or
 *   transferred sequence gets its tokens appended in rising position order
 *   (saved order among equal positions) into blocks of its own, holding no
 *   token ids, so never registered. A whole-cache load clears the registry
 *   and keeps the state's sharing where blocks allow: a sequence whose first
 *   tokens are the same saved cells as an earlier sequence's shares that
 *   one's blocks for as many whole blocks as those tokens fill.
 * - Token trees (kvrt_batch_tree): stored with kvrt_cache_store (appended
 *   in batch order) and attended as in the cell layout. kvrt_cache_tree_accept
 *   needs the tree's tokens to be their sequence's last tokens, in batch
 *   order, in blocks no fork shares (else KVRT_ERROR_UNSUPPORTED): it moves
 *   the kept tokens' rows down over the dropped ones (on the device, waiting
 *   for it) and cuts the sequence after them.
 * - kvrt_cache_get_info: capacity, used (cells that some sequence sees) and
 *   fragmentation 0; kvrt_cache_paged_get_stats gives the block counts.
 * - Windowed layers (kvrt_cache_desc.layer_windows) keep a row per cell of
 *   the pool unless a kvrt_window_layout_desc is chained: then they keep
 *   about their window per sequence in a group of their own (see
 *   kvrt_window_layout_desc in kvrt.h for what changes: admit may map fewer
 *   blocks; tree acceptance is refused).
 * - Failure: a call that fails changes no sequence; cached blocks evicted
 *   to make room may stay evicted. If a kvrt_cache_store or
 *   kvrt_cache_paged_append recorded into a stream is dropped (or its
 *   submission fails), each sequence it extended is cut back to its previous
 *   length, or, when the call copied the sequence's shared last block, to
 *   the start of that block; blocks it wrote are unregistered. Rows that
 *   were never written are never visible. */

/* The block size of a paged layout, chained on kvrt_cache_desc.next
 * (optional: without it B = 16). */
typedef struct kvrt_paged_layout_desc {
    kvrt_struct_type type;   /* KVRT_STRUCT_TYPE_PAGED_LAYOUT_DESC */
    const void* next;
    uint32_t block_size;     /* tokens per block: 16, 32 or 64; 0 = 16 */
} kvrt_paged_layout_desc;

#define KVRT_PAGED_LAYOUT_DESC_INIT { KVRT_STRUCT_TYPE_PAGED_LAYOUT_DESC, NULL, 0 }

/* Block counts of a paged cache (kvrt_cache_paged_get_stats). free + cached
 * + used = n_blocks. */
typedef struct kvrt_paged_stats {
    kvrt_struct_type type;   /* KVRT_STRUCT_TYPE_PAGED_STATS */
    const void* next;
    uint32_t block_size;
    uint32_t n_blocks;
    uint32_t free_blocks;       /* used by no sequence and not registered */
    uint32_t cached_blocks;     /* used by no sequence, registered: reusable by admit */
    uint32_t used_blocks;       /* in some sequence's block table */
    uint32_t registered_blocks; /* in the prefix registry (cached or used) */
    uint32_t shared_blocks;     /* in more than one block table entry */
} kvrt_paged_stats;

#define KVRT_PAGED_STATS_INIT { KVRT_STRUCT_TYPE_PAGED_STATS, NULL, 0, 0, 0, 0, 0, 0, 0 }

/* Starts the EMPTY sequence `seq` with a prompt of n_tokens tokens (ids and
 * positions; ids >= 0) under `salt`. With sharing on (the default), maps the
 * longest run of registered blocks matching the prompt's start, always
 * leaving at least one token to compute (the engine needs its logits), and
 * writes to *out_n_cached how many leading tokens are cached (a multiple of
 * the block size). The remaining tokens are placed as by
 * kvrt_cache_paged_append. out_cells (may be NULL) receives the cell of
 * every token of the prompt: the engine writes the rows of tokens
 * *out_n_cached .. n_tokens-1 with kvrt_cache_write (every layer) and may
 * read the others. With a window group (kvrt_window_layout_desc), only the
 * leading blocks whose windowed rows the group still holds for the computed
 * tokens' windows are mapped, and KVRT_ERROR_CACHE_FULL also means the group
 * lacks a cell for each computed token. Metadata only: nothing is recorded
 * on the device.
 * Fails with KVRT_ERROR_INVALID_HANDLE; KVRT_ERROR_UNSUPPORTED for a cache
 * whose layout is not paged; KVRT_ERROR_INVALID_ARGUMENT for a sequence out of
 * range or not empty, NULL arrays with n_tokens > 0, a negative id or
 * position, or a NULL out_n_cached; KVRT_ERROR_CACHE_FULL;
 * KVRT_ERROR_OUT_OF_HOST_MEMORY. Nothing changes on failure.
 * Thread-safety: Unsafe (on the cache). */
KVRT_API kvrt_result kvrt_cache_paged_admit(kvrt_cache cache, int32_t seq, uint32_t n_tokens,
                                            const int32_t* token_ids, const int32_t* positions, uint64_t salt,
                                            uint32_t* out_n_cached, uint32_t* out_cells);

/* Appends n_tokens tokens (ids, or NULL when unknown, and positions) to the
 * end of `seq` and writes their cells to out_cells (may be NULL); write
 * their rows with kvrt_cache_write. A block this fills is registered when
 * the sequence has sharing on, its ids are known and the block before it is
 * registered. If the sequence's last block is partly filled and shared, it
 * is first copied to a new block, recorded into `stream` (NULL: done and
 * waited for before the call returns). Fails with
 * KVRT_ERROR_INVALID_HANDLE; KVRT_ERROR_UNSUPPORTED for a cache whose layout
 * is not paged; KVRT_ERROR_INVALID_ARGUMENT for a sequence out of range,
 * a NULL positions array with n_tokens > 0, a negative id or position;
 * KVRT_ERROR_INVALID_STATE for a stream that is not recording;
 * KVRT_ERROR_CACHE_FULL; and the device errors of kvrt_cache_store. Nothing
 * changes on failure. Thread-safety: Unsafe (on the cache and the stream). */
KVRT_API kvrt_result kvrt_cache_paged_append(kvrt_cache cache, kvrt_stream stream, int32_t seq, uint32_t n_tokens,
                                             const int32_t* token_ids, const int32_t* positions,
                                             uint32_t* out_cells);

/* Makes the EMPTY sequence `dst` a copy of `src`: the same block table
 * (every block shared, reference counts up), tokens and salt; no data moves.
 * Fails with KVRT_ERROR_INVALID_HANDLE; KVRT_ERROR_UNSUPPORTED for a cache
 * whose layout is not paged; KVRT_ERROR_INVALID_ARGUMENT for sequences out
 * of range, src == dst or a non-empty dst; KVRT_ERROR_OUT_OF_HOST_MEMORY.
 * Thread-safety: Unsafe (on the cache). */
KVRT_API kvrt_result kvrt_cache_paged_fork(kvrt_cache cache, int32_t src, int32_t dst);

/* Turns prefix sharing of `seq` on (enabled != 0) or off (on by default; a removed
 * sequence keeps its setting). Off, the sequence never maps registered
 * blocks in kvrt_cache_paged_admit and never registers the blocks it
 * fills: no other sequence can map its contents (blocks it registered
 * earlier stay registered). Forks of a sequence share its blocks whatever
 * the setting. Fails with KVRT_ERROR_INVALID_HANDLE,
 * KVRT_ERROR_UNSUPPORTED (layout not paged) or KVRT_ERROR_INVALID_ARGUMENT
 * (sequence out of range). Thread-safety: Unsafe (on the cache). */
KVRT_API kvrt_result kvrt_cache_paged_set_sharing(kvrt_cache cache, int32_t seq, uint32_t enabled);

/* Unregisters every block: cached blocks become free and no later admit
 * maps what was stored before; blocks in use stay as they are. Fails with
 * KVRT_ERROR_INVALID_HANDLE or KVRT_ERROR_UNSUPPORTED (layout not paged).
 * Thread-safety: Unsafe (on the cache). */
KVRT_API kvrt_result kvrt_cache_paged_clear_registry(kvrt_cache cache);

/* The cells of tokens first .. first + max_cells - 1 of `seq` (in append
 * order; fewer when the sequence ends before) into out_cells, and the
 * sequence's length in tokens to *out_n_tokens (may be NULL). A copy-on-write
 * moves a sequence's tokens to other cells, so cells returned earlier by
 * kvrt_cache_paged_append or kvrt_cache_paged_admit hold only until the
 * sequence's next append or shift. Fails with KVRT_ERROR_INVALID_HANDLE,
 * KVRT_ERROR_UNSUPPORTED (layout not paged) or KVRT_ERROR_INVALID_ARGUMENT
 * (sequence out of range, NULL out_cells with max_cells > 0).
 * Thread-safety: Unsafe (on the cache). */
KVRT_API kvrt_result kvrt_cache_paged_get_cells(kvrt_cache cache, int32_t seq, uint32_t first, uint32_t max_cells,
                                                uint32_t* out_cells, uint32_t* out_n_tokens);

/* Writes the block counts to *out. Fails with KVRT_ERROR_INVALID_HANDLE,
 * KVRT_ERROR_UNSUPPORTED (layout not paged) or KVRT_ERROR_INVALID_ARGUMENT
 * (NULL or mistyped out). Thread-safety: Unsafe (on the cache). */
KVRT_API kvrt_result kvrt_cache_paged_get_stats(kvrt_cache cache, kvrt_paged_stats* out);

#ifdef __cplusplus
}
#endif

#endif /* KVRT_PAGED_H */
