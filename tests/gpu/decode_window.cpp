// The static decode test's window model and checks; see decode_window.hpp.
#include "decode_window.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "reference/quant.hpp"
#include "tensor_util.hpp"

namespace kvrt_test::decode {

namespace ref = kvrt::ref;

uint32_t WindowModel::append(uint32_t n, bool* slid) {
    uint32_t row = 0;
    *slid = uint64_t{start_} + w_ + n > rr_;
    if (!*slid) {
        row = start_ + w_;
        start_ += n;
    } else {
        const uint32_t keep = std::min(n_valid_, w_ - n);
        // Batches of 2 to a quarter of the room's rows restart n rows in.
        const uint32_t lead = n > 1 && n <= (rr_ - w_) / 4 ? n : 0;
        if (keep > 0) {
            ++slides_;
            rows_moved_ += keep;
            // Source rows start at start + W - keep, destination rows at lead + W - n - keep.
            if (uint64_t{start_} + n - lead < keep) ++overlapping_;
        }
        row = lead + w_ - n;
        start_ = lead;
    }
    n_valid_ = std::min(n_valid_ + n, w_);
    rows_appended_ += n;
    return row;
}

WindowChecker::WindowChecker(const ModelConfig& cfg, uint32_t seqs, uint32_t window_rows, uint32_t reserved_rows,
                             kvrt_type type, std::vector<QuantScale> k_scales, std::vector<QuantScale> v_scales)
    : cfg_(cfg),
      w_(window_rows),
      rr_(reserved_rows),
      type_(type),
      eb_(kvrt_type_block_bytes(type)),
      k_scales_(std::move(k_scales)),
      v_scales_(std::move(v_scales)) {
    const size_t per_seq = static_cast<size_t>(w_) * static_cast<size_t>(cfg.n_layers) * static_cast<size_t>(cfg.kv_dim());
    k_.assign(seqs, std::vector<float>(per_seq, 0.0f));
    v_.assign(seqs, std::vector<float>(per_seq, 0.0f));
}

void WindowChecker::record(uint32_t seq, int32_t pos, int layer, const float* k, const float* v) {
    const size_t kvd = static_cast<size_t>(cfg_.kv_dim());
    const size_t off = (static_cast<size_t>(pos) % w_ * static_cast<size_t>(cfg_.n_layers) + static_cast<size_t>(layer)) * kvd;
    std::copy_n(k, kvd, k_[seq].data() + off);
    std::copy_n(v, kvd, v_[seq].data() + off);
}

std::vector<float> WindowChecker::decode(const uint8_t* row, size_t n, const QuantScale& s) const {
    std::vector<float> out(n);
    const int64_t count = static_cast<int64_t>(n);
    switch (type_) {
        case KVRT_TYPE_F32: ref::decode_row(ref::Type::F32, row, count, out.data()); break;
        case KVRT_TYPE_F16: ref::decode_row(ref::Type::F16, row, count, out.data()); break;
        case KVRT_TYPE_U8_STATIC:
            ref::decode_row_static(ref::StaticType::U8, row, count, s.scale, s.zero_point, out.data());
            break;
        case KVRT_TYPE_U16_STATIC:
            ref::decode_row_static(ref::StaticType::U16, row, count, s.scale, s.zero_point, out.data());
            break;
        default: FAIL("the static layout has no type " << static_cast<int>(type_));
    }
    return out;
}

void WindowChecker::check_mask(kvrt_cache cache, uint32_t seq, uint32_t n_valid) {
    const size_t s = static_cast<size_t>(w_) + 1;
    std::vector<float> f32(s, 1.0f);
    std::vector<uint16_t> f16(s, 0x3C00);
    KVRT_REQUIRE_OK(kvrt_cache_static_get_mask(cache, static_cast<int32_t>(seq), KVRT_TYPE_F32, f32.data(), s * 4));
    KVRT_REQUIRE_OK(kvrt_cache_static_get_mask(cache, static_cast<int32_t>(seq), KVRT_TYPE_F16, f16.data(), s * 2));
    const size_t pad = w_ - n_valid;  // leading -inf entries; the rest, and the step's own entry, 0
    for (size_t i = 0; i < s; ++i) {
        const bool padding = i < pad;
        if (f32[i] != (padding ? -std::numeric_limits<float>::infinity() : 0.0f) ||
            f16[i] != (padding ? 0xFC00 : 0x0000))
            FAIL("sequence " << seq << ": mask entry " << i << " of " << s << " is " << f32[i] << " (f32) / "
                             << f16[i] << " (f16 bits); with " << n_valid << " valid rows it should be "
                             << (padding ? "-inf" : "0"));
    }
}

void WindowChecker::check_region(uint32_t seq, int layer, int head, int a, const kvrt_static_window& win,
                                 uint64_t start) {
    const uint64_t row_stride = win.row_stride;
    const uint64_t base = win.offset - start * row_stride;
    const auto key = std::make_tuple(seq, layer, head, a);
    const auto it = bases_.find(key);
    if (it != bases_.end()) {
        INFO("window offset " << win.offset << " with the window at row " << start << " puts the region at " << base
                              << "; it was at " << it->second.second);
        REQUIRE(it->second.first == win.buffer);
        REQUIRE(it->second.second == base);
        return;
    }
    const uint64_t region = uint64_t{rr_} * row_stride;
    for (const auto& [other, place] : bases_) {
        INFO("the region at offset " << base << " and another one at " << place.second);
        REQUIRE_FALSE((place.first == win.buffer && base < place.second + region && place.second < base + region));
    }
    bases_[key] = {win.buffer, base};
}

void WindowChecker::check_window(kvrt_cache cache, uint32_t seq, const WindowModel& model, int32_t pos_last, int layer,
                                 int head, int a, const std::vector<float>& read) {
    const uint32_t n_valid = model.n_valid();
    const int32_t pos_first = n_valid ? pos_last - static_cast<int32_t>(n_valid) + 1 : -1;
    const size_t dh = static_cast<size_t>(cfg_.head_dim), kvd = static_cast<size_t>(cfg_.kv_dim());
    const uint64_t row_stride = dh * eb_;
    const QuantScale scale =
        is_static_scale(type_) ? (a ? v_scales_ : k_scales_)[static_cast<size_t>(layer)] : QuantScale{};
    kvrt_static_window win = KVRT_STATIC_WINDOW_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_static_get_window(cache, static_cast<int32_t>(seq), layer, static_cast<uint32_t>(head),
                                                 a ? KVRT_KV_ARRAY_V : KVRT_KV_ARRAY_K, &win));
    uint64_t buffer_size = 0;
    KVRT_REQUIRE_OK(kvrt_buffer_get_size(win.buffer, &buffer_size));
    INFO("sequence " << seq << ", layer " << layer << ", KV head " << head << ", " << (a ? "V" : "K"));

    // The description.
    REQUIRE(win.rows == w_);
    REQUIRE(win.row_stride == row_stride);
    REQUIRE(win.bytes == uint64_t{w_} * row_stride);
    REQUIRE(win.n_valid == n_valid);
    REQUIRE(win.pos_first == pos_first);
    REQUIRE(win.pos_last == (n_valid ? pos_last : -1));
    REQUIRE(win.element_type == type_);
    REQUIRE(win.scale == scale.scale);
    REQUIRE(win.zero_point == scale.zero_point);
    REQUIRE(win.offset % 4 == 0);
    REQUIRE(win.offset + win.bytes <= buffer_size);
    REQUIRE(win.offset >= uint64_t{model.start()} * row_stride);
    check_region(seq, layer, head, a, win, model.start());

    // The bytes: padding first, then the valid rows, oldest first; each the
    // reference encoding of the row given to kvrt, and what kvrt_cache_read
    // gives for it.
    std::vector<uint8_t> bytes(win.bytes, 0);
    KVRT_REQUIRE_OK(kvrt_buffer_download(win.buffer, win.offset, bytes.data(), win.bytes));
    const std::vector<float>& given = a ? v_[seq] : k_[seq];
    for (uint32_t j = 0; j < n_valid; ++j) {
        const int32_t pos = pos_first + static_cast<int32_t>(j);
        const uint8_t* row = bytes.data() + (uint64_t{w_ - n_valid} + j) * row_stride;
        const float* x = given.data() +
                         (static_cast<size_t>(pos) % w_ * static_cast<size_t>(cfg_.n_layers) + static_cast<size_t>(layer)) *
                             kvd +
                         static_cast<size_t>(head) * dh;
        const float* got = read.data() + (static_cast<size_t>(layer) * n_valid + j) * kvd + static_cast<size_t>(head) * dh;
        const std::vector<uint8_t> want = reference_encode(type_, x, dh, scale);
        const std::vector<float> value = decode(row, dh, scale);
        for (size_t i = 0; i < dh; ++i) {
            // Static-scale values are scale * (q - zero point): allow the dequantizer one rounding.
            const float tol = is_static_scale(type_) ? 2e-7f * std::fabs(got[i]) + 1e-30f : 0.0f;
            if (std::memcmp(want.data() + i * eb_, row + i * eb_, eb_) != 0 || std::fabs(value[i] - got[i]) > tol)
                FAIL("row of position " << pos << ", value " << i << ": the window holds " << value[i]
                                        << ", the reference encodes the row's " << x[i] << " as "
                                        << decode(want.data() + i * eb_, 1, scale)[0] << ", kvrt_cache_read gives "
                                        << got[i]);
        }
        ++rows_;
    }
    ++windows_;
}

void WindowChecker::check(kvrt_cache cache, uint32_t seq, const WindowModel& model, int32_t pos_last,
                          const std::vector<float>& cache_k, const std::vector<float>& cache_v) {
    for (int layer = 0; layer < cfg_.n_layers; ++layer)
        for (int head = 0; head < cfg_.n_kv_heads; ++head)
            for (int a = 0; a < 2; ++a) check_window(cache, seq, model, pos_last, layer, head, a, a ? cache_v : cache_k);
    check_mask(cache, seq, model.n_valid());
}

}  // namespace kvrt_test::decode
