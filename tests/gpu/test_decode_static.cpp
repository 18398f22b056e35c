// The decode test of the static padded layout (SPEC 5, kvrt.h "Static padded
// layout"), the layout of static-graph engines on NPUs and DSPs: the model of
// decode_model.hpp decodes three times the window's length through a cache in
// that layout, for every type it takes, with several sequences, and reserves
// from a whole window (a slide at every step) to two.
//
// Each sequence has, per layer and KV head, a K and a V window of S-1 rows
// inside a region of ceil(R x (S-1)) reserved rows. The run is that of an
// engine that computes K/V one layer at a time: per step one kvrt_cache_place
// (the append: the window advances by a row, or slides when the region runs
// out), then per layer kvrt_cache_write of the new rows and
// kvrt_cache_attention over the window, recorded into one submission. There
// are no context shifts: the oldest token leaves the window by itself.
// Several sequences each have their own windows (the cache's max_seqs); the
// prompt is placed in every one of them.
//
// Checked along the way, besides attention against the reference as in the
// cell layout (decode_check.hpp):
// - the cells kvrt_cache_place returns (seq x reserved rows + row) against
//   the test's own window model (decode_window.hpp);
// - at every checkpoint, for every sequence, layer, KV head, K and V:
//   kvrt_cache_static_get_window's buffer, offset, row stride, valid rows and
//   positions, and the window's bytes downloaded from its buffer at its
//   offset, bit for bit against the reference encoding of the rows given to
//   kvrt and against kvrt_cache_read; kvrt_cache_static_get_mask in f32 and
//   f16;
// - kvrt_cache_static_get_stats (slides, rows and bytes moved) against the
//   window model, and that the device memory never grew.
//
// Static-scale types need their scales when the cache is created, as a static
// graph's are fixed when it is compiled. The test calibrates them the usual
// way: it runs the prompt through the model once in f32 on the CPU (attention
// by the reference) and takes, per layer, the largest magnitude of K (of each
// rotated pair's norm, which bounds a key at any position) and of V, times a
// margin m for the tokens still to come:
//   scale = m x max |x| / 127, zero point 128 (u8_static, m = 1.25),
//   scale = m x max |x| / 32767, zero point 32768 (u16_static, m = 2).
// Values beyond the range are clamped. The margins, from check (b)'s NMSE
// measured on lavapipe with a wider model of the same heads (d_model 512;
// windows of 64 and 256 rows, 1 and 4 sequences, 4 x window steps) for
// m = 1, 1.25, 1.5, 2:
//   u8_static   1.7e-4 (0.007% of the values clamped; max abs error 0.079),
//               2.4e-4, 3.0e-4, 5.4e-4 (none clamped; max abs 0.040 at 1.25)
//   u16_static  7.8e-5 (0.009% clamped), 4.9e-6 (5 of 4.4 million values
//               clamped), 4.5e-9, 8.8e-9 (none clamped)
// At 8 bits, rounding costs about as much as the rare clamped value, and
// 1.25 bounds the worst error best; at 16 bits, rounding costs nothing and a
// single clamped value dominates, so the range gets room to spare.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "decode_run.hpp"
#include "decode_window.hpp"

using namespace kvrt_test;
using namespace kvrt_test::decode;

namespace {

struct StaticCase {
    kvrt_type type = KVRT_TYPE_F16;
    uint32_t seqs = 1;
    double reserve = 2.0;       // R: rows reserved per region, in windows
    uint32_t window = 64;       // S - 1
    uint32_t tokens = 192;      // decode steps per sequence
    uint32_t check_every = 16;  // also checked: the prompt, a slide per check_every steps, the last step
};

class StaticRun : public CacheRun {
public:
    StaticRun(kvrt_context ctx, const StaticCase& c)
        : CacheRun(ctx, c.type, c.seqs, c.seqs * c.window),
          c_(c),
          w_(c.window),
          rr_(static_cast<uint32_t>(std::ceil(c.reserve * static_cast<double>(c.window)))),
          windows_(c.seqs, WindowModel(w_, rr_)) {}

    void run() {
        calibrate();
        setup();
        prompt();
        decode();
        finish();
    }

private:
    void calibrate();
    void setup();
    void prompt();
    void decode();
    void finish();
    // Checks the cells kvrt_cache_place chose against the window model, which
    // appends the batch too; the mirror's cells follow the positions.
    void placed(const TokenBatch& b, const std::vector<uint32_t>& cells) override;
    // The mirror and the window checker keep the rows.
    void stored(const AttentionIO& io, const TokenBatch& b, const std::vector<uint32_t>& cells) override;
    // The check runs over the windows' valid cells.
    void checked_cells(std::vector<uint32_t>* cells, std::vector<uint32_t>* mirror_cells) const override;
    // The valid cells of `seq`'s window, oldest first: kvrt's (seq x reserved
    // rows + row) and the mirror's (seq x window rows + position mod window rows).
    void window_cells(uint32_t seq, std::vector<uint32_t>* cells, std::vector<uint32_t>* mirror_cells) const;
    // Every window of every sequence (decode_window.hpp), and the cache's
    // device memory.
    void check_windows();

    const StaticCase c_;
    const uint32_t w_, rr_;  // window rows (S - 1) and reserved rows per region
    std::vector<WindowModel> windows_;
    std::unique_ptr<WindowChecker> window_checker_;
    std::vector<QuantScale> k_scales_, v_scales_;
    bool slide_checked_ = false;     // a step that slid was checked
    uint32_t last_slide_check_ = 0;  // the latest such step
    uint64_t cache_bytes_ = 0;       // kvrt_cache_get_info's device bytes at creation
    // The context's device bytes after the prompt and after the first step
    // whose slide copy overlapped itself (0: none did; R < 2 only: kvrt
    // copies through scratch memory, taken the first time).
    uint64_t bytes_start_ = 0, bytes_first_slide_ = 0;
};

// Static-scale types: per-layer scales from the prompt's K/V in f32 (see the
// top of this file).
void StaticRun::calibrate() {
    if (!is_static_scale(c_.type)) return;
    const ModelConfig& cfg = model_.config();
    const TokenBatch b = prompt_batch(1);
    const kvrt::ref::AttnParams p = attention_params(cfg);
    std::vector<kvrt::ref::AttnCell> cells;
    std::vector<kvrt::ref::AttnQuery> queries;
    for (int32_t pos : b.positions) {
        cells.push_back({pos, {0}});
        queries.push_back({pos, 0});
    }
    std::vector<double> k_max(static_cast<size_t>(cfg.n_layers), 0.0), v_max(k_max);
    std::vector<float> logits;
    model_.forward(
        b.tokens, b.positions, {},
        [&](const AttentionIO& io) {
            const size_t kvd = static_cast<size_t>(cfg.kv_dim());
            double& km = k_max[static_cast<size_t>(io.layer)];
            double& vm = v_max[static_cast<size_t>(io.layer)];
            for (size_t i = 0; i < static_cast<size_t>(io.n) * kvd; i += 2) {
                // A rotation keeps each pair's norm: it bounds the pair's values at any position.
                km = std::max(km, std::hypot(static_cast<double>(io.k_raw[i]), static_cast<double>(io.k_raw[i + 1])));
                vm = std::max({vm, std::fabs(static_cast<double>(io.v[i])), std::fabs(static_cast<double>(io.v[i + 1]))});
            }
            const std::vector<double> out = kvrt::ref::attention(p, io.q, queries, io.k, io.v, cells);
            std::transform(out.begin(), out.end(), io.out, [](double x) { return static_cast<float>(x); });
        },
        &logits);
    const bool u8 = c_.type == KVRT_TYPE_U8_STATIC;
    const double steps = u8 ? 127.0 : 32767.0;
    const double margin = u8 ? 1.25 : 2.0;
    const int32_t zero_point = u8 ? 128 : 32768;
    for (int l = 0; l < cfg.n_layers; ++l) {
        for (int a = 0; a < 2; ++a) {
            const double m = (a ? v_max : k_max)[static_cast<size_t>(l)];
            const float scale = m > 0 ? static_cast<float>(margin * m / steps) : 1.0f;
            (a ? v_scales_ : k_scales_).push_back(QuantScale{scale, zero_point});
        }
    }
}

void StaticRun::setup() {
    const ModelConfig& cfg = model_.config();
    StaticScales scales(k_scales_, v_scales_);  // one per layer; none for f16 and f32
    kvrt_rope_desc rope = model_rope();
    if (is_static_scale(c_.type)) rope.next = scales.desc();
    kvrt_static_layout_desc layout = KVRT_STATIC_LAYOUT_DESC_INIT;
    layout.seq_len = w_ + 1;
    layout.reserve = c_.reserve;
    layout.next = &rope;
    kvrt_cache_desc d = cache_desc();
    d.next = &layout;
    d.capacity = 0;  // the static layout's: seqs x (S - 1)
    d.layout = KVRT_LAYOUT_STATIC;
    kvrt_cache_estimate e = KVRT_CACHE_ESTIMATE_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_estimate_size(ctx_, &d, &e));
    // The reserved rows ceil(R x (S-1)), as kvrt.h defines them, must be kvrt's.
    const uint64_t row_pair = 2ull * static_cast<uint64_t>(cfg.head_dim) * kvrt_type_block_bytes(c_.type);
    INFO(c_.seqs << " sequences of ceil(" << c_.reserve << " x " << w_ << ") = " << rr_ << " rows per region");
    REQUIRE(e.data_bytes == uint64_t{c_.seqs} * static_cast<uint64_t>(cfg.n_layers * cfg.n_kv_heads) * rr_ * row_pair);
    // The largest batch is the prompt of every sequence.
    create(d, uint64_t{c_.seqs} * std::strlen(kPrompt));
    cache_bytes_ = info().device_bytes;
    window_checker_ = std::make_unique<WindowChecker>(cfg, c_.seqs, w_, rr_, c_.type, k_scales_, v_scales_);
}

// Evaluates the prompt in every sequence as one batch (each sequence has its
// own windows; nothing is shared).
void StaticRun::prompt() {
    std::vector<float> logits;
    evaluate(prompt_batch(c_.seqs), true, "the prompt", &logits);
    start_sequences(logits);
    check_windows();
    bytes_start_ = device_bytes(ctx_);
}

// The decode loop: each step appends the pending token of every sequence and
// samples the next greedily. Checked: every check_every-th step, the steps
// whose append slides a window (at most one per check_every steps; with R = 1
// every step slides), and the last.
void StaticRun::decode() {
    for (uint32_t step = 0; step < c_.tokens; ++step) {
        bool slides = false;
        uint64_t overlapping = 0;
        for (const WindowModel& m : windows_) {
            overlapping += m.overlapping_slides();
            WindowModel next = m;
            bool slid = false;
            next.append(1, &slid);
            slides = slides || slid;
        }
        const bool slide_check = slides && (!slide_checked_ || step - last_slide_check_ >= c_.check_every);
        const bool check = slide_check || (step + 1) % c_.check_every == 0 || step + 1 == c_.tokens;
        if (slide_check) {
            slide_checked_ = true;
            last_slide_check_ = step;
        }
        std::vector<float> logits;
        evaluate(step_batch(), check, "step " + std::to_string(step + 1), &logits);
        advance(logits);
        for (const WindowModel& m : windows_) overlapping -= m.overlapping_slides();
        if (overlapping != 0 && bytes_first_slide_ == 0) bytes_first_slide_ = device_bytes(ctx_);
        if (check) {
            INFO("after step " << step + 1);
            check_windows();
        }
    }
}

void StaticRun::placed(const TokenBatch& b, const std::vector<uint32_t>& cells) {
    std::vector<uint32_t> count(c_.seqs, 0), first_row(c_.seqs, 0), seen(c_.seqs, 0);
    for (int32_t s : b.seq_ids) ++count[static_cast<size_t>(s)];
    for (uint32_t s = 0; s < c_.seqs; ++s) {
        bool slid = false;
        if (count[s]) first_row[s] = windows_[s].append(count[s], &slid);
    }
    for (size_t i = 0; i < cells.size(); ++i) {
        const uint32_t s = static_cast<uint32_t>(b.seq_ids[i]);
        const uint32_t want = s * rr_ + first_row[s] + seen[s]++;
        if (cells[i] != want)
            FAIL("kvrt_cache_place put position " << b.positions[i] << " of sequence " << s << " in cell " << cells[i]
                                                  << "; the window model expects " << want << " (sequence x " << rr_
                                                  << " reserved rows + row " << want - s * rr_ << ")");
        mirror_.place(s * w_ + static_cast<uint32_t>(b.positions[i]) % w_, b.positions[i], static_cast<int>(s));
    }
}

void StaticRun::stored(const AttentionIO& io, const TokenBatch& b, const std::vector<uint32_t>&) {
    const size_t kvd = static_cast<size_t>(model_.config().kv_dim());
    for (uint32_t i = 0; i < static_cast<uint32_t>(io.n); ++i) {
        const uint32_t s = static_cast<uint32_t>(b.seq_ids[i]);
        const int32_t pos = b.positions[i];
        mirror_.set_layer(s * w_ + static_cast<uint32_t>(pos) % w_, io.layer, io.k_raw + i * kvd, io.v + i * kvd);
        window_checker_->record(s, pos, io.layer, io.k + i * kvd, io.v + i * kvd);
    }
}

void StaticRun::checked_cells(std::vector<uint32_t>* cells, std::vector<uint32_t>* mirror_cells) const {
    for (uint32_t s = 0; s < c_.seqs; ++s) window_cells(s, cells, mirror_cells);
}

void StaticRun::window_cells(uint32_t seq, std::vector<uint32_t>* cells, std::vector<uint32_t>* mirror_cells) const {
    const WindowModel& m = windows_[seq];
    const int32_t next_pos = mirror_.pos_max(static_cast<int>(seq)) + 1;
    for (uint32_t j = 0; j < m.n_valid(); ++j) {
        const int32_t pos = next_pos - static_cast<int32_t>(m.n_valid()) + static_cast<int32_t>(j);
        cells->push_back(seq * rr_ + m.first_valid_row() + j);
        mirror_cells->push_back(seq * w_ + static_cast<uint32_t>(pos) % w_);
    }
}

void StaticRun::check_windows() {
    const ModelConfig& cfg = model_.config();
    const size_t kvd = static_cast<size_t>(cfg.kv_dim());
    for (uint32_t s = 0; s < c_.seqs; ++s) {
        std::vector<uint32_t> cells, unused;
        window_cells(s, &cells, &unused);
        std::vector<float> k(static_cast<size_t>(cfg.n_layers) * cells.size() * kvd), v(k.size());
        for (int l = 0; l < cfg.n_layers; ++l) {
            const size_t off = static_cast<size_t>(l) * cells.size() * kvd;
            const uint64_t layer_bytes = uint64_t{cells.size()} * kvd * sizeof(float);
            KVRT_REQUIRE_OK(kvrt_cache_read(cache_, l, static_cast<uint32_t>(cells.size()), cells.data(), k.data() + off,
                                            layer_bytes, v.data() + off, layer_bytes));
        }
        window_checker_->check(cache_, s, windows_[s], mirror_.pos_max(static_cast<int>(s)), k, v);
    }
    REQUIRE(info().device_bytes == cache_bytes_);
}

// The end of the run: the attention figures, kvrt_cache_static_get_stats
// against the window model, and the device memory.
void StaticRun::finish() {
    check_.verify();
    REQUIRE(window_checker_->windows() > 0);
    kvrt_static_stats stats = KVRT_STATIC_STATS_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_static_get_stats(cache_, -1, &stats));
    uint64_t appended = 0, slides = 0, moved = 0;
    for (const WindowModel& m : windows_) {
        appended += m.rows_appended();
        slides += m.slides();
        moved += m.rows_moved();
    }
    const ModelConfig& cfg = model_.config();
    const uint64_t per_row = static_cast<uint64_t>(cfg.n_layers * cfg.n_kv_heads) * 2u *
                             static_cast<uint64_t>(cfg.head_dim) * kvrt_type_block_bytes(c_.type);
    CHECK(slides > 0);
    CHECK(stats.rows_appended == appended);
    CHECK(stats.slides == slides);
    CHECK(stats.rows_moved == moved);
    CHECK(stats.bytes_moved == moved * per_row);
    // The context's memory may grow once, at the first overlapping slide
    // (scratch for its copy, kept by kvrt for the next ones); never after.
    INFO("device bytes after the prompt " << bytes_start_ << ", after the first overlapping slide "
                                          << bytes_first_slide_);
    CHECK(device_bytes(ctx_) == (bytes_first_slide_ ? bytes_first_slide_ : bytes_start_));
}

void run_case(const StaticCase& c) {
    GpuContext ctx;
    StaticRun run(ctx, c);
    run.run();
}

StaticCase with(kvrt_type type, uint32_t seqs = 1, double reserve = 2.0) {
    StaticCase c;
    c.type = type;
    c.seqs = seqs;
    c.reserve = reserve;
    return c;
}

}  // namespace

// Windows of 64 rows (S = 65), R = 2 (a slide every 65 tokens) unless given;
// every type the layout takes, several sequences, R = 1 (a slide of the whole
// window at every step) and a fractional R.
TEST_CASE("decode: static f16", "[decode][static]") { run_case(with(KVRT_TYPE_F16)); }
TEST_CASE("decode: static f32", "[decode][static]") { run_case(with(KVRT_TYPE_F32)); }
TEST_CASE("decode: static u8_static", "[decode][static]") { run_case(with(KVRT_TYPE_U8_STATIC)); }
TEST_CASE("decode: static u16_static", "[decode][static]") { run_case(with(KVRT_TYPE_U16_STATIC)); }
TEST_CASE("decode: static f16, 2 sequences", "[decode][static]") { run_case(with(KVRT_TYPE_F16, 2)); }
TEST_CASE("decode: static u8_static, 2 sequences", "[decode][static]") { run_case(with(KVRT_TYPE_U8_STATIC, 2)); }
TEST_CASE("decode: static f16, reserve 1", "[decode][static]") { run_case(with(KVRT_TYPE_F16, 1, 1.0)); }
TEST_CASE("decode: static u16_static, reserve 1.5, 3 sequences", "[decode][static]") {
    run_case(with(KVRT_TYPE_U16_STATIC, 3, 1.5));
}
