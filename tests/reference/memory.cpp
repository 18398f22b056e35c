// Double-precision MV/MK memory reference; see memory.hpp.
#include "reference/memory.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace kvrt::ref {

namespace {

// MK x, for a vector x of e floats, scaled.
std::vector<double> key_scores(const MemoryHead& mem, const float* x, double scale) {
    std::vector<double> s(static_cast<size_t>(mem.m), 0.0);
    for (int r = 0; r < mem.m; ++r) {
        const double* row = mem.mk.data() + static_cast<size_t>(r) * static_cast<size_t>(mem.e);
        double dot = 0.0;
        for (int j = 0; j < mem.e; ++j) {
            dot += row[j] * static_cast<double>(x[j]);
        }
        s[static_cast<size_t>(r)] = scale * dot;
    }
    return s;
}

}  // namespace

MemoryHead memory_head_zero(int m, int e, int d) {
    if (m <= 0 || e <= 0 || d <= 0) {
        throw std::invalid_argument("kvrt::ref::memory: sizes must be positive");
    }
    MemoryHead mem;
    mem.m = m;
    mem.e = e;
    mem.d = d;
    mem.mk.assign(static_cast<size_t>(m) * static_cast<size_t>(e), 0.0);
    mem.mv.assign(static_cast<size_t>(m) * static_cast<size_t>(d), 0.0);
    return mem;
}

MemoryHead memory_head_init(int m, int e, int d, const std::vector<float>& mk,
                            const std::vector<float>& mv) {
    MemoryHead mem = memory_head_zero(m, e, d);
    if (mk.size() != mem.mk.size() || mv.size() != mem.mv.size()) {
        throw std::invalid_argument("kvrt::ref::memory: MK must be m*e and MV m*d values");
    }
    std::copy(mk.begin(), mk.end(), mem.mk.begin());
    std::copy(mv.begin(), mv.end(), mem.mv.begin());
    return mem;
}

void softmax_in_place(double* x, size_t n) {
    if (n == 0) {
        return;
    }
    const double mx = *std::max_element(x, x + n);
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - mx);
        sum += x[i];
    }
    for (size_t i = 0; i < n; ++i) {
        x[i] /= sum;
    }
}

std::vector<double> memory_update_weights(const MemoryHead& mem, const float* wq) {
    std::vector<double> ww = key_scores(mem, wq, 1.0);
    softmax_in_place(ww.data(), ww.size());
    return ww;
}

void memory_update(MemoryHead& mem, const float* wq, const float* wv) {
    const std::vector<double> ww = memory_update_weights(mem, wq);
    for (int r = 0; r < mem.m; ++r) {
        double* row = mem.mv.data() + static_cast<size_t>(r) * static_cast<size_t>(mem.d);
        for (int j = 0; j < mem.d; ++j) {
            row[j] += ww[static_cast<size_t>(r)] * static_cast<double>(wv[j]);
        }
    }
}

void memory_read(const MemoryHead& mem, const float* q, double scale, double* out) {
    std::vector<double> w = key_scores(mem, q, scale);
    softmax_in_place(w.data(), w.size());
    std::fill(out, out + static_cast<size_t>(mem.d), 0.0);
    for (int r = 0; r < mem.m; ++r) {
        const double* row = mem.mv.data() + static_cast<size_t>(r) * static_cast<size_t>(mem.d);
        for (int j = 0; j < mem.d; ++j) {
            out[j] += w[static_cast<size_t>(r)] * row[j];
        }
    }
}

void memory_process_chunk(MemoryHead& mem, int n, const float* wq, const float* wv,
                          const float* q, double scale, double* out) {
    for (int t = 0; t < n; ++t) {
        const size_t te = static_cast<size_t>(t) * static_cast<size_t>(mem.e);
        const size_t td = static_cast<size_t>(t) * static_cast<size_t>(mem.d);
        memory_update(mem, wq + te, wv + td);
        memory_read(mem, q + te, scale, out + td);
    }
}

MemoryHead& Memory::at(int layer, int h) {
    if (layer < 0 || layer >= n_layers || h < 0 || h >= n_heads) {
        throw std::out_of_range("kvrt::ref::Memory::at: head out of range");
    }
    return heads[static_cast<size_t>(layer * n_heads + h)];
}

const MemoryHead& Memory::at(int layer, int h) const {
    return const_cast<Memory*>(this)->at(layer, h);
}

Memory memory_zero(int n_layers, int n_heads, int m, int e, int d) {
    if (n_layers <= 0 || n_heads <= 0) {
        throw std::invalid_argument("kvrt::ref::memory: n_layers and n_heads must be positive");
    }
    Memory mem;
    mem.n_layers = n_layers;
    mem.n_heads = n_heads;
    mem.heads.assign(static_cast<size_t>(n_layers) * static_cast<size_t>(n_heads), memory_head_zero(m, e, d));
    return mem;
}

}  // namespace kvrt::ref
