/*
 * kvrt_memory.h: the fixed-capacity memory of kvrt, a cache whose size never
 * grows. Experimental: everything in this header may change in any minor
 * release (see "Versions, SONAME and experimental parts" in kvrt.h).
 *
 * An application opts in by defining KVRT_EXPERIMENTAL before it includes a
 * kvrt header; kvrt.h then includes this one, so applications include kvrt.h
 * only. It follows kvrt.h's conventions (structs, results, threading).
 */
#ifndef KVRT_MEMORY_H
#define KVRT_MEMORY_H

#ifndef KVRT_EXPERIMENTAL
#error "kvrt_memory.h is experimental: define KVRT_EXPERIMENTAL before including kvrt headers to use it"
#endif

#include "kvrt/kvrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ========================================================================== */
/* Fixed-capacity memory                                                      */
/* ========================================================================== */

/* A fixed-capacity memory (an "MV/MK" memory) is a cache
 * whose size never grows. For each layer and head it holds n_slots keys MK (of
 * key_dim values, fixed at creation) and, for each sequence, n_slots values MV
 * (of value_dim values: the sequence's state). A token with projections wq
 * (key_dim values) and wv (value_dim values) updates its sequence's state:
 *
 *     ww = softmax(MK wq)            (n_slots weights, no scale)
 *     MV = MV + ww (outer) wv
 *
 * and a query q (key_dim values) reads it as attention over MK and MV:
 *
 *     out = softmax(scale * MK q) MV (value_dim values)
 *
 * Memory and time per token are constant however long the input. The tokens
 * of a sequence are processed in chunks of up to chunk_tokens tokens with
 * matrix products and a causal mask; the result equals token-by-token
 * processing, in which a token's read sees the state including its own update.
 *
 * Sequences: ids 0..max_seqs-1 always exist and start in the initial state
 * (MV as given at creation, MK shared by all sequences).
 *
 * All or nothing: every sequence has two state slots per layer. An update
 * reads the current slot and writes only the other one (through a scratch slot
 * when the call needs several chunks) and the current slot changes only when
 * the call succeeded. A call that fails for any reason (bad argument, out of
 * memory, a failed submission, KVRT_ERROR_TIMEOUT, ...) therefore leaves every
 * sequence's state exactly as it was, even if its GPU work completes later.
 *
 * Streams: updates, reads and sequence operations take a stream. With NULL
 * the call records, submits and waits itself (up to the context's wait
 * timeout). With a stream the work is recorded into it and later calls see its
 * effects at once; if the recording is dropped or its submission fails, the
 * memory returns to the state before the recorded calls. Record the work on
 * one memory into one stream at a time and submit it before using the memory
 * with another stream or with NULL.
 *
 * Experimental: this section may change in any minor release. */
typedef struct kvrt_memory_T* kvrt_memory;

/* Where the initial MK or MV values come from. */
typedef enum kvrt_memory_source {
    KVRT_MEMORY_SOURCE_ZERO = 0,   /* all zero (for MK: every slot weighs the same) */
    KVRT_MEMORY_SOURCE_HOST = 1,   /* host memory at `host` */
    KVRT_MEMORY_SOURCE_BUFFER = 2, /* a kvrt_buffer of the same context at `offset` */
    /* Pseudo-random values in [-1, 1) for tests and benchmarks: element i of the
     * layout below is (splitmix64(seed + i) >> 40) * 2^-23 - 1, where
     * splitmix64(x) is the output function of the SplitMix64 generator:
     * z = x + 0x9E3779B97F4A7C15; z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
     * z = (z ^ (z >> 27)) * 0x94D049BB133111EB; return z ^ (z >> 31). */
    KVRT_MEMORY_SOURCE_SEED = 3,
    KVRT_MEMORY_SOURCE_MAX_ENUM = 0x7FFFFFFF
} kvrt_memory_source;

/* Initial values of MK or MV for every layer and head: n_layers * n_heads
 * blocks (layer-major) of n_slots rows of key_dim (MK) or value_dim (MV)
 * values, row-major, with no padding. Copied during kvrt_memory_create. */
typedef struct kvrt_memory_init {
    kvrt_struct_type type;      /* KVRT_STRUCT_TYPE_MEMORY_INIT */
    const void* next;
    kvrt_memory_source source;
    kvrt_type element_type;     /* of host or buffer data: F32 (the INIT) or F16 */
    const void* host;           /* KVRT_MEMORY_SOURCE_HOST */
    kvrt_buffer buffer;         /* KVRT_MEMORY_SOURCE_BUFFER */
    KVRT_ALIGN8 uint64_t offset;            /* bytes into `buffer`; a multiple of 4 */
    KVRT_ALIGN8 uint64_t seed;              /* KVRT_MEMORY_SOURCE_SEED */
} kvrt_memory_init;

#define KVRT_MEMORY_INIT_INIT \
    { KVRT_STRUCT_TYPE_MEMORY_INIT, NULL, KVRT_MEMORY_SOURCE_ZERO, KVRT_TYPE_F32, NULL, NULL, 0, 0 }

typedef struct kvrt_memory_desc {
    kvrt_struct_type type;        /* KVRT_STRUCT_TYPE_MEMORY_DESC */
    const void* next;
    uint32_t n_layers;
    uint32_t n_heads;
    uint32_t n_slots;             /* M: key and value vectors per layer and head */
    uint32_t key_dim;             /* E: size of MK rows, wq and q */
    uint32_t value_dim;           /* D: size of MV rows, wv and outputs; 0 = key_dim */
    uint32_t max_seqs;            /* sequence ids are 0..max_seqs-1; 0 = 1 */
    /* Precision of MV: F32 (the INIT) or F16, which halves the state; it is
     * rounded to f16 at the end of every chunk (and the initial values once). */
    kvrt_type state_type;
    uint32_t chunk_tokens;        /* tokens per chunk, 1..512; 0 = 512. Smaller
                                   * chunks need less working memory. */
    const kvrt_memory_init* keys;   /* MK; NULL = all zero */
    const kvrt_memory_init* values; /* initial MV; NULL = all zero */
    const char* label;            /* debug name for Vulkan tools; may be NULL */
} kvrt_memory_desc;

#define KVRT_MEMORY_DESC_INIT \
    { KVRT_STRUCT_TYPE_MEMORY_DESC, NULL, 0, 0, 0, 0, 0, 0, KVRT_TYPE_F32, 0, NULL, NULL, NULL }

/* A batch of tokens for kvrt_memory_update, _read and _update_read. Tokens of
 * several sequences may be mixed in any order; the tokens of one sequence are
 * processed in batch order. Each tensor holds, for each layer of the call
 * (one, or all of them), n_tokens tokens of n_heads rows of key_dim (wq, q)
 * or value_dim (wv, out) values, addressed as kvrt_tensor_ref and
 * kvrt_output_ref say (F32 or F16; strides must be 0 or the packed ones).
 * The bytes of one layer must lie inside one piece of a buffer (pieces are
 * the context's largest binding, 128 MiB on lavapipe; smaller buffers are one
 * piece). F16 outputs need n_heads * value_dim even. Host outputs need a NULL
 * stream and are written only when the call succeeds; a buffer's bytes
 * outside the output range are never written, inside it they are unspecified
 * after a failed call. */
typedef struct kvrt_memory_batch {
    kvrt_struct_type type;          /* KVRT_STRUCT_TYPE_MEMORY_BATCH */
    const void* next;
    uint32_t n_tokens;              /* >= 1 */
    const int32_t* seq_ids;         /* n_tokens sequence ids; NULL: all in sequence 0 */
    int32_t layer;                  /* a layer, or -1 for all layers */
    const kvrt_tensor_ref* wq;      /* update keys */
    const kvrt_tensor_ref* wv;      /* update values */
    const kvrt_tensor_ref* q;       /* read queries */
    const kvrt_output_ref* out;     /* read outputs */
    float scale;                    /* read scale; 0 = 1/sqrt(key_dim) */
} kvrt_memory_batch;

#define KVRT_MEMORY_BATCH_INIT \
    { KVRT_STRUCT_TYPE_MEMORY_BATCH, NULL, 0, NULL, 0, NULL, NULL, NULL, NULL, 0.0f }

/* Sizes of a memory (kvrt_memory_estimate_size). */
typedef struct kvrt_memory_estimate {
    kvrt_struct_type type;          /* KVRT_STRUCT_TYPE_MEMORY_ESTIMATE */
    const void* next;
    /* The device memory kvrt_memory_create allocates: the keys, two state
     * slots per sequence and layer, the initial values (unless zero) and the
     * working memory of one chunk. It does not depend on how many tokens are
     * ever processed. Calls add only transient upload memory (host inputs, in
     * their stream) and, for reads into host memory, a staging buffer of the
     * outputs. The driver's own allocation rounding is not included. */
    KVRT_ALIGN8 uint64_t device_bytes;
    /* The device bytes of one sequence's state over all layers (one slot),
     * alignment padding included. */
    KVRT_ALIGN8 uint64_t state_bytes_per_seq;
    /* The largest binding the estimate assumed: the context's, capped at
     * 128 MiB (a memory never binds more), or 128 MiB without a context. */
    KVRT_ALIGN8 uint64_t max_binding_bytes;
} kvrt_memory_estimate;

#define KVRT_MEMORY_ESTIMATE_INIT { KVRT_STRUCT_TYPE_MEMORY_ESTIMATE, NULL, 0, 0, 0 }

/* Computes the sizes of a memory for `desc` without allocating anything, as
 * kvrt_cache_estimate_size does for a cache. `context` may be NULL. Fails
 * with KVRT_ERROR_INVALID_HANDLE for a context that is not NULL and not live;
 * KVRT_ERROR_INVALID_ARGUMENT (and writes nothing) for NULL, mistyped or
 * badly chained arguments, an invalid descriptor (the checks of
 * kvrt_memory_create that need no buffer) or sizes that overflow.
 * Thread-safety: Safe. */
KVRT_API kvrt_result kvrt_memory_estimate_size(kvrt_context context, const kvrt_memory_desc* desc,
                                               kvrt_memory_estimate* out);

/* Creates a memory, every sequence in the initial state. Fails with
 * KVRT_ERROR_INVALID_HANDLE for a bad context or initial-data buffer;
 * KVRT_ERROR_INVALID_ARGUMENT for NULL, mistyped or badly chained structs, a
 * zero size, chunk_tokens above 512, an undefined or unknown type or source,
 * missing, misaligned or out-of-range initial data, a buffer of another
 * context, sizes that overflow, or a geometry where one head's keys, state or
 * working memory exceed the largest binding a memory uses (the context's, at
 * most 128 MiB; lower chunk_tokens); KVRT_ERROR_OUT_OF_DEVICE_MEMORY or
 * _OUT_OF_HOST_MEMORY when it does not fit. Nothing stays allocated on
 * failure. Thread-safety: Safe (the initial-data buffer is only read). */
KVRT_API kvrt_result kvrt_memory_create(kvrt_context context, const kvrt_memory_desc* desc,
                                        kvrt_memory* out_memory);

/* Destroys a memory; device memory still used by submitted work is released
 * when that work completes, and recordings that use it can no longer be
 * submitted. NULL is a no-op. Thread-safety: Unsafe (on the memory). */
KVRT_API void kvrt_memory_destroy(kvrt_memory memory);

/* Updates the state of the batch's sequences with `wq` and `wv` (`q` and `out`
 * are ignored). All or nothing: on any failure no sequence's state changed.
 * Fails with KVRT_ERROR_INVALID_HANDLE for a bad memory, stream or buffer;
 * KVRT_ERROR_INVALID_ARGUMENT for a NULL, mistyped or badly chained batch or
 * tensor, n_tokens 0, an unknown sequence id, a layer out of range, missing,
 * doubly given, misaligned or strided data, data outside its buffer or
 * straddling a piece, a stream or buffer of another context;
 * KVRT_ERROR_INVALID_STATE when the stream is not recording; and with device
 * errors (KVRT_ERROR_OUT_OF_DEVICE_MEMORY, _DEVICE_LOST, _TIMEOUT).
 * Thread-safety: Unsafe (on the memory and stream). */
KVRT_API kvrt_result kvrt_memory_update(kvrt_memory memory, kvrt_stream stream,
                                        const kvrt_memory_batch* batch);

/* Reads the current state with the queries `q` into `out` (`wq` and `wv` are
 * ignored): every token reads its sequence's state as it is before the call.
 * Changes no state. Same errors as kvrt_memory_update, and
 * KVRT_ERROR_INVALID_ARGUMENT for a scale that is not finite, host outputs
 * with a stream, or F16 outputs with n_heads * value_dim odd.
 * Thread-safety: Unsafe (on the memory and stream). */
KVRT_API kvrt_result kvrt_memory_read(kvrt_memory memory, kvrt_stream stream,
                                      const kvrt_memory_batch* batch);

/* Updates and reads in one pass: token t of a sequence first updates the state
 * with wq[t] and wv[t], then reads it with q[t], so each read sees the updates
 * of the earlier tokens of its sequence and its own. All or nothing; the
 * errors of kvrt_memory_update and kvrt_memory_read.
 * Thread-safety: Unsafe (on the memory and stream). */
KVRT_API kvrt_result kvrt_memory_update_read(kvrt_memory memory, kvrt_stream stream,
                                             const kvrt_memory_batch* batch);

/* Sequence operations, named as the cache's. A memory's state has no
 * positions (every token so far is folded into it), so they take no position
 * range: they act on the whole sequence. */

/* Removes sequence `seq` (or every sequence, for seq < 0), like
 * kvrt_cache_seq_rm over all positions. A fixed-capacity memory has nothing
 * to free, so the sequence returns to the initial state. Changes metadata
 * only, so it cannot fail on the device. Fails with KVRT_ERROR_INVALID_HANDLE
 * for a bad memory or stream, KVRT_ERROR_INVALID_ARGUMENT for an unknown
 * sequence id or a stream of another context, KVRT_ERROR_INVALID_STATE for a
 * stream that is not recording. Thread-safety: Unsafe (on the memory and
 * stream). */
KVRT_API kvrt_result kvrt_memory_seq_rm(kvrt_memory memory, kvrt_stream stream, int32_t seq);

/* Makes `dst` a copy of the state of `src` (all layers), like
 * kvrt_cache_seq_cp over all positions; later updates of either do not affect
 * the other. Copies device memory (into dst's other slots) unless `src` is in
 * the initial state. All or nothing; fails like kvrt_memory_seq_rm (negative
 * ids included) and with device errors. Thread-safety: Unsafe (on the memory
 * and stream). */
KVRT_API kvrt_result kvrt_memory_seq_cp(kvrt_memory memory, kvrt_stream stream, int32_t src, int32_t dst);

/* Copies the state MV of sequence `seq` at `layer` into `out` as f32:
 * n_heads * n_slots * value_dim values, head-major, row-major. `out_bytes`
 * is the size of `out` in bytes and must hold them (4 bytes each); bytes
 * beyond them are not written. Waits (up to the context's wait timeout) for
 * submitted work on the memory; work recorded but not yet submitted is not
 * included. For tests and debugging. Fails with KVRT_ERROR_INVALID_HANDLE
 * for a bad memory; KVRT_ERROR_INVALID_ARGUMENT (nothing written) for an
 * unknown sequence, a layer out of range, a NULL `out` or `out_bytes` too
 * small; KVRT_ERROR_TIMEOUT or a device error while waiting (the contents of
 * `out` are then unspecified). Thread-safety: Unsafe. */
KVRT_API kvrt_result kvrt_memory_get_state(kvrt_memory memory, int32_t seq, int32_t layer, float* out,
                                           uint64_t out_bytes);

#ifdef __cplusplus
}
#endif

#endif /* KVRT_MEMORY_H */
