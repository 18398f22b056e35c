#include "paged_check.hpp"

#include <cstring>

#include "api/handles.hpp"
#include "cache/paged_layout.hpp"

namespace kvrt_test::paged {

// Element (layer, head, d) of K or V of token `id` at position `pos`: what a
// model computes is a function of the token and its place (here, of its id
// and position only), so equal prefixes give equal rows.
float value(int32_t id, int32_t pos, uint32_t layer, uint32_t head, uint32_t d, bool v) {
    uint32_t h = static_cast<uint32_t>(id) * 2654435761u ^ static_cast<uint32_t>(pos) * 2246822519u ^
                 (layer * 131u + head * 17u + d * 3u + (v ? 7919u : 0u)) * 3266489917u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    return static_cast<float>(h % 2001u) / 1000.0f - 1.0f;
}

// f32 rows [layer][token][head][dim] of K and V for the tokens.
void token_rows(const Shape& sh, const std::vector<int32_t>& ids, const std::vector<int32_t>& pos,
                std::vector<float>* k, std::vector<float>* v) {
    const size_t n = ids.size();
    k->assign(size_t{sh.layers} * n * sh.kv_heads * sh.dk, 0.0f);
    v->assign(size_t{sh.layers} * n * sh.kv_heads * sh.dv, 0.0f);
    for (uint32_t l = 0; l < sh.layers; ++l)
        for (size_t t = 0; t < n; ++t)
            for (uint32_t h = 0; h < sh.kv_heads; ++h) {
                for (uint32_t d = 0; d < sh.dk; ++d)
                    (*k)[((l * n + t) * sh.kv_heads + h) * sh.dk + d] = value(ids[t], pos[t], l, h, d, false);
                for (uint32_t d = 0; d < sh.dv; ++d)
                    (*v)[((l * n + t) * sh.kv_heads + h) * sh.dv + d] = value(ids[t], pos[t], l, h, d, true);
            }
}

// Writes the rows of tokens [from, ids.size()) into `cells` (all layers).
void write_rows(kvrt_cache c, const Shape& sh, const std::vector<int32_t>& ids, const std::vector<int32_t>& pos,
                size_t from, const uint32_t* cells) {
    if (from >= ids.size()) return;
    const std::vector<int32_t> i2(ids.begin() + static_cast<ptrdiff_t>(from), ids.end());
    const std::vector<int32_t> p2(pos.begin() + static_cast<ptrdiff_t>(from), pos.end());
    std::vector<float> k, v;
    token_rows(sh, i2, p2, &k, &v);
    kvrt_tensor_ref kr = host_tensor(k.data()), vr = host_tensor(v.data());
    KVRT_REQUIRE_OK(kvrt_cache_write(c, nullptr, static_cast<uint32_t>(i2.size()), cells, -1, &kr, &vr));
}

// The stored bytes of `cells` of one layer and array.
std::vector<uint8_t> raw_rows(kvrt_cache c, int32_t layer, kvrt_kv_array a, const std::vector<uint32_t>& cells) {
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_get_info(c, &info));
    const uint64_t row = a == KVRT_KV_ARRAY_K ? info.k_row_bytes : info.v_row_bytes;
    std::vector<uint8_t> out(cells.size() * row);
    KVRT_REQUIRE_OK(kvrt_cache_read_raw(c, layer, a, static_cast<uint32_t>(cells.size()), cells.data(), out.data(),
                                        out.size()));
    return out;
}

std::vector<uint32_t> paged_cells(kvrt_cache c, int32_t seq) {
    uint32_t n = 0;
    KVRT_REQUIRE_OK(kvrt_cache_paged_get_cells(c, seq, 0, 0, nullptr, &n));
    std::vector<uint32_t> cells(n);
    uint32_t again = 0;
    KVRT_REQUIRE_OK(kvrt_cache_paged_get_cells(c, seq, 0, n, cells.data(), &again));
    REQUIRE(again == n);
    return cells;
}

// Attention of one query per sequence (at the sequence's next position).
std::vector<float> attend(kvrt_cache c, const Shape& sh, uint32_t layer, const std::vector<int32_t>& seqs,
                          const std::vector<int32_t>& positions, const std::vector<float>& q) {
    const uint32_t n = static_cast<uint32_t>(seqs.size());
    std::vector<float> out(size_t{n} * sh.heads * sh.dv, -7.0f);
    kvrt_batch b = make_batch(n, positions.data(), seqs.data());
    kvrt_tensor_ref qr = host_tensor(q.data());
    kvrt_output_ref o = host_output(out.data());
    kvrt_attention_params p = KVRT_ATTENTION_PARAMS_INIT;
    p.scale = 0.25f;
    KVRT_REQUIRE_OK(kvrt_cache_attention(c, nullptr, static_cast<int32_t>(layer), &b, &qr, &o, &p));
    return out;
}


Prompt prompt(uint32_t n, int32_t seed) {
    Prompt p;
    for (uint32_t i = 0; i < n; ++i) {
        p.ids.push_back(seed * 1000 + static_cast<int32_t>(i));
        p.pos.push_back(static_cast<int32_t>(i));
    }
    return p;
}

// Admits `p` into `seq` and writes the uncached rows; returns n_cached.
uint32_t admit(kvrt_cache c, const Shape& sh, int32_t seq, const Prompt& p) {
    uint32_t n_cached = 0;
    std::vector<uint32_t> cells(p.ids.size());
    KVRT_REQUIRE_OK(kvrt_cache_paged_admit(c, seq, static_cast<uint32_t>(p.ids.size()), p.ids.data(), p.pos.data(), 0,
                                           &n_cached, cells.data()));
    write_rows(c, sh, p.ids, p.pos, n_cached, cells.data() + n_cached);
    return n_cached;
}

bool State::operator==(const State& o) const {
    return std::memcmp(&stats, &o.stats, sizeof stats) == 0 && used == o.used && cells == o.cells;
}

State state_of(kvrt_cache c, uint32_t n_seqs) {
    State s;
    KVRT_REQUIRE_OK(kvrt_cache_paged_get_stats(c, &s.stats));
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_get_info(c, &info));
    s.used = info.used;
    for (uint32_t q = 0; q < n_seqs; ++q) s.cells.push_back(paged_cells(c, static_cast<int32_t>(q)));
    return s;
}


// The stored bytes every sequence sees (K and V of every layer, its tokens in
// order), to compare before and after a failed call.
std::vector<uint8_t> seen_rows(kvrt_cache c, const Shape& sh, uint32_t n_seqs) {
    std::vector<uint8_t> all;
    for (uint32_t q = 0; q < n_seqs; ++q) {
        const std::vector<uint32_t> cells = paged_cells(c, static_cast<int32_t>(q));
        if (cells.empty()) continue;
        for (uint32_t l = 0; l < sh.layers; ++l)
            for (kvrt_kv_array a : {KVRT_KV_ARRAY_K, KVRT_KV_ARRAY_V}) {
                const std::vector<uint8_t> rows = raw_rows(c, static_cast<int32_t>(l), a, cells);
                all.insert(all.end(), rows.begin(), rows.end());
            }
    }
    return all;
}

void verify(kvrt_cache c) {
    kvrt::cache::PagedLayout* layout = nullptr;
    REQUIRE(kvrt::api::cache_of(c)->paged_layout("verify", &layout) == KVRT_SUCCESS);
    const kvrt_result r = layout->verify();
    INFO(kvrt_last_error_message());
    REQUIRE(r == KVRT_SUCCESS);
}

}  // namespace kvrt_test::paged
