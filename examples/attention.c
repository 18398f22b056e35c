/* attention.c: the basic kvrt loop of an inference engine.
 *
 * 1. create a context (a Vulkan device) and a KV cache;
 * 2. store the K/V rows of a 5-token prompt;
 * 3. decode one token: store its K/V, then run attention for its query;
 * 4. check the result against a softmax computed here on the CPU.
 *
 * The model is made up and tiny: one layer, two query heads sharing one KV
 * head (grouped-query attention), head dimension 8. An engine would get K, V
 * and Q from its own matmuls; here they come from small formulas. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <kvrt/kvrt.h>

#define N_HEADS 2    /* query heads */
#define N_KV_HEADS 1 /* K/V heads: both query heads read this one */
#define HEAD_DIM 8
#define N_PROMPT 5

/* Every kvrt call returns a kvrt_result; on failure the calling thread's
 * kvrt_last_error_message() says what was wrong. */
static void check(kvrt_result r, const char* what) {
    if (r != KVRT_SUCCESS) {
        fprintf(stderr, "%s failed: %s: %s\n", what, kvrt_result_string(r), kvrt_last_error_message());
        exit(1);
    }
}

/* kvrt never prints; it hands its log messages (and, with KVRT_VALIDATION=1,
 * the Vulkan validation layer's) to this callback. */
static void log_message(void* user_data, kvrt_log_level level, const char* message) {
    (void)user_data;
    fprintf(stderr, "kvrt: %s: %s\n", level >= KVRT_LOG_LEVEL_ERROR ? "error" : "warning", message);
}

/* Made-up projections of token t. The values are multiples of 1/8, which the
 * cache's f16 storage holds exactly. */
static float key_of(int t, int d) { return (float)((t * 3 + d) % 7 - 3) / 8.0f; }
static float value_of(int t, int d) { return (float)(t - 2) + (float)d / 8.0f; }
static float query_of(int h, int d) { return (float)((h + 2 * d) % 5 - 2) / 4.0f; }

/* Stores the K/V rows of tokens [first, first + count) of sequence 0 at
 * positions equal to their index. */
static void store_tokens(kvrt_cache cache, int first, int count) {
    float k[N_PROMPT][N_KV_HEADS * HEAD_DIM], v[N_PROMPT][N_KV_HEADS * HEAD_DIM];
    int32_t positions[N_PROMPT], seq_ids[N_PROMPT];
    for (int i = 0; i < count; ++i) {
        positions[i] = first + i;
        seq_ids[i] = 0;
        for (int d = 0; d < HEAD_DIM; ++d) {
            k[i][d] = key_of(first + i, d);
            v[i][d] = value_of(first + i, d);
        }
    }
    /* Every struct starts from its KVRT_*_INIT macro: it sets the struct's
     * `type` and the defaults, so only what differs is written here. */
    kvrt_batch batch = KVRT_BATCH_INIT;
    batch.n_tokens = (uint32_t)count;
    batch.positions = positions;
    batch.seq_ids = seq_ids; /* seq_id_counts NULL: one sequence per token */

    /* Host data, f32 (the INIT's element type), packed rows: kvrt copies it
     * during the call and converts it to the cache's stored type. */
    kvrt_tensor_ref k_ref = KVRT_TENSOR_REF_INIT, v_ref = KVRT_TENSOR_REF_INIT;
    k_ref.host = k;
    v_ref.host = v;
    /* Stream NULL: record, submit and wait inside the call. Layer -1 would
     * store every layer at once; this model has only layer 0. */
    check(kvrt_cache_store(cache, NULL, &batch, 0, &k_ref, &v_ref, NULL), "kvrt_cache_store");
}

int main(void) {
    /* 1. A context on the default device (KVRT_DEVICE=<index|name> picks
     * another one: the descriptor leaves the device to kvrt). */
    kvrt_context_desc context_desc = KVRT_CONTEXT_DESC_INIT;
    context_desc.log_callback = log_message;
    kvrt_context ctx;
    check(kvrt_context_create(&context_desc, &ctx), "kvrt_context_create");

    kvrt_device_info info = KVRT_DEVICE_INFO_INIT;
    check(kvrt_context_get_device_info(ctx, &info), "kvrt_context_get_device_info");
    printf("kvrt %s on %s\n", kvrt_version_string(), info.name);

    /* A cache of 64 cells; K and V stored as f16 (the INIT's types). */
    kvrt_cache_desc cache_desc = KVRT_CACHE_DESC_INIT;
    cache_desc.n_layers = 1;
    cache_desc.n_heads = N_HEADS;
    cache_desc.n_kv_heads = N_KV_HEADS;
    cache_desc.head_dim_k = HEAD_DIM;
    cache_desc.capacity = 64;
    cache_desc.max_seqs = 1;
    kvrt_cache cache;
    check(kvrt_cache_create(ctx, &cache_desc, &cache), "kvrt_cache_create");

    /* 2. The prompt: tokens 0..4. */
    store_tokens(cache, 0, N_PROMPT);

    /* 3. Decode token 5: its own K/V first, so that it sees itself... */
    const int pos = N_PROMPT;
    store_tokens(cache, pos, 1);

    /* ...then its query over the cache: one token, N_HEADS rows of HEAD_DIM. */
    float q[N_HEADS][HEAD_DIM], out[N_HEADS][HEAD_DIM];
    for (int h = 0; h < N_HEADS; ++h)
        for (int d = 0; d < HEAD_DIM; ++d) q[h][d] = query_of(h, d);
    int32_t q_pos = pos, q_seq = 0;
    kvrt_batch queries = KVRT_BATCH_INIT;
    queries.n_tokens = 1;
    queries.positions = &q_pos;
    queries.seq_ids = &q_seq;
    kvrt_tensor_ref q_ref = KVRT_TENSOR_REF_INIT;
    q_ref.host = q;
    kvrt_output_ref out_ref = KVRT_OUTPUT_REF_INIT; /* f32 results */
    out_ref.host = out;
    /* params NULL: causal, scale 1/sqrt(HEAD_DIM), no window or sinks. */
    check(kvrt_cache_attention(cache, NULL, 0, &queries, &q_ref, &out_ref, NULL), "kvrt_cache_attention");

    /* 4. The same attention on the CPU: softmax(q . k_t / sqrt(D)) weighting
     * v_t over tokens 0..pos, for each query head. */
    double max_err = 0.0;
    for (int h = 0; h < N_HEADS; ++h) {
        double scores[N_PROMPT + 1], top = -INFINITY, sum = 0.0;
        for (int t = 0; t <= pos; ++t) {
            double s = 0.0;
            for (int d = 0; d < HEAD_DIM; ++d) s += (double)q[h][d] * key_of(t, d);
            scores[t] = s / sqrt((double)HEAD_DIM);
            if (scores[t] > top) top = scores[t];
        }
        for (int t = 0; t <= pos; ++t) sum += (scores[t] = exp(scores[t] - top));
        printf("head %d:", h);
        for (int d = 0; d < HEAD_DIM; ++d) {
            double want = 0.0;
            for (int t = 0; t <= pos; ++t) want += scores[t] / sum * value_of(t, d);
            max_err = fmax(max_err, fabs(want - out[h][d]));
            printf(" %7.4f", out[h][d]);
        }
        printf("\n");
    }
    printf("largest difference from the CPU softmax: %.2e\n", max_err);

    kvrt_cache_destroy(cache);
    kvrt_context_destroy(ctx);
    if (max_err > 1e-3) {
        fprintf(stderr, "attention does not match the CPU reference\n");
        return 1;
    }
    return 0;
}
