/* static_window.c: the static padded layout, as a DSP/NPU graph sees it.
 *
 * Static-graph engines compile a model for fixed tensor shapes: their "past
 * K" input is always [1, 1, S-1, D], whatever the number of tokens so far.
 * A cache created with KVRT_LAYOUT_STATIC keeps, per sequence and (layer, KV
 * head), a window of exactly S-1 rows in a kvrt buffer, which such a graph can
 * bind directly (kvrt_buffer_get_vulkan in kvrt_vulkan.h gives the VkBuffer).
 *
 * The window is left-padded: its n_valid valid rows are its LAST rows, oldest
 * first; the mask (S entries) is -inf for the padding rows and 0 for the valid
 * ones and for the step's own token. Appending a token writes one row after
 * the window and moves the window one row on; when the reserved region runs
 * out, one copy moves the kept rows back to its start (a "slide").
 *
 * Here S = 5 (windows of 4 rows) and reserve R = 2 (8 rows per region). Each
 * step appends one token, then plays the graph: it reads the window's bytes
 * and the mask, and checks that the valid rows are the newest tokens. Then
 * two draft tokens are appended and rejected, as in speculative decoding. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <kvrt/kvrt.h>

#define SEQ_LEN 5             /* S: the graph's sequence length */
#define ROWS (SEQ_LEN - 1)    /* rows of a window */
#define HEAD_DIM 4
#define N_TOKENS 10

static void check(kvrt_result r, const char* what) {
    if (r != KVRT_SUCCESS) {
        fprintf(stderr, "%s failed: %s: %s\n", what, kvrt_result_string(r), kvrt_last_error_message());
        exit(1);
    }
}

static void log_message(void* user_data, kvrt_log_level level, const char* message) {
    (void)user_data;
    fprintf(stderr, "kvrt: %s: %s\n", level >= KVRT_LOG_LEVEL_ERROR ? "error" : "warning", message);
}

/* Token t's key row: 10t, 10t+1, ... so the printout shows which token a row
 * belongs to. */
static float key_of(int t, int d) { return (float)(10 * t + d); }

/* The consumer's side: given the window's rows and the mask, the way a graph
 * receives them. Checks that the valid rows (mask 0) are tokens
 * newest-n_valid+1 .. newest, in order, and prints the window. */
static int consume(const float rows[ROWS][HEAD_DIM], const float mask[SEQ_LEN], int newest) {
    int bad = 0, n_valid = 0;
    for (int i = 0; i < ROWS; ++i) n_valid += mask[i] == 0.0f;
    const int n_pad = ROWS - n_valid;
    printf(" |");
    for (int i = 0; i < ROWS; ++i) {
        if (i < n_pad) { /* padding: whatever bytes are there, masked out */
            bad |= !(isinf(mask[i]) && mask[i] < 0.0f);
            printf(" pad |");
            continue;
        }
        const int token = newest - (ROWS - 1 - i);
        for (int d = 0; d < HEAD_DIM; ++d) bad |= rows[i][d] != key_of(token, d);
        printf(" t%-2d |", (int)rows[i][0] / 10);
    }
    bad |= mask[ROWS] != 0.0f; /* the step's own token always counts */
    return bad;
}

/* Appends token t to sequence 0 (the engine's decode step stores its K/V). */
static void append(kvrt_cache cache, int t) {
    float k[HEAD_DIM], v[HEAD_DIM];
    for (int d = 0; d < HEAD_DIM; ++d) k[d] = v[d] = key_of(t, d);
    int32_t pos = t, seq = 0;
    kvrt_batch batch = KVRT_BATCH_INIT;
    batch.n_tokens = 1;
    batch.positions = &pos;
    batch.seq_ids = &seq;
    kvrt_tensor_ref k_ref = KVRT_TENSOR_REF_INIT, v_ref = KVRT_TENSOR_REF_INIT;
    k_ref.host = k;
    v_ref.host = v;
    check(kvrt_cache_store(cache, NULL, &batch, 0, &k_ref, &v_ref, NULL), "kvrt_cache_store");
}

/* Plays the graph: reads the K window of (sequence 0, layer 0, KV head 0) and
 * its mask, prints them and checks that they hold tokens oldest..newest.
 * The window moves with every append: ask again at every step. The first call
 * notes the region's first row in *first_offset (UINT64_MAX until then).
 * Returns 1 on a mismatch. */
static int show(kvrt_cache cache, const char* what, int oldest, int newest, uint64_t* first_offset) {
    kvrt_static_window w = KVRT_STATIC_WINDOW_INIT;
    check(kvrt_cache_static_get_window(cache, 0, 0, 0, KVRT_KV_ARRAY_K, &w), "kvrt_cache_static_get_window");
    if (*first_offset == UINT64_MAX) *first_offset = w.offset - w.row_stride; /* after the first append */

    /* What the graph binds: the window's bytes (here copied to the host) and
     * the mask of its next step, as f32 (KVRT_TYPE_F16 gives half floats). */
    float rows[ROWS][HEAD_DIM], mask[SEQ_LEN];
    if (w.rows != ROWS || w.row_stride != sizeof rows[0] || w.bytes != sizeof rows) {
        fprintf(stderr, "unexpected window shape: %u rows of %llu bytes\n", w.rows, (unsigned long long)w.row_stride);
        exit(1);
    }
    check(kvrt_buffer_download(w.buffer, w.offset, rows, w.bytes), "kvrt_buffer_download");
    check(kvrt_cache_static_get_mask(cache, 0, KVRT_TYPE_F32, mask, sizeof mask), "kvrt_cache_static_get_mask");

    printf("%-8s %2d: window at row %llu of the region, %u valid (positions %d..%d)", what, newest,
           (unsigned long long)((w.offset - *first_offset) / w.row_stride), w.n_valid, w.pos_first, w.pos_last);
    int bad = consume((const float(*)[HEAD_DIM])rows, mask, newest);
    printf("\n");
    if (w.n_valid != (uint32_t)(newest - oldest + 1) || w.pos_first != oldest || w.pos_last != newest) bad = 1;
    return bad;
}

int main(void) {
    kvrt_context_desc context_desc = KVRT_CONTEXT_DESC_INIT;
    context_desc.log_callback = log_message;
    kvrt_context ctx;
    check(kvrt_context_create(&context_desc, &ctx), "kvrt_context_create");

    /* The static layout's sizes come as a struct chained on the cache's
     * descriptor. f32 storage keeps the printout exact. */
    kvrt_static_layout_desc layout = KVRT_STATIC_LAYOUT_DESC_INIT;
    layout.seq_len = SEQ_LEN;
    layout.reserve = 2.0;
    kvrt_cache_desc cache_desc = KVRT_CACHE_DESC_INIT;
    cache_desc.next = &layout;
    cache_desc.layout = KVRT_LAYOUT_STATIC;
    cache_desc.n_layers = 1;
    cache_desc.n_heads = 1;
    cache_desc.n_kv_heads = 1;
    cache_desc.head_dim_k = HEAD_DIM;
    cache_desc.type_k = KVRT_TYPE_F32;
    cache_desc.type_v = KVRT_TYPE_F32;
    cache_desc.max_seqs = 1; /* capacity stays 0: it is max_seqs * (S-1) */
    kvrt_cache cache;
    check(kvrt_cache_create(ctx, &cache_desc, &cache), "kvrt_cache_create");

    int failures = 0;
    uint64_t first_offset = UINT64_MAX;
    for (int t = 0; t < N_TOKENS; ++t) {
        append(cache, t);
        failures += show(cache, "token", t < ROWS ? 0 : t - ROWS + 1, t, &first_offset);
    }

    /* Speculative decoding: two draft tokens go in, the target model rejects
     * them, and kvrt_cache_seq_rm takes them out again. The window moves back
     * two rows; no byte moves while the region has room for that (otherwise
     * one copy moves the kept rows). The oldest tokens that the drafts pushed
     * out of the window stay out: with real sizes S-1 is far above the
     * number of drafts. */
    append(cache, N_TOKENS);
    append(cache, N_TOKENS + 1);
    failures += show(cache, "drafts", N_TOKENS + 2 - ROWS, N_TOKENS + 1, &first_offset);
    check(kvrt_cache_seq_rm(cache, 0, N_TOKENS, -1), "kvrt_cache_seq_rm");
    failures += show(cache, "rejected", N_TOKENS + 2 - ROWS, N_TOKENS - 1, &first_offset);

    /* The slides so far: with R = 2 a window slides once per S-1 appends
     * after the first fill, copying the rows it keeps. */
    kvrt_static_stats stats = KVRT_STATIC_STATS_INIT;
    check(kvrt_cache_static_get_stats(cache, 0, &stats), "kvrt_cache_static_get_stats");
    printf("%llu rows appended, %llu slides, %llu rows moved per window\n",
           (unsigned long long)stats.rows_appended, (unsigned long long)stats.slides,
           (unsigned long long)stats.rows_moved);
    if (stats.rows_appended != N_TOKENS + 2 || stats.slides == 0) ++failures;

    kvrt_cache_destroy(cache);
    kvrt_context_destroy(ctx);
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}
