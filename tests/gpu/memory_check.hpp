// Shared pieces of the fixed-capacity memory tests (test_memory.cpp,
// test_memory_errors.cpp): geometries, descriptors and batches built from
// their KVRT_*_INIT macros, and the double-precision reference of
// tests/reference/memory.hpp over a whole memory.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/random.hpp"
#include "gpu_test.hpp"
#include "reference/memory.hpp"

namespace kvrt_test {

enum class Op { Update, Read, UpdateRead };

// KVRT_MEMORY_SOURCE_SEED as documented in kvrt.h.
float seeded(uint64_t seed, uint64_t i);

struct Geometry {
    uint32_t layers = 1, heads = 2, m = 64, e = 32, d = 32, seqs = 1, chunk = 0;
    kvrt_type state = KVRT_TYPE_F32;
    uint64_t key_seed = 11;
    // MK of every layer and head from the host, layer-major as
    // kvrt_memory_init takes it; empty: MK from key_seed.
    std::vector<float> host_keys;
    bool init_values = false;
    uint64_t value_seed = 22;
};

// A geometry in one line: layers, heads, slots, key and value sizes, sequences.
Geometry shape(uint32_t layers, uint32_t heads, uint32_t m, uint32_t e, uint32_t d, uint32_t seqs, uint32_t chunk = 0,
               bool init_values = false);

// The descriptor of a memory of geometry `g`, with the initial-data structs
// it points at (so not copyable; set() starts over). With host keys it points
// at g.host_keys too.
struct MemoryDesc {
    kvrt_memory_init keys = KVRT_MEMORY_INIT_INIT, values = KVRT_MEMORY_INIT_INIT;
    kvrt_memory_desc desc = KVRT_MEMORY_DESC_INIT;

    explicit MemoryDesc(const Geometry& g) { set(g); }
    MemoryDesc(const MemoryDesc&) = delete;
    MemoryDesc& operator=(const MemoryDesc&) = delete;

    void set(const Geometry& g) {
        keys = kvrt_memory_init KVRT_MEMORY_INIT_INIT;
        values = kvrt_memory_init KVRT_MEMORY_INIT_INIT;
        desc = kvrt_memory_desc KVRT_MEMORY_DESC_INIT;
        desc.n_layers = g.layers;
        desc.n_heads = g.heads;
        desc.n_slots = g.m;
        desc.key_dim = g.e;
        desc.value_dim = g.d;
        desc.max_seqs = g.seqs;
        desc.chunk_tokens = g.chunk;
        desc.state_type = g.state;
        keys.source = KVRT_MEMORY_SOURCE_SEED;
        keys.seed = g.key_seed;
        if (!g.host_keys.empty()) {
            keys.source = KVRT_MEMORY_SOURCE_HOST;
            keys.host = g.host_keys.data();
        }
        desc.keys = &keys;
        if (g.init_values) {
            values.source = KVRT_MEMORY_SOURCE_SEED;
            values.seed = g.value_seed;
            desc.values = &values;
        }
        desc.label = "test memory";
    }
};

// A memory destroyed at scope exit.
class Memory {
public:
    Memory(kvrt_context ctx, const Geometry& g) {
        const MemoryDesc d(g);
        KVRT_REQUIRE_OK(kvrt_memory_create(ctx, &d.desc, &m_));
    }
    ~Memory() { kvrt_memory_destroy(m_); }
    Memory(const Memory&) = delete;
    Memory& operator=(const Memory&) = delete;
    operator kvrt_memory() const { return m_; }

private:
    kvrt_memory m_ = nullptr;
};

// Token data of a batch: for each layer of the call, n rows of heads * dim.
struct Batch {
    uint32_t n = 0;
    int32_t layer = 0;
    std::vector<int32_t> ids;
    std::vector<float> wq, wv, q;
    float scale = 0.0f;
};

Batch random_batch(const Geometry& g, uint32_t n, int32_t layer, Rng& rng, uint32_t n_seqs = 1);

// The double-precision model of a whole memory: [seq][layer][head].
class Reference {
public:
    explicit Reference(const Geometry& g);

    kvrt::ref::MemoryHead& at(uint32_t seq, uint32_t layer, uint32_t h) {
        return heads_[(static_cast<size_t>(seq) * g_.layers + layer) * g_.heads + h];
    }
    // kvrt_memory_seq_rm: back to the initial state.
    void seq_rm(uint32_t seq) {
        const ptrdiff_t first = static_cast<ptrdiff_t>(seq) * g_.layers * g_.heads;
        std::copy(initial_.begin(), initial_.end(), heads_.begin() + first);
    }
    void seq_cp(uint32_t src, uint32_t dst) {
        for (uint32_t l = 0; l < g_.layers; ++l)
            for (uint32_t h = 0; h < g_.heads; ++h) at(dst, l, h) = at(src, l, h);
    }

    // What kvrt_memory_update / _read / _update_read compute; `out` (may be
    // NULL) gets the reads.
    void run(Op op, const Batch& b, std::vector<double>* out);

private:
    Geometry g_;
    std::vector<kvrt::ref::MemoryHead> initial_, heads_;
};

// A kvrt_memory_batch of host data with the tensor and output structs it
// points at (so not copyable; set() starts over). wq, wv and q are always
// given (each call reads those it needs); out only when there is one.
struct MemoryBatch {
    kvrt_tensor_ref wq = KVRT_TENSOR_REF_INIT, wv = KVRT_TENSOR_REF_INIT, q = KVRT_TENSOR_REF_INIT;
    kvrt_output_ref out = KVRT_OUTPUT_REF_INIT;
    kvrt_memory_batch mb = KVRT_MEMORY_BATCH_INIT;

    MemoryBatch(const Batch& b, std::vector<float>* host_out) { set(b, host_out); }
    MemoryBatch(const MemoryBatch&) = delete;
    MemoryBatch& operator=(const MemoryBatch&) = delete;
    const kvrt_memory_batch* get() const { return &mb; }

    void set(const Batch& b, std::vector<float>* host_out) {
        wq = host_tensor(b.wq.data());
        wv = host_tensor(b.wv.data());
        q = host_tensor(b.q.data());
        out = kvrt_output_ref KVRT_OUTPUT_REF_INIT;
        mb = kvrt_memory_batch KVRT_MEMORY_BATCH_INIT;
        mb.n_tokens = b.n;
        mb.seq_ids = b.ids.empty() ? nullptr : b.ids.data();
        mb.layer = b.layer;
        mb.wq = &wq;
        mb.wv = &wv;
        mb.q = &q;
        mb.scale = b.scale;
        if (host_out) {
            out.host = host_out->data();
            mb.out = &out;
        }
    }
    // Outputs into `buffer` at `offset` instead.
    void output_to(kvrt_buffer buffer, uint64_t offset = 0) {
        out = buffer_output(buffer, offset);
        mb.out = &out;
    }
};

// kvrt_memory_update, _read or _update_read.
kvrt_result call(Op op, kvrt_memory m, kvrt_stream s, const kvrt_memory_batch* b);

// Runs `b` on the GPU (synchronously, host data) and in the reference; returns
// the NMSE of the reads (0 without reads).
double run_both(Op op, kvrt_memory m, Reference& r, const Batch& b, const Geometry& g);

std::vector<float> get_state(kvrt_memory m, const Geometry& g, uint32_t seq, uint32_t layer);

// Every sequence's state, all layers.
std::vector<float> all_states(kvrt_memory m, const Geometry& g);

double state_nmse(kvrt_memory m, Reference& r, const Geometry& g);

// Bitwise equality of two float vectors.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace kvrt_test
