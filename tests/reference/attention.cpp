// Double-precision attention reference; see attention.hpp.
#include "reference/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace kvrt::ref {

namespace {

void check_params(const AttnParams& p) {
    if (p.n_heads <= 0 || p.n_kv_heads <= 0 || p.n_heads % p.n_kv_heads != 0) {
        throw std::invalid_argument("kvrt::ref::attention: n_heads must be a positive multiple of n_kv_heads");
    }
    if (p.head_dim_k <= 0 || p.head_dim_v <= 0) {
        throw std::invalid_argument("kvrt::ref::attention: head dims must be positive");
    }
    if (p.window < 0 || p.n_keep < 0) {
        throw std::invalid_argument("kvrt::ref::attention: window and n_keep must be >= 0");
    }
    if (!p.sinks.empty() && p.sinks.size() != static_cast<size_t>(p.n_heads)) {
        throw std::invalid_argument("kvrt::ref::attention: sinks must have n_heads entries");
    }
}

// The final logit of one visible cell (scale, soft-cap, ALiBi).
double cell_logit(const AttnParams& p, const float* q_head, const float* k_head,
                  const AttnCell& cell, const AttnQuery& query, double slope) {
    double dot = 0.0;
    for (int i = 0; i < p.head_dim_k; ++i) {
        dot += static_cast<double>(q_head[i]) * static_cast<double>(k_head[i]);
    }
    double s = p.scale * dot;
    if (p.softcap != 0.0) {
        s = p.softcap * std::tanh(s / p.softcap);
    }
    if (p.max_bias > 0.0) {
        const double dist = std::fabs(static_cast<double>(query.pos) - static_cast<double>(cell.pos));
        s += slope * -dist;
    }
    return s;
}

}  // namespace

int kv_head_of(int h, int n_heads, int n_kv_heads) {
    if (n_heads <= 0 || n_kv_heads <= 0 || n_heads % n_kv_heads != 0 || h < 0 || h >= n_heads) {
        throw std::invalid_argument("kvrt::ref::kv_head_of: bad head geometry");
    }
    return h / (n_heads / n_kv_heads);
}

double alibi_slope(int h, int n_heads, double max_bias) {
    if (max_bias <= 0.0) {
        return 1.0;
    }
    // Largest power of two <= n_heads.
    int n_log2 = 1;
    while (n_log2 * 2 <= n_heads) {
        n_log2 *= 2;
    }
    const double m0 = std::pow(2.0, -max_bias / n_log2);
    const double m1 = std::pow(2.0, -(max_bias / 2.0) / n_log2);
    return h < n_log2 ? std::pow(m0, h + 1) : std::pow(m1, 2 * (h - n_log2) + 1);
}

bool cell_visible(const AttnParams& p, const AttnCell& cell, const AttnQuery& query) {
    if (cell.pos < 0) {
        return false;
    }
    if (std::find(cell.seq_ids.begin(), cell.seq_ids.end(), query.seq_id) == cell.seq_ids.end()) {
        return false;
    }
    if (p.causal && cell.pos > query.pos) {
        return false;
    }
    if (p.window > 0 && cell.pos >= p.n_keep) {
        // 64-bit difference: positions may be far apart when not causal.
        const int64_t dist = static_cast<int64_t>(query.pos) - cell.pos;
        if (dist >= p.window) {
            return false;
        }
    }
    return true;
}

std::vector<double> attention_weights(const AttnParams& p, const float* q_head,
                                      const AttnQuery& query, int h, const float* k,
                                      const std::vector<AttnCell>& cells) {
    check_params(p);
    const int g = kv_head_of(h, p.n_heads, p.n_kv_heads);
    const double slope = alibi_slope(h, p.n_heads, p.max_bias);
    const size_t dk = static_cast<size_t>(p.head_dim_k);
    const size_t k_row = static_cast<size_t>(p.n_kv_heads) * dk;

    std::vector<double> w(cells.size(), 0.0);
    std::vector<char> seen(cells.size(), 0);
    double max_logit = -std::numeric_limits<double>::infinity();
    bool any = false;
    for (size_t c = 0; c < cells.size(); ++c) {
        if (!cell_visible(p, cells[c], query) || (query.hidden && (*query.hidden)[c] != 0)) {
            continue;
        }
        const float* k_head = k + c * k_row + static_cast<size_t>(g) * dk;
        w[c] = cell_logit(p, q_head, k_head, cells[c], query, slope);
        seen[c] = 1;
        max_logit = std::max(max_logit, w[c]);
        any = true;
    }
    if (!any) {
        return w;  // all zero
    }
    const bool has_sink = !p.sinks.empty();
    const double sink = has_sink ? static_cast<double>(p.sinks[static_cast<size_t>(h)]) : 0.0;
    if (has_sink) {
        max_logit = std::max(max_logit, sink);
    }
    double sum = has_sink ? std::exp(sink - max_logit) : 0.0;
    for (size_t c = 0; c < cells.size(); ++c) {
        if (seen[c] != 0) {
            w[c] = std::exp(w[c] - max_logit);
            sum += w[c];
        }
    }
    for (size_t c = 0; c < cells.size(); ++c) {
        w[c] /= sum;  // invisible cells stay 0
    }
    return w;
}

std::vector<double> attention(const AttnParams& p, const float* q,
                              const std::vector<AttnQuery>& queries, const float* k,
                              const float* v, const std::vector<AttnCell>& cells) {
    check_params(p);
    const size_t dk = static_cast<size_t>(p.head_dim_k);
    const size_t dv = static_cast<size_t>(p.head_dim_v);
    const size_t n_heads = static_cast<size_t>(p.n_heads);
    const size_t v_row = static_cast<size_t>(p.n_kv_heads) * dv;

    std::vector<double> out(queries.size() * n_heads * dv, 0.0);
    for (size_t t = 0; t < queries.size(); ++t) {
        for (size_t h = 0; h < n_heads; ++h) {
            const float* q_head = q + (t * n_heads + h) * dk;
            const std::vector<double> w =
                attention_weights(p, q_head, queries[t], static_cast<int>(h), k, cells);
            const size_t g = static_cast<size_t>(kv_head_of(static_cast<int>(h), p.n_heads, p.n_kv_heads));
            double* o = out.data() + (t * n_heads + h) * dv;
            for (size_t c = 0; c < cells.size(); ++c) {
                if (w[c] == 0.0) {
                    continue;
                }
                const float* v_head = v + c * v_row + g * dv;
                for (size_t i = 0; i < dv; ++i) {
                    o[i] += w[c] * static_cast<double>(v_head[i]);
                }
            }
        }
    }
    return out;
}

}  // namespace kvrt::ref
