// Bad input to the state functions, as rows of the bad-input table
// (test_bad_input.hpp): NULL, destroyed and mixed-up handles, sequence ids
// out of range, NULL or empty paths, missing files, buffers too small,
// malformed bytes. add_state_rows() gives the rows; the test case below runs
// them, each with its exact documented error and a detail message, and
// checks that the cache is unchanged (its whole state saved before and after
// every row, which reads back every cell's metadata and rows).
#include "test_bad_input.hpp"

#include <string>
#include <vector>

namespace kvrt_test::bad_input {

void add_state_rows(World& w, std::vector<Row>* rows);

void add_state_rows(World& w, std::vector<Row>* rows) {
    const Target C = Target::Cache;
    const auto inv = KVRT_ERROR_INVALID_ARGUMENT;
    const auto hnd = KVRT_ERROR_INVALID_HANDLE;
    auto& r = *rows;
    // A valid sequence state of the world's cache, and a file that does not exist.
    auto seq_state = std::make_shared<std::vector<uint8_t>>();
    uint64_t size = 0;
    if (kvrt_cache_state_save(w.cache, 1, nullptr, &size) == KVRT_SUCCESS) {
        seq_state->resize(size);
        if (kvrt_cache_state_save(w.cache, 1, seq_state->data(), &size) != KVRT_SUCCESS) seq_state->clear();
    }
    const std::string missing = "/nonexistent-kvrt-dir/state.kvrt";
    const kvrt_cache buffer_as_cache = reinterpret_cast<kvrt_cache>(w.buffer);
    const std::vector<std::pair<std::string, kvrt_cache>> bad_handles = {
        {"NULL cache", nullptr}, {"destroyed cache", w.dead_cache}, {"a buffer as the cache", buffer_as_cache}};
    const std::vector<uint8_t> garbage(100, 0x5A);

    for (const auto& [what, c] : bad_handles) {
        r.push_back(err("kvrt_cache_state_save", what, hnd, C, [c = c] {
            uint64_t n = 0;
            return out(kvrt_cache_state_save(c, -1, nullptr, &n));
        }));
        r.push_back(err("kvrt_cache_state_load", what, hnd, C, [c = c, seq_state] {
            return out(kvrt_cache_state_load(c, 0, seq_state->data(), seq_state->size()));
        }));
        r.push_back(err("kvrt_cache_state_save_file", what, hnd, C,
                        [c = c, missing] { return out(kvrt_cache_state_save_file(c, -1, missing.c_str())); }));
        r.push_back(err("kvrt_cache_state_load_file", what, hnd, C,
                        [c = c, missing] { return out(kvrt_cache_state_load_file(c, -1, missing.c_str())); }));
        r.push_back(err("kvrt_cache_seq_swap_out", what, hnd, C, [c = c] {
            uint64_t n = 0;
            return out(kvrt_cache_seq_swap_out(c, 0, nullptr, &n));
        }));
        r.push_back(err("kvrt_cache_seq_swap_out_file", what, hnd, C,
                        [c = c, missing] { return out(kvrt_cache_seq_swap_out_file(c, 0, missing.c_str())); }));
        r.push_back(err("kvrt_cache_seq_swap_in", what, hnd, C, [c = c, seq_state] {
            return out(kvrt_cache_seq_swap_in(c, 3, seq_state->data(), seq_state->size()));
        }));
        r.push_back(err("kvrt_cache_seq_swap_in_file", what, hnd, C,
                        [c = c, missing] { return out(kvrt_cache_seq_swap_in_file(c, 3, missing.c_str())); }));
    }
    const kvrt_cache c = w.cache;
    for (int32_t seq : {-2, kMin32, int32_t(World::kSeqs), kMax32}) {
        const std::string what = "seq " + std::to_string(seq);
        r.push_back(err("kvrt_cache_state_save", what, inv, C, [c, seq] {
            uint64_t n = 0;
            return out(kvrt_cache_state_save(c, seq, nullptr, &n));
        }));
        r.push_back(err("kvrt_cache_state_load", what, inv, C, [c, seq, seq_state] {
            return out(kvrt_cache_state_load(c, seq, seq_state->data(), seq_state->size()));
        }));
        r.push_back(err("kvrt_cache_state_save_file", what, inv, C,
                        [c, seq, missing] { return out(kvrt_cache_state_save_file(c, seq, missing.c_str())); }));
        r.push_back(err("kvrt_cache_seq_swap_out", what, inv, C, [c, seq] {
            uint64_t n = 0;
            return out(kvrt_cache_seq_swap_out(c, seq, nullptr, &n));
        }));
        r.push_back(err("kvrt_cache_seq_swap_in", what, inv, C, [c, seq, seq_state] {
            return out(kvrt_cache_seq_swap_in(c, seq, seq_state->data(), seq_state->size()));
        }));
    }
    r.push_back(err("kvrt_cache_seq_swap_out", "seq -1 (the whole cache is no sequence)", inv, C, [c] {
        uint64_t n = 0;
        return out(kvrt_cache_seq_swap_out(c, -1, nullptr, &n));
    }));
    r.push_back(err("kvrt_cache_state_save", "NULL size", inv, C,
                    [c] { return out(kvrt_cache_state_save(c, -1, nullptr, nullptr)); }));
    r.push_back(err("kvrt_cache_state_save", "buffer too small", inv, C, [c] {
        std::vector<uint8_t> b(16);
        uint64_t n = b.size();
        return out(kvrt_cache_state_save(c, -1, b.data(), &n));
    }));
    r.push_back(err("kvrt_cache_seq_swap_out", "NULL size", inv, C,
                    [c] { return out(kvrt_cache_seq_swap_out(c, 0, nullptr, nullptr)); }));
    r.push_back(err("kvrt_cache_seq_swap_out", "buffer too small", inv, C, [c] {
        std::vector<uint8_t> b(16);
        uint64_t n = b.size();
        return out(kvrt_cache_seq_swap_out(c, 0, b.data(), &n));
    }));
    r.push_back(err("kvrt_cache_state_load", "NULL data, size 10", inv, C,
                    [c] { return out(kvrt_cache_state_load(c, -1, nullptr, 10)); }));
    r.push_back(err("kvrt_cache_state_load", "NULL data, size 0 (truncated)", KVRT_ERROR_CORRUPT_STATE, C,
                    [c] { return out(kvrt_cache_state_load(c, -1, nullptr, 0)); }));
    r.push_back(err("kvrt_cache_state_load", "100 bytes of garbage", KVRT_ERROR_CORRUPT_STATE, C,
                    [c, garbage] { return out(kvrt_cache_state_load(c, -1, garbage.data(), garbage.size())); }));
    r.push_back(err("kvrt_cache_state_load", "a sequence state with seq -1", inv, C, [c, seq_state] {
        return out(kvrt_cache_state_load(c, -1, seq_state->data(), seq_state->size()));
    }));
    r.push_back(err("kvrt_cache_state_load", "state of another geometry", inv, C, [c, &w] {
        // The static cache has other sizes.
        uint64_t n = 0;
        std::vector<uint8_t> b;
        if (kvrt_cache_state_save(w.static_cache, 0, nullptr, &n) == KVRT_SUCCESS) b.resize(n);
        if (kvrt_cache_state_save(w.static_cache, 0, b.data(), &n) != KVRT_SUCCESS) return Outcome{KVRT_SUCCESS, ""};
        return out(kvrt_cache_state_load(c, 2, b.data(), b.size()));
    }));
    r.push_back(err("kvrt_cache_seq_swap_in", "a sequence that holds tokens", inv, C, [c, seq_state] {
        return out(kvrt_cache_seq_swap_in(c, 0, seq_state->data(), seq_state->size()));
    }));
    r.push_back(err("kvrt_cache_seq_swap_in", "100 bytes of garbage", KVRT_ERROR_CORRUPT_STATE, C,
                    [c, garbage] { return out(kvrt_cache_seq_swap_in(c, 3, garbage.data(), garbage.size())); }));
    for (const char* path : {static_cast<const char*>(nullptr), ""}) {
        const std::string what = path ? "empty path" : "NULL path";
        r.push_back(err("kvrt_cache_state_save_file", what, inv, C,
                        [c, path] { return out(kvrt_cache_state_save_file(c, -1, path)); }));
        r.push_back(err("kvrt_cache_state_load_file", what, inv, C,
                        [c, path] { return out(kvrt_cache_state_load_file(c, -1, path)); }));
        r.push_back(err("kvrt_cache_seq_swap_out_file", what, inv, C,
                        [c, path] { return out(kvrt_cache_seq_swap_out_file(c, 0, path)); }));
        r.push_back(err("kvrt_cache_seq_swap_in_file", what, inv, C,
                        [c, path] { return out(kvrt_cache_seq_swap_in_file(c, 3, path)); }));
    }
    r.push_back(err("kvrt_cache_state_save_file", "a directory that does not exist", KVRT_ERROR_IO, C,
                    [c, missing] { return out(kvrt_cache_state_save_file(c, -1, missing.c_str())); }));
    r.push_back(err("kvrt_cache_state_load_file", "a file that does not exist", KVRT_ERROR_IO, C,
                    [c, missing] { return out(kvrt_cache_state_load_file(c, -1, missing.c_str())); }));
    r.push_back(err("kvrt_cache_state_load_file", "a directory", KVRT_ERROR_IO, C,
                    [c] { return out(kvrt_cache_state_load_file(c, -1, "/")); }));
    r.push_back(err("kvrt_cache_seq_swap_out_file", "a directory that does not exist (the sequence stays)",
                    KVRT_ERROR_IO, C,
                    [c, missing] { return out(kvrt_cache_seq_swap_out_file(c, 0, missing.c_str())); }));
    r.push_back(err("kvrt_cache_seq_swap_in_file", "a file that does not exist", KVRT_ERROR_IO, C,
                    [c, missing] { return out(kvrt_cache_seq_swap_in_file(c, 3, missing.c_str())); }));
    r.push_back(err("kvrt_cache_seq_swap_in_file", "a sequence that holds tokens (before the file is read)", inv, C,
                    [c, missing] { return out(kvrt_cache_seq_swap_in_file(c, 0, missing.c_str())); }));
}

}  // namespace kvrt_test::bad_input

using namespace kvrt_test::bad_input;

TEST_CASE("bad input: the state functions", "[bad_input][state]") {
    World w;
    std::vector<Row> rows;
    add_state_rows(w, &rows);
    REQUIRE(rows.size() > 40);
    auto whole = [&]() {
        uint64_t n = 0;
        REQUIRE(kvrt_cache_state_save(w.cache, -1, nullptr, &n) == KVRT_SUCCESS);
        std::vector<uint8_t> b(n);
        REQUIRE(kvrt_cache_state_save(w.cache, -1, b.data(), &n) == KVRT_SUCCESS);
        return b;
    };
    const std::vector<uint8_t> before = whole();
    for (const Row& row : rows) {
        INFO(row.fn << " (" << row.what << ")");
        const Outcome o = row.call();
        INFO("message: " << o.message);
        CHECK(o.r == row.want);
        CHECK(!o.message.empty());
        CHECK(whole() == before);
    }
}
