// Static padded layout (SPEC 5): sizes, and the window's movement checked
// against a shadow model of the reservation rows.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kv/static_window.hpp"
#include "common/random.hpp"

using namespace kvrt;

namespace {

// Token id held by each reservation row (-1: never written), moved exactly as
// the appends say.
struct Shadow {
    std::vector<int64_t> rows;

    explicit Shadow(uint32_t n) : rows(n, -1) {}

    void apply(const kv::StaticAppend& a, int64_t first_token) {
        if (a.slide.needed) {
            REQUIRE(a.slide.rows > 0);
            REQUIRE(uint64_t(a.slide.src_row) + a.slide.rows <= rows.size());
            REQUIRE(uint64_t(a.slide.dst_row) + a.slide.rows <= rows.size());
            const bool overlap = a.slide.src_row < a.slide.dst_row + a.slide.rows &&
                                 a.slide.dst_row < a.slide.src_row + a.slide.rows;
            CHECK(a.slide.overlapping == overlap);
            // Copy through a temporary, as a device does for overlapping regions.
            std::vector<int64_t> tmp(rows.begin() + a.slide.src_row,
                                     rows.begin() + a.slide.src_row + a.slide.rows);
            std::copy(tmp.begin(), tmp.end(), rows.begin() + a.slide.dst_row);
        }
        REQUIRE(uint64_t(a.write_row) + a.rows <= rows.size());
        for (uint32_t i = 0; i < a.rows; ++i) rows[a.write_row + i] = first_token + i;
    }
};

// The window holds exactly tokens [t - n, t) (1-based ids 1..t), left-padded,
// and both masks mark exactly the padding.
void check_window(const kv::StaticWindow& w, const Shadow& sh, const kv::StaticGeometry& g, int64_t t) {
    const uint32_t W = g.window_rows;
    const uint32_t expect_valid = static_cast<uint32_t>(std::min<int64_t>(t, W));
    REQUIRE(w.n_valid() == expect_valid);
    REQUIRE(uint64_t(w.start()) + W <= g.reservation_rows);
    CHECK(w.first_valid_row() == w.start() + W - expect_valid);
    CHECK(w.window_byte_offset(g) == uint64_t(w.start()) * g.row_stride);
    for (uint32_t i = 0; i < expect_valid; ++i) {
        const int64_t want = t - expect_valid + 1 + i;
        INFO("t=" << t << " valid row " << i);
        REQUIRE(sh.rows[w.first_valid_row() + i] == want);
    }
    std::vector<float> m32(g.max_seq + 3, 7.0f);
    std::vector<uint16_t> m16(g.max_seq, 0x1234);
    REQUIRE(w.mask_f32(m32.data(), m32.size()) == KVRT_SUCCESS);
    REQUIRE(w.mask_f16(m16.data(), m16.size()) == KVRT_SUCCESS);
    for (uint32_t i = 0; i < g.max_seq; ++i) {
        const bool valid = i >= W - expect_valid;  // last entry (i = W) is the current token
        INFO("t=" << t << " mask entry " << i);
        if (valid) {
            REQUIRE(m32[i] == 0.0f);
            REQUIRE(m16[i] == 0x0000);
        } else {
            REQUIRE((std::isinf(m32[i]) && m32[i] < 0));
            REQUIRE(m16[i] == 0xFC00);
        }
    }
    CHECK(m32[g.max_seq] == 7.0f);  // nothing past S entries
}

}  // namespace

TEST_CASE("static layout sizes match SPEC 5 for Llama-7B", "[static]") {
    kv::StaticGeometry g;
    REQUIRE(kv::StaticGeometry::create(32, 32, 128, 2, 2048, 2.0, &g) == KVRT_SUCCESS);
    CHECK(g.window_rows == 2047);
    CHECK(g.reservation_rows == 4094);
    CHECK(g.row_stride == 256);
    CHECK(g.window_bytes == 2047u * 256u);
    CHECK(g.buffer_bytes == 4094u * 256u);
    CHECK(g.buffer_count == 2048);
    CHECK(g.total_bytes == 2146435072ull);
    CHECK(g.fractional_bytes == 2146435072.0);

    REQUIRE(kv::StaticGeometry::create(32, 32, 128, 2, 2048, 1.5, &g) == KVRT_SUCCESS);
    CHECK(g.reservation_rows == 3071);
    CHECK(g.total_bytes == 1610088448ull);
    CHECK(g.fractional_bytes == 1609826304.0);

    REQUIRE(kv::StaticGeometry::create(32, 32, 128, 2, 2048, 1.0, &g) == KVRT_SUCCESS);
    CHECK(g.reservation_rows == 2047);
    CHECK(g.total_bytes == 2146435072ull / 2);

    // Element sizes scale the row: int8 halves, f32 doubles.
    REQUIRE(kv::StaticGeometry::create(32, 32, 128, 1, 2048, 2.0, &g) == KVRT_SUCCESS);
    CHECK(g.total_bytes == 2146435072ull / 2);
    REQUIRE(kv::StaticGeometry::create(32, 32, 128, 4, 2048, 2.0, &g) == KVRT_SUCCESS);
    CHECK(g.total_bytes == 2146435072ull * 2);

    // Buffer indices cover 0 .. 2*L*H-1 once each.
    REQUIRE(kv::StaticGeometry::create(3, 5, 8, 2, 16, 2.0, &g) == KVRT_SUCCESS);
    std::vector<int> seen(g.buffer_count, 0);
    for (uint32_t l = 0; l < 3; ++l)
        for (uint32_t h = 0; h < 5; ++h)
            for (bool v : {false, true}) seen.at(g.buffer_index(l, h, v))++;
    for (int s : seen) CHECK(s == 1);
}

TEST_CASE("static window slides match a shadow model and the rows-moved formula", "[static]") {
    const uint32_t S = 64;
    const uint32_t W = S - 1;
    for (double R : {1.0, 1.5, 2.0, 3.0}) {
        INFO("R=" << R);
        kv::StaticGeometry g;
        REQUIRE(kv::StaticGeometry::create(2, 2, 16, 2, S, R, &g) == KVRT_SUCCESS);
        REQUIRE(g.reservation_rows == static_cast<uint32_t>(std::ceil(R * W)));
        kv::StaticWindow w(g);
        Shadow sh(g.reservation_rows);
        check_window(w, sh, g, 0);
        uint64_t copies = 0;
        for (int64_t t = 1; t <= 3 * int64_t(W); ++t) {
            const uint32_t start_before = w.start();
            const uint32_t valid_before = w.n_valid();
            kv::StaticAppend a;
            REQUIRE(w.append(1, &a) == KVRT_SUCCESS);
            REQUIRE(a.rows == 1);
            REQUIRE(a.start_after == w.start());
            if (!a.slid) {
                // Copy-free: written right after the old window, offset advanced by one.
                CHECK(a.write_row == start_before + W);
                CHECK(w.start() == start_before + 1);
                CHECK_FALSE(a.slide.needed);
            } else {
                CHECK(start_before + W + 1 > g.reservation_rows);  // only when out of room
                CHECK(w.start() == 0);
                CHECK(a.write_row == W - 1);
                CHECK(a.slide.rows == std::min(valid_before, W - 1));
                if (R == 1.0 && valid_before == W) {
                    // R = 1: every append on a full window slides all surviving rows.
                    CHECK(a.slide.needed);
                    CHECK(a.slide.rows == W - 1);
                    CHECK(a.slide.overlapping);
                }
            }
            if (a.slide.needed) ++copies;
            sh.apply(a, t);
            check_window(w, sh, g, t);
            REQUIRE(w.rows_moved() == kv::expected_rows_moved(S, R, uint64_t(t)));
            REQUIRE(w.slides() == copies);
            REQUIRE(w.rows_appended() == uint64_t(t));
        }
        if (R == 1.0) CHECK(w.restarts() == 3 * uint64_t(W));
        if (R == 2.0) {
            // One restart per W+1 tokens, each moving W-1 rows once full.
            CHECK(w.restarts() == 3 * uint64_t(W) / (W + 1));
        }
    }
}

TEST_CASE("rows-moved formula against a direct count", "[static]") {
    // A direct count of the rule (restart when the next row does not fit; move
    // the min(valid, W-1) survivors), independent of StaticWindow.
    for (uint32_t S : {2u, 3u, 5u, 17u, 100u}) {
        for (double R : {1.0, 1.25, 1.5, 2.0, 3.0, 7.3}) {
            const uint64_t w = S - 1;
            const uint64_t rr = static_cast<uint64_t>(std::ceil(R * double(w)));
            uint64_t start = 0, valid = 0, moved = 0;
            for (uint64_t t = 1; t <= 5 * w + 7; ++t) {
                if (start + w + 1 <= rr) {
                    ++start;
                } else {
                    moved += std::min(valid, w - 1);
                    start = 0;
                }
                valid = std::min(valid + 1, w);
                INFO("S=" << S << " R=" << R << " t=" << t);
                REQUIRE(kv::expected_rows_moved(S, R, t) == moved);
            }
        }
    }
    // R = 2, steady state: W-1 rows per W+1 tokens.
    CHECK(kv::expected_rows_moved(2048, 2.0, 2048 * 10) == 10 * 2046u);
    CHECK(kv::expected_rows_moved(1, 2.0, 100) == 0);
    CHECK(kv::expected_rows_moved(64, 0.5, 100) == 0);
}

TEST_CASE("static window multi-row appends keep the newest rows", "[static]") {
    kvrt_test::Rng rng(1234);
    for (uint32_t S : {2u, 9u, 64u}) {
        for (double R : {1.0, 1.5, 2.0, 3.0}) {
            INFO("S=" << S << " R=" << R);
            kv::StaticGeometry g;
            REQUIRE(kv::StaticGeometry::create(1, 1, 4, 4, S, R, &g) == KVRT_SUCCESS);
            kv::StaticWindow w(g);
            Shadow sh(g.reservation_rows);
            int64_t t = 0;
            for (int step = 0; step < 200; ++step) {
                const uint32_t n = 1 + rng.below(g.window_rows);
                kv::StaticAppend a;
                REQUIRE(w.append(n, &a) == KVRT_SUCCESS);
                sh.apply(a, t + 1);
                t += n;
                check_window(w, sh, g, t);
                if (a.slid) {
                    // Batches of 2 to a quarter of the room's rows restart n
                    // rows in, so that removing them again (rejected drafts)
                    // copies nothing; others restart at row 0.
                    const uint32_t room = g.reservation_rows - g.window_rows;
                    const bool lead = n > 1 && n <= room / 4;
                    CHECK(w.start() == (lead ? n : 0));
                    if (lead) {
                        kv::StaticWindow undo = w;
                        kv::StaticSlide s;
                        REQUIRE(undo.remove(undo.n_valid() - n, n, &s) == KVRT_SUCCESS);
                        CHECK_FALSE(s.needed);
                        if (w.n_valid() > n) CHECK(undo.start() == 0);  // else only padding is left
                    }
                }
            }
            w.reset();
            CHECK(w.n_valid() == 0);
            CHECK(w.start() == 0);
            CHECK(w.rows_moved() == 0);
        }
    }
}

TEST_CASE("static layout rejects bad input", "[static]") {
    kv::StaticGeometry g;
    auto bad = [&](uint32_t l, uint32_t h, uint32_t d, uint32_t b, uint32_t s, double r, const char* needle) {
        INFO("expect error containing: " << needle);
        REQUIRE(kv::StaticGeometry::create(l, h, d, b, s, r, &g) == KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(std::string(last_error_message()).find(needle) != std::string::npos);
    };
    bad(32, 32, 128, 2, 1, 2.0, "S = 1");
    bad(32, 32, 128, 2, 0, 2.0, "S = 0");
    bad(32, 32, 128, 2, 2048, 0.99, "reserve factor");
    bad(32, 32, 128, 2, 2048, std::nan(""), "reserve factor");
    bad(32, 32, 128, 2, 2048, std::numeric_limits<double>::infinity(), "reserve factor");
    bad(32, 32, 128, 2, 2048, -1.0, "reserve factor");
    bad(0, 32, 128, 2, 2048, 2.0, "nonzero");
    bad(32, 0, 128, 2, 2048, 2.0, "nonzero");
    bad(32, 32, 0, 2, 2048, 2.0, "nonzero");
    bad(32, 32, 128, 0, 2048, 2.0, "element size");
    bad(32, 32, 128, 3, 2048, 2.0, "element size");
    bad(32, 32, 128, 8, 2048, 2.0, "element size");
    bad(32, 32, 128, 2, 2048, 1e9, "2^32 - 1");  // reservation rows overflow
    bad(UINT32_MAX, UINT32_MAX, UINT32_MAX, 4, UINT32_MAX, 1.0, "overflows");
    bad(1 << 20, 1 << 20, 1 << 16, 4, 4096, 2.0, "overflows");
    CHECK(kv::StaticGeometry::create(32, 32, 128, 2, 2048, 2.0, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);

    // S = 2 is the smallest: a one-row window.
    REQUIRE(kv::StaticGeometry::create(1, 1, 1, 1, 2, 1.0, &g) == KVRT_SUCCESS);
    CHECK(g.window_rows == 1);
    CHECK(g.reservation_rows == 1);

    REQUIRE(kv::StaticGeometry::create(1, 1, 8, 2, 16, 2.0, &g) == KVRT_SUCCESS);
    kv::StaticWindow w(g);
    kv::StaticAppend a;
    CHECK(w.append(0, &a) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(w.append(16, &a) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(w.append(1, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(w.n_valid() == 0);
    CHECK(w.append(15, &a) == KVRT_SUCCESS);
    float m[16];
    CHECK(w.mask_f32(m, 15) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(w.mask_f32(nullptr, 16) == KVRT_ERROR_INVALID_ARGUMENT);
    uint16_t m16[15];
    CHECK(w.mask_f16(m16, 15) == KVRT_ERROR_INVALID_ARGUMENT);
    kv::StaticWindow empty;
    CHECK(empty.append(1, &a) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(empty.mask_f32(m, 16) == KVRT_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("static window removals keep the other rows, in order, at the window's end", "[static]") {
    // A model list of the token ids held (oldest first), cut and appended
    // independently of StaticWindow; the shadow rows follow the copies it asks.
    kvrt_test::Rng rng(99);
    for (uint32_t S : {2u, 3u, 9u, 33u}) {
        for (double R : {1.0, 1.5, 2.0, 3.0}) {
            INFO("S=" << S << " R=" << R);
            kv::StaticGeometry g;
            REQUIRE(kv::StaticGeometry::create(1, 1, 4, 4, S, R, &g) == KVRT_SUCCESS);
            const uint32_t W = g.window_rows;
            kv::StaticWindow w(g);
            Shadow sh(g.reservation_rows);
            std::vector<int64_t> held;
            int64_t next = 1;
            uint64_t copies = 0, copied = 0, free_suffixes = 0, copied_suffixes = 0;
            for (int step = 0; step < 600; ++step) {
                INFO("step " << step << " held " << held.size() << " start " << w.start());
                if (held.empty() || rng.below(2) == 0) {
                    const uint32_t n = 1 + rng.below(W);
                    kv::StaticAppend a;
                    REQUIRE(w.append(n, &a) == KVRT_SUCCESS);
                    if (a.slide.needed) ++copies, copied += a.slide.rows;
                    sh.apply(a, next);
                    for (uint32_t i = 0; i < n; ++i) held.push_back(next + i);
                    next += n;
                    if (held.size() > W) held.erase(held.begin(), held.end() - W);
                } else {
                    const uint32_t n = static_cast<uint32_t>(held.size());
                    // Suffixes (draft rejection) most often, then prefixes and middles.
                    const uint32_t kind = rng.below(4);
                    uint32_t first = rng.below(n), count = 1 + rng.below(n - first);
                    if (kind <= 1) count = n - first;
                    if (kind == 2) first = 0;
                    const uint32_t start_before = w.start();
                    kv::StaticSlide s;
                    REQUIRE(w.remove(first, count, &s) == KVRT_SUCCESS);
                    const bool suffix = first > 0 && first + count == n;
                    if (first == 0) CHECK_FALSE(s.needed);  // the oldest: padding only
                    if (suffix && start_before >= count) {
                        CHECK_FALSE(s.needed);  // the window moves back
                        CHECK(w.start() == start_before - count);
                        ++free_suffixes;
                    }
                    if (suffix && start_before < count) {
                        CHECK(w.start() == 0);
                        ++copied_suffixes;
                    }
                    if (s.needed) {
                        // One side moves, the smaller one when both could.
                        CHECK((s.rows == first || s.rows == n - first - count));
                        ++copies, copied += s.rows;
                    }
                    const kv::StaticAppend as_copy{s, false, 0, 0, 0};
                    sh.apply(as_copy, 0);
                    held.erase(held.begin() + first, held.begin() + first + count);
                }
                REQUIRE(w.n_valid() == held.size());
                REQUIRE(uint64_t(w.start()) + W <= g.reservation_rows);
                for (uint32_t i = 0; i < held.size(); ++i) {
                    INFO("valid row " << i);
                    REQUIRE(sh.rows[w.first_valid_row() + i] == held[i]);
                }
                REQUIRE(w.slides() == copies);
                REQUIRE(w.rows_moved() == copied);
            }
            if (W > 4) {
                if (R > 1.0) CHECK(free_suffixes > 0);  // R = 1: the window always starts at row 0
                CHECK(copied_suffixes > 0);
            }
        }
    }
    // Out of range: refused, nothing changes.
    kv::StaticGeometry g;
    REQUIRE(kv::StaticGeometry::create(1, 1, 4, 4, 16, 2.0, &g) == KVRT_SUCCESS);
    kv::StaticWindow w(g);
    kv::StaticAppend a;
    REQUIRE(w.append(5, &a) == KVRT_SUCCESS);
    kv::StaticSlide s;
    CHECK(w.remove(3, 3, &s) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(w.remove(6, 0, &s) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(w.remove(0, 1, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(w.n_valid() == 5);
    CHECK(w.remove(5, 0, &s) == KVRT_SUCCESS);
    CHECK_FALSE(s.needed);
    CHECK(w.n_valid() == 5);
}

namespace {

// ExecuTorch's smart-mask cache as its runtime documents it
// (StaticKVCache::update with StaticAttentionUpdateStyle::SMART_MASK): new
// rows are written at cache_pos, wrapping at the cache length, and cache_pos
// advances by the rows written; the mask opens from the left, one entry per
// row written, until the whole cache is valid.
struct SmartMaskModel {
    std::vector<int64_t> rows;
    uint32_t cache_pos = 0, valid_len = 0;

    explicit SmartMaskModel(uint32_t cache_len) : rows(cache_len, -1) {}

    void update(uint32_t n, int64_t first_token) {
        for (uint32_t i = 0; i < n; ++i) {
            rows[cache_pos] = first_token + i;
            cache_pos = (cache_pos + 1) % static_cast<uint32_t>(rows.size());
        }
        valid_len = std::min<uint32_t>(valid_len + n, static_cast<uint32_t>(rows.size()));
    }
};

// Applies ring copies in their order to `rows`, each through a temporary (as
// the device does for overlapping ones); every copy is of contiguous rows.
void apply_copies(const std::vector<kv::StaticSlide>& slides, std::vector<int64_t>* rows) {
    for (const kv::StaticSlide& s : slides) {
        REQUIRE(s.needed);
        REQUIRE(s.rows > 0);
        REQUIRE(uint64_t(s.src_row) + s.rows <= rows->size());
        REQUIRE(uint64_t(s.dst_row) + s.rows <= rows->size());
        const bool overlap = s.src_row < s.dst_row + s.rows && s.dst_row < s.src_row + s.rows;
        CHECK(s.overlapping == overlap);
        std::vector<int64_t> tmp(rows->begin() + s.src_row, rows->begin() + s.src_row + s.rows);
        std::copy(tmp.begin(), tmp.end(), rows->begin() + s.dst_row);
    }
}

}  // namespace

TEST_CASE("smart-mask window: appends match ExecuTorch's ring, row for row and entry for entry", "[static]") {
    kvrt_test::Rng rng(7);
    for (uint32_t S : {2u, 3u, 9u, 33u}) {
        INFO("S=" << S);
        kv::StaticGeometry g;
        REQUIRE(kv::StaticGeometry::create_ring(1, 1, 4, 2, S, &g) == KVRT_SUCCESS);
        const uint32_t W = g.window_rows;
        REQUIRE(g.reservation_rows == W);  // the region is the window
        REQUIRE(g.total_bytes == 2ull * W * 8);
        kv::StaticWindow w(g);
        SmartMaskModel model(W);
        std::vector<int64_t> rows(W, -1);
        int64_t next = 1;
        for (int step = 0; step < 300; ++step) {
            const uint32_t n = step % 5 == 4 ? 1 + rng.below(W) : 1;
            INFO("step " << step << ": " << n << " rows");
            kv::StaticAppend a;
            REQUIRE(w.append(n, &a) == KVRT_SUCCESS);
            CHECK_FALSE(a.slide.needed);
            CHECK(a.start_after == 0);
            CHECK(a.write_row == model.cache_pos);
            for (uint32_t j = 0; j < n; ++j) rows[(a.write_row + j) % W] = next + j;
            model.update(n, next);
            next += n;
            REQUIRE(rows == model.rows);
            REQUIRE(w.n_valid() == model.valid_len);
            REQUIRE(w.start() == 0);
            // The mask of every graph size: the cache's W entries (valid from
            // the left) then the step's n_new tokens, causal.
            for (uint32_t n_new : {1u, std::min(3u, W), W}) {
                const uint32_t L = W + n_new;
                REQUIRE(w.mask_entries(n_new) == L);
                std::vector<uint16_t> m(size_t{n_new} * L, 0x1234);
                REQUIRE(w.graph_mask(n_new, uint16_t{65535}, uint16_t{0}, m.data(), m.size()) == KVRT_SUCCESS);
                for (uint32_t j = 0; j < n_new; ++j)
                    for (uint32_t i = 0; i < L; ++i) {
                        const bool attend = i < W ? i < model.valid_len : i - W <= j;
                        REQUIRE(m[size_t{j} * L + i] == (attend ? 65535 : 0));
                    }
                REQUIRE(w.graph_mask(n_new, uint16_t{65535}, uint16_t{0}, m.data(), m.size() - 1) ==
                        KVRT_ERROR_INVALID_ARGUMENT);
            }
            // Valid rows oldest first: the newest min(t, W) tokens.
            const uint32_t runs_expected = w.valid_row(0) + w.n_valid() > W ? 2 : 1;
            uint32_t begin[2], end[2];
            REQUIRE(w.valid_runs(begin, end) == runs_expected);
            std::vector<int64_t> in_runs;
            for (uint32_t r = 0; r < runs_expected; ++r)
                for (uint32_t x = begin[r]; x < end[r]; ++x) in_runs.push_back(rows[x]);
            for (uint32_t i = 0; i < w.n_valid(); ++i) {
                const int64_t want = next - w.n_valid() + i;
                REQUIRE(rows[w.valid_row(i)] == want);
                REQUIRE(in_runs[i] == want);
                REQUIRE(w.row_valid(w.valid_row(i)));
            }
        }
        CHECK(w.slides() == 0);
        CHECK(w.rows_moved() == 0);
        kv::StaticSlide s;
        CHECK(w.make_room(1, &s) == KVRT_ERROR_INVALID_ARGUMENT);  // no room after a ring
    }
}

TEST_CASE("smart-mask window: removals keep the other rows in ring order", "[static]") {
    // A model list of the token ids held (oldest first), cut and appended
    // independently of StaticWindow; the rows follow the copies it asks.
    kvrt_test::Rng rng(41);
    for (uint32_t S : {2u, 3u, 9u, 33u}) {
        INFO("S=" << S);
        kv::StaticGeometry g;
        REQUIRE(kv::StaticGeometry::create_ring(1, 1, 4, 4, S, &g) == KVRT_SUCCESS);
        const uint32_t W = g.window_rows;
        kv::StaticWindow w(g);
        std::vector<int64_t> rows(W, -1), held;
        int64_t next = 1;
        uint64_t copies = 0, copied = 0, wrapped_copies = 0;
        for (int step = 0; step < 800; ++step) {
            INFO("step " << step << " held " << held.size() << " first row " << w.valid_row(0));
            if (held.empty() || rng.below(2) == 0) {
                const uint32_t n = 1 + rng.below(W);
                kv::StaticAppend a;
                REQUIRE(w.append(n, &a) == KVRT_SUCCESS);
                CHECK_FALSE(a.slide.needed);
                for (uint32_t j = 0; j < n; ++j) rows[(a.write_row + j) % W] = next + j;
                for (uint32_t i = 0; i < n; ++i) held.push_back(next + i);
                next += n;
                if (held.size() > W) held.erase(held.begin(), held.end() - W);
            } else {
                const uint32_t n = static_cast<uint32_t>(held.size());
                const uint32_t kind = rng.below(4);
                uint32_t first = rng.below(n), count = 1 + rng.below(n - first);
                if (kind == 0) count = n - first;  // the newest (rejected drafts)
                if (kind == 1) first = 0;          // the oldest
                std::vector<kv::StaticSlide> slides;
                REQUIRE(w.remove_runs(first, count, &slides) == KVRT_SUCCESS);
                const uint32_t older = first, newer = n - first - count;
                if (older == 0 || newer == 0) {
                    CHECK(slides.empty());  // metadata only
                } else {
                    uint32_t moved = 0;
                    for (const kv::StaticSlide& s : slides) moved += s.rows;
                    CHECK(moved == std::min(older, newer));  // the smaller side
                    CHECK(slides.size() <= 3);
                    ++copies, copied += moved;
                    if (slides.size() > 1) ++wrapped_copies;
                }
                apply_copies(slides, &rows);
                held.erase(held.begin() + first, held.begin() + first + count);
            }
            REQUIRE(w.n_valid() == held.size());
            for (uint32_t i = 0; i < held.size(); ++i) {
                INFO("valid row " << i);
                REQUIRE(rows[w.valid_row(i)] == held[i]);
            }
            for (uint32_t r = 0; r < W; ++r) {
                bool holds = false;
                for (uint32_t i = 0; i < held.size(); ++i) holds = holds || w.valid_row(i) == r;
                REQUIRE(w.row_valid(r) == holds);
            }
            REQUIRE(w.slides() == copies);
            REQUIRE(w.rows_moved() == copied);
        }
        if (W >= 8) CHECK(wrapped_copies > 0);  // copies across the ring's end were exercised
    }
    // Out of range: refused, nothing changes; the one-copy form refuses a ring.
    kv::StaticGeometry g;
    REQUIRE(kv::StaticGeometry::create_ring(1, 1, 4, 4, 16, &g) == KVRT_SUCCESS);
    kv::StaticWindow w(g);
    kv::StaticAppend a;
    REQUIRE(w.append(5, &a) == KVRT_SUCCESS);
    std::vector<kv::StaticSlide> slides;
    CHECK(w.remove_runs(3, 3, &slides) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(w.remove_runs(6, 0, &slides) == KVRT_ERROR_INVALID_ARGUMENT);
    kv::StaticSlide s;
    CHECK(w.remove(1, 1, &s) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(w.n_valid() == 5);
}
