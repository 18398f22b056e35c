#include "memory_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "common/random.hpp"
#include "reference/half.hpp"
#include "reference/metrics.hpp"

namespace kvrt_test {

namespace ref = kvrt::ref;

// KVRT_MEMORY_SOURCE_SEED as documented in kvrt.h.
float seeded(uint64_t seed, uint64_t i) {
    uint64_t z = seed + i + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<float>(z >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

// A geometry in one line: layers, heads, slots, key and value sizes, sequences.
Geometry shape(uint32_t layers, uint32_t heads, uint32_t m, uint32_t e, uint32_t d, uint32_t seqs, uint32_t chunk,
               bool init_values) {
    Geometry g;
    g.layers = layers;
    g.heads = heads;
    g.m = m;
    g.e = e;
    g.d = d;
    g.seqs = seqs;
    g.chunk = chunk;
    g.init_values = init_values;
    return g;
}

Batch random_batch(const Geometry& g, uint32_t n, int32_t layer, Rng& rng, uint32_t n_seqs) {
    Batch b;
    b.n = n;
    b.layer = layer;
    const uint64_t nl = layer < 0 ? g.layers : 1;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    auto fill = [&](std::vector<float>& v, uint32_t dim) {
        v.resize(nl * n * g.heads * dim);
        for (float& x : v) x = nd(rng);
    };
    fill(b.wq, g.e);
    fill(b.wv, g.d);
    fill(b.q, g.e);
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(n_seqs) - 1);
    b.ids.resize(n);
    for (int32_t& id : b.ids) id = pick(rng);
    return b;
}

Reference::Reference(const Geometry& g) : g_(g) {
    for (uint32_t l = 0; l < g.layers; ++l) {
        for (uint32_t h = 0; h < g.heads; ++h) {
            const uint64_t block = static_cast<uint64_t>(l) * g.heads + h;
            std::vector<float> mk(g.m * g.e), mv(g.m * g.d, 0.0f);
            for (size_t i = 0; i < mk.size(); ++i)
                mk[i] = g.host_keys.empty() ? seeded(g.key_seed, block * mk.size() + i) : g.host_keys[block * mk.size() + i];
            if (g.init_values) {
                for (size_t i = 0; i < mv.size(); ++i) {
                    const float v = seeded(g.value_seed, block * mv.size() + i);
                    mv[i] = g.state == KVRT_TYPE_F16 ? ref::round_to_f16(v) : v;
                }
            }
            initial_.push_back(ref::memory_head_init(static_cast<int>(g.m), static_cast<int>(g.e),
                                                     static_cast<int>(g.d), mk, mv));
        }
    }
    for (uint32_t s = 0; s < g.seqs; ++s) heads_.insert(heads_.end(), initial_.begin(), initial_.end());
}

void Reference::run(Op op, const Batch& b, std::vector<double>* out) {
    const uint32_t nl = b.layer < 0 ? g_.layers : 1;
    const double scale = b.scale != 0.0f ? b.scale : 1.0 / std::sqrt(static_cast<double>(g_.e));
    std::vector<double> unused;
    if (!out) out = &unused;
    out->assign(static_cast<size_t>(nl) * b.n * g_.heads * g_.d, 0.0);
    for (uint32_t lr = 0; lr < nl; ++lr) {
        const uint32_t layer = b.layer < 0 ? lr : static_cast<uint32_t>(b.layer);
        for (uint32_t t = 0; t < b.n; ++t) {
            const uint32_t seq = b.ids.empty() ? 0 : static_cast<uint32_t>(b.ids[t]);
            for (uint32_t h = 0; h < g_.heads; ++h) {
                const size_t row = (static_cast<size_t>(lr) * b.n + t) * g_.heads + h;
                ref::MemoryHead& head = at(seq, layer, h);
                if (op != Op::Read) ref::memory_update(head, &b.wq[row * g_.e], &b.wv[row * g_.d]);
                if (op != Op::Update) ref::memory_read(head, &b.q[row * g_.e], scale, &(*out)[row * g_.d]);
            }
        }
    }
}

kvrt_result call(Op op, kvrt_memory m, kvrt_stream s, const kvrt_memory_batch* b) {
    switch (op) {
        case Op::Update: return kvrt_memory_update(m, s, b);
        case Op::Read: return kvrt_memory_read(m, s, b);
        case Op::UpdateRead: break;
    }
    return kvrt_memory_update_read(m, s, b);
}

// Runs `b` on the GPU (synchronously, host data) and in the reference; returns
// the NMSE of the reads (0 without reads).
double run_both(Op op, kvrt_memory m, Reference& r, const Batch& b, const Geometry& g) {
    const uint32_t nl = b.layer < 0 ? g.layers : 1;
    std::vector<float> got(static_cast<size_t>(nl) * b.n * g.heads * g.d, NAN);
    const MemoryBatch mb(b, op == Op::Update ? nullptr : &got);
    KVRT_REQUIRE_OK(call(op, m, nullptr, mb.get()));
    std::vector<double> want;
    r.run(op, b, op == Op::Update ? nullptr : &want);
    return op == Op::Update ? 0.0 : ref::nmse(got, want);
}

std::vector<float> get_state(kvrt_memory m, const Geometry& g, uint32_t seq, uint32_t layer) {
    std::vector<float> v(static_cast<size_t>(g.heads) * g.m * g.d, NAN);
    KVRT_REQUIRE_OK(kvrt_memory_get_state(m, static_cast<int32_t>(seq), static_cast<int32_t>(layer), v.data(),
                                          bytes_of(v)));
    return v;
}

// Every sequence's state, all layers.
std::vector<float> all_states(kvrt_memory m, const Geometry& g) {
    std::vector<float> all;
    for (uint32_t s = 0; s < g.seqs; ++s)
        for (uint32_t l = 0; l < g.layers; ++l) {
            const auto v = get_state(m, g, s, l);
            all.insert(all.end(), v.begin(), v.end());
        }
    return all;
}

double state_nmse(kvrt_memory m, Reference& r, const Geometry& g) {
    std::vector<float> got;
    std::vector<double> want;
    for (uint32_t s = 0; s < g.seqs; ++s) {
        for (uint32_t l = 0; l < g.layers; ++l) {
            const auto v = get_state(m, g, s, l);
            got.insert(got.end(), v.begin(), v.end());
            for (uint32_t h = 0; h < g.heads; ++h) {
                const auto& mv = r.at(s, l, h).mv;
                want.insert(want.end(), mv.begin(), mv.end());
            }
        }
    }
    return ref::nmse(got, want);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace kvrt_test
