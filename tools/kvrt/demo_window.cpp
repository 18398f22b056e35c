// The static strategy's window model and checks; see demo_window.hpp.
#include "demo_window.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "kv_types.hpp"

namespace cli::demo {

uint32_t WindowModel::append(uint32_t n, bool* slid) {
    uint32_t row = 0;
    *slid = uint64_t{start_} + w_ + n > rr_;
    if (!*slid) {
        row = start_ + w_;
        start_ += n;
    } else {
        const uint32_t keep = std::min(n_valid_, w_ - n);
        if (keep > 0) {
            ++slides_;
            rows_moved_ += keep;
            // Source rows start at start + W - keep, destination rows at W - n - keep.
            if (uint64_t{start_} + n < keep) ++overlapping_;
        }
        row = w_ - n;
        start_ = 0;
    }
    n_valid_ = std::min(n_valid_ + n, w_);
    rows_appended_ += n;
    return row;
}

WindowChecker::WindowChecker(const ModelConfig& cfg, uint32_t seqs, uint32_t window_rows, uint32_t reserved_rows,
                             kvrt_type type, std::vector<QuantScale> k_scales,
                             std::vector<QuantScale> v_scales)
    : cfg_(cfg),
      w_(window_rows),
      rr_(reserved_rows),
      type_(type),
      eb_(value_bytes(type)),
      k_scales_(std::move(k_scales)),
      v_scales_(std::move(v_scales)) {
    for (const QuantScale& s : k_scales_) k_inv_.push_back(1.0f / s.scale);
    for (const QuantScale& s : v_scales_) v_inv_.push_back(1.0f / s.scale);
    const size_t per_seq = static_cast<size_t>(w_) * static_cast<size_t>(cfg.n_layers) * static_cast<size_t>(cfg.kv_dim());
    k_.assign(seqs, std::vector<float>(per_seq, 0.0f));
    v_.assign(seqs, std::vector<float>(per_seq, 0.0f));
}

void WindowChecker::record(uint32_t seq, int32_t pos, int layer, const float* k, const float* v) {
    const size_t kvd = static_cast<size_t>(cfg_.kv_dim());
    const size_t off = (static_cast<size_t>(pos) % w_ * static_cast<size_t>(cfg_.n_layers) + static_cast<size_t>(layer)) * kvd;
    std::copy_n(k, kvd, k_[seq].data() + off);
    std::copy_n(v, kvd, v_[seq].data() + off);
    if (!is_static_scale(type_)) return;
    // Values the static scale cannot represent are clamped to its range.
    const double hi = type_ == KVRT_TYPE_U8_STATIC ? 255.0 : 65535.0;
    for (int a = 0; a < 2; ++a) {
        const float* x = a ? v : k;
        const QuantScale& s = (a ? v_scales_ : k_scales_)[static_cast<size_t>(layer)];
        const float inv = (a ? v_inv_ : k_inv_)[static_cast<size_t>(layer)];
        for (size_t i = 0; i < kvd; ++i) {
            const double q = std::round(static_cast<double>(x[i] * inv)) + s.zero_point;
            if (q < 0.0 || q > hi) ++fig_.clipped_values;
        }
        fig_.stored_values += kvd;
    }
}

void WindowChecker::encode(float x, const QuantScale* s, float inv, uint8_t* out) const {
    switch (type_) {
        case KVRT_TYPE_F32: std::memcpy(out, &x, 4); break;
        case KVRT_TYPE_U8_STATIC: out[0] = static_cast<uint8_t>(static_quantize(x, inv, s->zero_point, 255)); break;
        case KVRT_TYPE_U16_STATIC: {
            const uint16_t q = static_cast<uint16_t>(static_quantize(x, inv, s->zero_point, 65535));
            std::memcpy(out, &q, 2);
            break;
        }
        default: {
            const uint16_t h = f32_to_f16(x);
            std::memcpy(out, &h, 2);
        }
    }
}

float WindowChecker::decode(const uint8_t* in, const QuantScale* s) const {
    switch (type_) {
        case KVRT_TYPE_F32: {
            float x;
            std::memcpy(&x, in, 4);
            return x;
        }
        case KVRT_TYPE_U8_STATIC: return static_dequantize(in[0], *s);
        case KVRT_TYPE_U16_STATIC: {
            uint16_t q;
            std::memcpy(&q, in, 2);
            return static_dequantize(q, *s);
        }
        default: {
            uint16_t h;
            std::memcpy(&h, in, 2);
            return f16_to_f32(h);
        }
    }
}

void WindowChecker::mismatch(const std::string& what) {
    if (fig_.mismatches++ == 0) fig_.first_mismatch = what;
    if (fig_.mismatches <= 5) std::fprintf(stderr, "error: static window check: %s\n", what.c_str());
}

kvrt_result WindowChecker::check_mask(kvrt_cache cache, uint32_t seq, uint32_t n_valid, const char** what) {
    const size_t s = static_cast<size_t>(w_) + 1;
    std::vector<float> f32(s, 1.0f);
    std::vector<uint16_t> f16(s, 0x3C00);
    *what = "reading the static mask";
    kvrt_result r = kvrt_cache_get_static_mask(cache, static_cast<int32_t>(seq), KVRT_TYPE_F32, f32.data(), s * 4);
    if (r == KVRT_SUCCESS) r = kvrt_cache_get_static_mask(cache, static_cast<int32_t>(seq), KVRT_TYPE_F16, f16.data(), s * 2);
    if (r != KVRT_SUCCESS) return r;
    const size_t pad = w_ - n_valid;  // leading -inf entries; the rest, and the step's own entry, 0
    for (size_t i = 0; i < s; ++i) {
        const bool padding = i < pad;
        const bool f32_ok = padding ? std::isinf(f32[i]) && f32[i] < 0 : f32[i] == 0.0f;
        const bool f16_ok = f16[i] == (padding ? 0xFC00 : 0x0000);
        if (!f32_ok || !f16_ok) {
            char buf[200];
            std::snprintf(buf, sizeof(buf),
                          "sequence %u: mask entry %zu of %zu is %g (f32) / 0x%04x (f16); with %u valid rows it "
                          "should be %s",
                          seq, i, s, static_cast<double>(f32[i]), f16[i], n_valid, padding ? "-inf" : "0");
            mismatch(buf);
            break;
        }
    }
    ++fig_.masks;
    return KVRT_SUCCESS;
}

kvrt_result WindowChecker::check(kvrt_cache cache, uint32_t seq, const WindowModel& model, int32_t pos_last,
                                 const std::vector<float>& cache_k, const std::vector<float>& cache_v,
                                 const char** what) {
    const uint32_t n_valid = model.n_valid();
    const int32_t pos_first = n_valid ? pos_last - static_cast<int32_t>(n_valid) + 1 : -1;
    const uint64_t row_stride = static_cast<uint64_t>(cfg_.head_dim) * eb_;
    const size_t kvd = static_cast<size_t>(cfg_.kv_dim());
    std::vector<uint8_t> bytes;
    char buf[320];
    for (int layer = 0; layer < cfg_.n_layers; ++layer) {
        for (int head = 0; head < cfg_.n_kv_heads; ++head) {
            for (int a = 0; a < 2; ++a) {
                const kvrt_kv_array array = a ? KVRT_KV_ARRAY_V : KVRT_KV_ARRAY_K;
                const char* name = a ? "V" : "K";
                const QuantScale* s = nullptr;
                float inv = 0;
                if (is_static_scale(type_)) {
                    s = &(a ? v_scales_ : k_scales_)[static_cast<size_t>(layer)];
                    inv = (a ? v_inv_ : k_inv_)[static_cast<size_t>(layer)];
                }
                kvrt_static_window win = KVRT_STATIC_WINDOW_INIT;
                *what = "describing a static window";
                kvrt_result r = kvrt_cache_get_static_window(cache, static_cast<int32_t>(seq), static_cast<int32_t>(layer),
                                                             static_cast<uint32_t>(head), array, &win);
                uint64_t buffer_size = 0;
                if (r == KVRT_SUCCESS) {
                    *what = "reading a window buffer's size";
                    r = kvrt_buffer_get_size(win.buffer, &buffer_size);
                }
                if (r != KVRT_SUCCESS) return r;
                ++fig_.windows;
                std::snprintf(buf, sizeof(buf), "sequence %u, layer %d, KV head %d, %s: ", seq, layer, head, name);
                const std::string where = buf;

                // The description.
                const bool scale_ok = s ? win.scale == s->scale && win.zero_point == s->zero_point
                                        : win.scale == 0.0f && win.zero_point == 0;
                if (win.rows != w_ || win.row_stride != row_stride || win.bytes != uint64_t{w_} * row_stride ||
                    win.n_valid != n_valid || win.pos_first != pos_first ||
                    win.pos_last != (n_valid ? pos_last : -1) || win.element_type != type_ || !scale_ok ||
                    win.offset % 4 || win.offset + win.bytes > buffer_size ||
                    win.offset < uint64_t{model.start()} * row_stride) {
                    std::snprintf(buf, sizeof(buf),
                                  "window of %u rows of %llu bytes at offset %llu (buffer of %llu), %u valid, "
                                  "positions %d..%d, type %d; expected %u rows of %llu bytes, %u valid, positions "
                                  "%d..%d, type %d, inside the buffer",
                                  win.rows, static_cast<unsigned long long>(win.row_stride),
                                  static_cast<unsigned long long>(win.offset),
                                  static_cast<unsigned long long>(buffer_size), win.n_valid, win.pos_first,
                                  win.pos_last, static_cast<int>(win.element_type), w_,
                                  static_cast<unsigned long long>(row_stride), n_valid, pos_first,
                                  n_valid ? pos_last : -1, static_cast<int>(type_));
                    mismatch(where + buf);
                    continue;
                }
                // The offset: the region's base never moves, and regions do not overlap.
                const uint64_t base = win.offset - uint64_t{model.start()} * row_stride;
                const auto key = std::make_tuple(seq, static_cast<uint32_t>(layer), static_cast<uint32_t>(head), a);
                auto it = bases_.find(key);
                if (it == bases_.end()) {
                    const uint64_t region = uint64_t{rr_} * row_stride;
                    for (const auto& [other, place] : bases_) {
                        if (place.first == win.buffer && base < place.second + region && place.second < base + region) {
                            std::snprintf(buf, sizeof(buf), "the region at offset %llu overlaps another one at %llu",
                                          static_cast<unsigned long long>(base),
                                          static_cast<unsigned long long>(place.second));
                            mismatch(where + buf);
                        }
                    }
                    bases_[key] = {win.buffer, base};
                } else if (it->second.first != win.buffer || it->second.second != base) {
                    std::snprintf(buf, sizeof(buf),
                                  "window offset %llu with the window at row %u puts the region at %llu; it was at "
                                  "%llu (or in another buffer)",
                                  static_cast<unsigned long long>(win.offset), model.start(),
                                  static_cast<unsigned long long>(base),
                                  static_cast<unsigned long long>(it->second.second));
                    mismatch(where + buf);
                }

                // The bytes: padding first, then the valid rows, oldest first.
                bytes.assign(win.bytes, 0);
                *what = "downloading a static window";
                if ((r = kvrt_buffer_download(win.buffer, win.offset, bytes.data(), win.bytes)) != KVRT_SUCCESS) return r;
                fig_.bytes += win.bytes;
                const std::vector<float>& stored = a ? v_[seq] : k_[seq];
                const std::vector<float>& read = a ? cache_v : cache_k;
                std::vector<uint8_t> want(eb_);
                bool bad = false;
                for (uint32_t j = 0; j < n_valid && !bad; ++j) {
                    const int32_t pos = pos_first + static_cast<int32_t>(j);
                    const uint8_t* row = bytes.data() + (uint64_t{w_ - n_valid} + j) * row_stride;
                    const float* x = stored.data() +
                                     (static_cast<size_t>(pos) % w_ * static_cast<size_t>(cfg_.n_layers) +
                                      static_cast<size_t>(layer)) * kvd + static_cast<size_t>(head) * cfg_.head_dim;
                    const float* got = read.data() + (static_cast<size_t>(layer) * n_valid + j) * kvd +
                                       static_cast<size_t>(head) * cfg_.head_dim;
                    for (int i = 0; i < cfg_.head_dim && !bad; ++i) {
                        encode(x[i], s, inv, want.data());
                        const float value = decode(row + static_cast<size_t>(i) * eb_, s);
                        // Static-scale values are scale * (q - zero point): allow the dequantizer one rounding.
                        const float tol = s ? 2e-7f * std::fabs(got[i]) + 1e-30f : 0.0f;
                        if (std::memcmp(want.data(), row + static_cast<size_t>(i) * eb_, eb_) != 0 ||
                            std::fabs(value - got[i]) > tol) {
                            std::string held, expected;
                            for (uint32_t b = 0; b < eb_; ++b) {
                                char hex[4];
                                std::snprintf(hex, sizeof(hex), "%02x", row[static_cast<size_t>(i) * eb_ + b]);
                                held += hex;
                                std::snprintf(hex, sizeof(hex), "%02x", want[b]);
                                expected += hex;
                            }
                            std::snprintf(buf, sizeof(buf),
                                          "row of position %d, value %d: the window holds bytes %s (%.9g), the "
                                          "demo's %.9g in %s is %s; kvrt_cache_read gives %.9g",
                                          pos, i, held.c_str(), static_cast<double>(value), static_cast<double>(x[i]),
                                          type_name(type_), expected.c_str(), static_cast<double>(got[i]));
                            mismatch(where + buf);
                            bad = true;
                        }
                    }
                    ++fig_.rows;
                }
            }
        }
    }
    return check_mask(cache, seq, n_valid, what);
}

}  // namespace cli::demo
