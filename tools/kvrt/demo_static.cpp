// The static strategy of `kvrt demo`; see demo_static.hpp.
#include "demo_static.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "cli.hpp"
#include "demo_model.hpp"
#include "demo_window.hpp"
#include "kv_types.hpp"

namespace cli::demo {

namespace {

using runner::Batch;
using runner::Labels;

// Causal attention of a batch of one sequence over itself, in double: the
// calibration pass's stand-in for the cache.
void self_attention(const ModelConfig& cfg, const AttentionIO& io) {
    const int dh = cfg.head_dim, qd = cfg.q_dim(), kvd = cfg.kv_dim(), group = cfg.n_heads / cfg.n_kv_heads;
    const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
    std::vector<double> w(static_cast<size_t>(io.n));
    for (int t = 0; t < io.n; ++t) {
        for (int h = 0; h < cfg.n_heads; ++h) {
            const float* q = io.q + static_cast<size_t>(t) * qd + static_cast<size_t>(h) * dh;
            const size_t off = static_cast<size_t>(h / group) * dh;
            double top = -INFINITY, sum = 0;
            for (int c = 0; c <= t; ++c) {
                const float* k = io.k + static_cast<size_t>(c) * kvd + off;
                double dot = 0;
                for (int i = 0; i < dh; ++i) dot += static_cast<double>(q[i]) * k[i];
                w[static_cast<size_t>(c)] = dot * scale;
                top = std::max(top, w[static_cast<size_t>(c)]);
            }
            for (int c = 0; c <= t; ++c) sum += (w[static_cast<size_t>(c)] = std::exp(w[static_cast<size_t>(c)] - top));
            float* o = io.out + static_cast<size_t>(t) * qd + static_cast<size_t>(h) * dh;
            for (int i = 0; i < dh; ++i) {
                double acc = 0;
                for (int c = 0; c <= t; ++c) acc += w[static_cast<size_t>(c)] * io.v[static_cast<size_t>(c) * kvd + off + i];
                o[i] = static_cast<float>(acc / sum);
            }
        }
    }
}

class StaticRunner : public runner::RunnerBase {
public:
    StaticRunner(const Options& opt, Results* res)
        : RunnerBase(opt, res, opt.seqs * opt.capacity,
                     Labels{"appending the batch", "recording the K/V rows", "running the K/V rows and attention",
                            "reading the windows back"}),
          w_(opt.capacity),
          rr_(static_cast<uint32_t>(std::ceil(opt.reserve * static_cast<double>(opt.capacity)))),
          windows_(opt.seqs, WindowModel(w_, rr_)) {}

private:
    bool calibrate();
    bool setup() override;
    bool prompt() override;
    bool decode() override;
    void finish() override;
    // Checks the cells kvrt_cache_place chose against the window model, which
    // appends the batch too; the mirror's cells follow the positions.
    void placed(const Batch& b, const std::vector<uint32_t>& cells) override;
    void stored(const AttentionIO& io, const Batch& b, const std::vector<uint32_t>& cells) override;
    void checked_cells(std::vector<uint32_t>* cells, std::vector<uint32_t>* mirror_cells) const override;
    std::string progress_state() const override;
    // The valid cells of `seq`'s window, oldest first: kvrt's (seq x reserved
    // rows + row) and the mirror's (seq x window rows + position mod window rows).
    void window_cells(uint32_t seq, std::vector<uint32_t>* cells, std::vector<uint32_t>* mirror_cells) const;
    bool check_windows();
    bool device_bytes(uint64_t* out);

    // mirror_ holds cells s x w_ + pos % w_: each sequence's window as a ring.
    const uint32_t w_, rr_;  // window rows (S - 1) and reserved rows per region
    std::vector<WindowModel> windows_;
    std::unique_ptr<WindowChecker> window_checker_;
    std::vector<QuantScale> k_scales_, v_scales_;
    bool slide_checked_ = false;    // a step that slid was checked
    uint32_t last_slide_check_ = 0;  // the latest such step
};

// Static-scale types: per-layer scales from the prompt's K/V in f32 (see
// demo_static.hpp). A static graph's scales are fixed before it runs; so are
// the cache's.
bool StaticRunner::calibrate() {
    if (!is_static_scale(opt_.kv_type)) return true;
    const ModelConfig& cfg = model_.config();
    const size_t n = std::strlen(kPrompt);
    std::vector<int> tokens;
    std::vector<int32_t> positions;
    for (size_t i = 0; i < n; ++i) {
        tokens.push_back(static_cast<unsigned char>(kPrompt[i]));
        positions.push_back(static_cast<int32_t>(i));
    }
    std::vector<double> k_max(static_cast<size_t>(cfg.n_layers), 0.0), v_max(k_max);
    std::vector<float> logits;
    model_.forward(
        tokens, positions, {},
        [&](const AttentionIO& io) {
            const size_t kvd = static_cast<size_t>(cfg.kv_dim());
            double& km = k_max[static_cast<size_t>(io.layer)];
            double& vm = v_max[static_cast<size_t>(io.layer)];
            for (size_t i = 0; i < static_cast<size_t>(io.n) * kvd; i += 2) {
                // A rotation keeps each pair's norm: it bounds the pair's values at any position.
                km = std::max(km, std::hypot(static_cast<double>(io.k_raw[i]), static_cast<double>(io.k_raw[i + 1])));
                vm = std::max({vm, std::fabs(static_cast<double>(io.v[i])), std::fabs(static_cast<double>(io.v[i + 1]))});
            }
            self_attention(cfg, io);
            return true;
        },
        &logits);
    const bool u8 = opt_.kv_type == KVRT_TYPE_U8_STATIC;
    const double steps = u8 ? 127.0 : 32767.0;
    const double margin = u8 ? kCalibrationMarginU8 : kCalibrationMarginU16;
    const int32_t zero_point = u8 ? 128 : 32768;
    for (int l = 0; l < cfg.n_layers; ++l) {
        for (int a = 0; a < 2; ++a) {
            const double m = (a ? v_max : k_max)[static_cast<size_t>(l)];
            const float scale = m > 0 ? static_cast<float>(margin * m / steps) : 1.0f;
            (a ? v_scales_ : k_scales_).push_back(QuantScale{scale, zero_point});
        }
    }
    res_.stat.k_scales = k_scales_;
    res_.stat.v_scales = v_scales_;
    res_.stat.calibration_margin = margin;
    return true;
}

bool StaticRunner::setup() {
    if (!calibrate()) return false;
    const ModelConfig& cfg = model_.config();
    if (!create_context()) return false;

    StaticScales scales(k_scales_, v_scales_);  // one per layer; none for f16 and f32
    kvrt_rope_desc rope = KVRT_ROPE_DESC_INIT;
    rope.mode = KVRT_ROPE_NORMAL;
    rope.freq_base = static_cast<float>(cfg.rope_base);
    kvrt_static_layout_desc layout = KVRT_STATIC_LAYOUT_DESC_INIT;
    layout.seq_len = w_ + 1;
    layout.reserve = opt_.reserve;
    layout.next = &rope;
    if (is_static_scale(opt_.kv_type)) rope.next = scales.desc();
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.next = &layout;
    d.n_layers = static_cast<uint32_t>(cfg.n_layers);
    d.n_heads = static_cast<uint32_t>(cfg.n_heads);
    d.n_kv_heads = static_cast<uint32_t>(cfg.n_kv_heads);
    d.head_dim_k = static_cast<uint32_t>(cfg.head_dim);
    d.capacity = 0;  // the static layout's: seqs x (S - 1)
    d.max_seqs = opt_.seqs;
    d.type_k = d.type_v = opt_.kv_type;
    d.layout = KVRT_LAYOUT_STATIC;
    d.label = "kvrt demo static cache";
    kvrt_cache_estimate e = KVRT_CACHE_ESTIMATE_INIT;
    if (!ok(kvrt_cache_estimate_size(ctx_, &d, &e), "estimating the cache") ||
        !ok(kvrt_cache_create(ctx_, &d, &cache_), "creating the cache"))
        return false;
    kvrt_cache_info ci = KVRT_CACHE_INFO_INIT;
    if (!ok(kvrt_cache_get_info(cache_, &ci), "reading the cache")) return false;
    Results::StaticFigures& st = res_.stat;
    st.seq_len = w_ + 1;
    st.reserved_rows = rr_;
    st.estimate_bytes = e.device_bytes;
    st.cache_bytes = ci.device_bytes;
    // The demo's reserved rows (ceil(R x (S-1)), as kvrt.h defines them) must be kvrt's.
    const uint64_t row_pair = 2ull * static_cast<uint64_t>(cfg.head_dim) * value_bytes(opt_.kv_type);
    const uint64_t want = uint64_t{opt_.seqs} * static_cast<uint64_t>(cfg.n_layers * cfg.n_kv_heads) * rr_ * row_pair;
    if (e.data_bytes != want)
        return mismatch("kvrt_cache_estimate_size gives %llu bytes of K/V; %u sequences of ceil(%g x %u) = %u rows per "
                        "region make %llu",
                        static_cast<unsigned long long>(e.data_bytes), opt_.seqs, opt_.reserve, w_, rr_,
                        static_cast<unsigned long long>(want));
    window_checker_ = std::make_unique<WindowChecker>(cfg, opt_.seqs, w_, rr_, opt_.kv_type, k_scales_, v_scales_);

    if (!create_stream()) return false;
    // The largest batch is the prompt of every sequence.
    return create_output(uint64_t{opt_.seqs} * std::strlen(kPrompt));
}

// Evaluates the prompt in every sequence as one batch (each sequence has its
// own windows; nothing is shared). Sequence s starts from the s-th most likely
// next token, so that the sequences differ.
bool StaticRunner::prompt() {
    const Clock::time_point t0 = Clock::now();
    const double check0 = res_.check_s;
    const size_t n = std::strlen(kPrompt);
    Batch b;
    for (uint32_t s = 0; s < opt_.seqs; ++s)
        for (size_t i = 0; i < n; ++i) b.add(static_cast<unsigned char>(kPrompt[i]), i, s);
    b.logit_rows = {static_cast<int>(n - 1)};
    std::vector<float> logits;
    if (!evaluate(b, true, &logits)) return false;
    res_.prompt_tokens = static_cast<uint32_t>(n);
    for (uint32_t s = 0; s < opt_.seqs; ++s) {
        seqs_[s].tokens.assign(b.tokens.begin(), b.tokens.begin() + static_cast<long>(n));
        seqs_[s].pending = ranked_token(logits.data(), s);
    }
    if (!check_windows()) return false;
    res_.text.assign(opt_.seqs, std::string());
    res_.prompt_s = seconds_since(t0) - (res_.check_s - check0);
    ScopeTimer t(&res_.runtime_s);
    return device_bytes(&res_.stat.device_bytes_start);
}

// The decode loop: each step appends the pending token of every sequence and
// samples the next greedily. Checked: every check_every-th step, the steps
// whose append slides a window (at most one per check_every steps), and the
// last.
bool StaticRunner::decode() {
    const Clock::time_point t0 = Clock::now();
    const double check0 = res_.check_s;
    for (uint32_t step = 0; step < opt_.tokens; ++step) {
        Batch b;
        bool slides = false;
        uint64_t overlapping = 0;
        for (const WindowModel& m : windows_) overlapping += m.overlapping_slides();
        for (uint32_t s = 0; s < opt_.seqs; ++s) {
            b.add(seqs_[s].pending, seqs_[s].tokens.size(), s);
            b.logit_rows.push_back(static_cast<int>(s));
            WindowModel next = windows_[s];
            bool slid = false;
            next.append(1, &slid);
            slides = slides || slid;
        }
        // Slides are checked too, at most one per check_every steps (with R = 1
        // every step slides).
        const bool slide_check = slides && (!slide_checked_ || step - last_slide_check_ >= opt_.check_every);
        const bool check = slide_check || (step + 1) % opt_.check_every == 0 || step + 1 == opt_.tokens;
        if (slide_check) {
            slide_checked_ = true;
            last_slide_check_ = step;
        }
        std::vector<float> logits;
        if (!evaluate(b, check, &logits)) return false;
        advance(logits);
        for (const WindowModel& m : windows_) overlapping -= m.overlapping_slides();
        if (overlapping != 0 && res_.stat.device_bytes_first_slide == 0) {
            ScopeTimer t(&res_.runtime_s);
            if (!device_bytes(&res_.stat.device_bytes_first_slide)) return false;
        }
        if (check && !check_windows()) return false;
        progress(step + 1, seconds_since(t0) - (res_.check_s - check0));
    }
    progress_clear();
    res_.decode_s = seconds_since(t0) - (res_.check_s - check0);
    ScopeTimer t(&res_.runtime_s);
    return device_bytes(&res_.stat.device_bytes_end);
}

void StaticRunner::placed(const Batch& b, const std::vector<uint32_t>& cells) {
    std::vector<uint32_t> count(opt_.seqs, 0), first_row(opt_.seqs, 0), seen(opt_.seqs, 0);
    for (int32_t s : b.seq_ids) ++count[static_cast<size_t>(s)];
    for (uint32_t s = 0; s < opt_.seqs; ++s) {
        bool slid = false;
        if (count[s]) first_row[s] = windows_[s].append(count[s], &slid);
    }
    for (size_t i = 0; i < cells.size(); ++i) {
        const uint32_t s = static_cast<uint32_t>(b.seq_ids[i]);
        const uint32_t want = s * rr_ + first_row[s] + seen[s]++;
        ++res_.stat.cells_checked;
        if (cells[i] != want && res_.stat.cell_mismatches++ < 5)
            mismatch("kvrt_cache_place put position %d of sequence %u in cell %u; the window model expects %u "
                     "(sequence x %u reserved rows + row %u)",
                     b.positions[i], s, cells[i], want, rr_, want - s * rr_);
        mirror_.place(s * w_ + static_cast<uint32_t>(b.positions[i]) % w_, b.positions[i], static_cast<int>(s));
    }
}

// After a layer's K/V rows were stored: the mirror and the window checker keep them.
void StaticRunner::stored(const AttentionIO& io, const Batch& b, const std::vector<uint32_t>&) {
    const size_t kvd = static_cast<size_t>(model_.config().kv_dim());
    for (uint32_t i = 0; i < static_cast<uint32_t>(io.n); ++i) {
        const uint32_t s = static_cast<uint32_t>(b.seq_ids[i]);
        const int32_t pos = b.positions[i];
        mirror_.set_layer(s * w_ + static_cast<uint32_t>(pos) % w_, io.layer, io.k_raw + i * kvd, io.v + i * kvd);
        window_checker_->record(s, pos, io.layer, io.k + i * kvd, io.v + i * kvd);
    }
}

// The reference check runs over the windows' valid cells.
void StaticRunner::checked_cells(std::vector<uint32_t>* cells, std::vector<uint32_t>* mirror_cells) const {
    for (uint32_t s = 0; s < opt_.seqs; ++s) window_cells(s, cells, mirror_cells);
}

std::string StaticRunner::progress_state() const {
    uint64_t slides = 0;
    for (const WindowModel& m : windows_) slides += m.slides();
    char buf[128];
    std::snprintf(buf, sizeof buf, "window %u/%u rows | %llu slides", windows_[0].n_valid(), w_,
                  static_cast<unsigned long long>(slides));
    return buf;
}

void StaticRunner::window_cells(uint32_t seq, std::vector<uint32_t>* cells, std::vector<uint32_t>* mirror_cells) const {
    const WindowModel& m = windows_[seq];
    const int32_t next_pos = mirror_.pos_max(static_cast<int>(seq)) + 1;
    for (uint32_t j = 0; j < m.n_valid(); ++j) {
        const int32_t pos = next_pos - static_cast<int32_t>(m.n_valid()) + static_cast<int32_t>(j);
        cells->push_back(seq * rr_ + m.first_valid_row() + j);
        mirror_cells->push_back(seq * w_ + static_cast<uint32_t>(pos) % w_);
    }
}

// Checks every window of every sequence (demo_window.hpp), and that the
// cache's device memory did not change.
bool StaticRunner::check_windows() {
    ScopeTimer t(&res_.check_s);
    const ModelConfig& cfg = model_.config();
    const size_t kvd = static_cast<size_t>(cfg.kv_dim());
    for (uint32_t s = 0; s < opt_.seqs; ++s) {
        std::vector<uint32_t> cells, unused;
        window_cells(s, &cells, &unused);
        std::vector<float> k(static_cast<size_t>(cfg.n_layers) * cells.size() * kvd), v(k.size());
        for (int l = 0; l < cfg.n_layers; ++l) {
            const size_t off = static_cast<size_t>(l) * cells.size() * kvd;
            if (!ok(kvrt_cache_read(cache_, l, static_cast<uint32_t>(cells.size()), cells.data(), k.data() + off,
                                    v.data() + off),
                    "reading a window's cells back"))
                return false;
        }
        const char* what = "";
        if (!ok(window_checker_->check(cache_, s, windows_[s], mirror_.pos_max(static_cast<int>(s)), k, v, &what), what))
            return false;
    }
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    if (!ok(kvrt_cache_get_info(cache_, &info), "reading the cache")) return false;
    if (info.device_bytes != res_.stat.cache_bytes) {
        res_.stat.cache_bytes_constant = false;
        mismatch("the cache holds %llu bytes of device memory; it was created with %llu",
                 static_cast<unsigned long long>(info.device_bytes),
                 static_cast<unsigned long long>(res_.stat.cache_bytes));
    }
    return true;
}

bool StaticRunner::device_bytes(uint64_t* out) {
    kvrt_context_stats stats = KVRT_CONTEXT_STATS_INIT;
    if (!ok(kvrt_context_get_stats(ctx_, &stats), "reading the device memory in use")) return false;
    *out = stats.device_bytes;
    return true;
}

// Gathers the static figures of the end of the run (after the shared ones)
// and decides whether it passed.
void StaticRunner::finish() {
    Results::StaticFigures& st = res_.stat;
    bool stats_read = false;
    if (cache_) {
        st.stats = KVRT_STATIC_STATS_INIT;
        stats_read = kvrt_cache_get_static_stats(cache_, -1, &st.stats) == KVRT_SUCCESS;
    }
    uint64_t appended = 0;
    for (const WindowModel& m : windows_) {
        st.model_slides += m.slides();
        st.model_rows_moved += m.rows_moved();
        appended += m.rows_appended();
    }
    if (window_checker_) st.windows = window_checker_->figures();
    const ModelConfig& cfg = model_.config();
    const uint64_t per_row = static_cast<uint64_t>(cfg.n_layers * cfg.n_kv_heads) * 2u *
                             static_cast<uint64_t>(cfg.head_dim) * value_bytes(opt_.kv_type);
    const bool stats_match = stats_read && st.stats.rows_appended == appended && st.stats.slides == st.model_slides &&
                             st.stats.rows_moved == st.model_rows_moved &&
                             st.stats.bytes_moved == st.model_rows_moved * per_row;
    if (stats_read && !stats_match)
        mismatch("kvrt_cache_get_static_stats counts %llu rows appended, %llu slides, %llu rows and %llu bytes moved; the "
                 "window model %llu, %llu, %llu and %llu",
                 static_cast<unsigned long long>(st.stats.rows_appended), static_cast<unsigned long long>(st.stats.slides),
                 static_cast<unsigned long long>(st.stats.rows_moved), static_cast<unsigned long long>(st.stats.bytes_moved),
                 static_cast<unsigned long long>(appended), static_cast<unsigned long long>(st.model_slides),
                 static_cast<unsigned long long>(st.model_rows_moved),
                 static_cast<unsigned long long>(st.model_rows_moved * per_row));
    // The context's memory may grow once, at the first overlapping slide
    // (scratch for its copy, kept by kvrt for the next ones); never after.
    const uint64_t baseline = st.device_bytes_first_slide ? st.device_bytes_first_slide : st.device_bytes_start;
    const bool memory_ok = st.cache_bytes_constant && st.device_bytes_start != 0 && st.device_bytes_end == baseline;
    res_.checks_passed = res_.checks_passed && st.windows.windows > 0 &&
                         st.windows.mismatches == 0 && st.cell_mismatches == 0 && stats_match && memory_ok;
}

}  // namespace

int run_static(const Options& opt, Results* out) {
    StaticRunner runner(opt, out);
    return runner.run();
}

}  // namespace cli::demo
