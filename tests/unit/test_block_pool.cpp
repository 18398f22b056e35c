// The paged layout's block pool: focused tests (exact prefix matching under
// forced hash collisions, eviction order, all-or-nothing failures,
// copy-on-write), a seeded model check of 100,000 random operations against a
// plain reference model, compared after every step, and an isolation check of
// sequences with sharing off.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/random.hpp"
#include "core/fault.hpp"
#include "kv/block_pool.hpp"

using kvrt::kv::BlockCopy;
using kvrt::kv::BlockPool;
using kvrt::kv::BlockWork;

namespace {

using TP = std::pair<int32_t, int32_t>;  // (token id, position)
constexpr uint32_t kNone = BlockPool::none;

// Everything a caller can observe of a pool, for "a failed operation changed
// nothing".
struct Snapshot {
    std::vector<std::vector<uint32_t>> tables;
    std::vector<uint32_t> lengths;
    std::vector<uint64_t> revisions, salts;
    std::vector<bool> sharing;
    std::vector<uint32_t> refs, fills, parents, lru;
    std::vector<bool> reg;
    std::vector<int32_t> pos, tok;
    uint32_t n_free = 0, n_cached = 0, n_used = 0, n_registered = 0;

    auto tie() const {
        return std::tie(tables, lengths, revisions, salts, sharing, refs, fills, parents, lru, reg, pos, tok, n_free,
                        n_cached, n_used, n_registered);
    }
    bool operator==(const Snapshot& o) const { return tie() == o.tie(); }
};

std::vector<uint32_t> lru_order(const BlockPool& p) {
    std::vector<uint32_t> v;
    for (uint32_t b = p.lru_oldest(); b != kNone; b = p.lru_newer(b)) v.push_back(b);
    return v;
}

Snapshot snapshot(const BlockPool& p) {
    Snapshot s;
    for (uint32_t q = 0; q < p.max_seqs(); ++q) {
        s.tables.push_back(p.block_table(int32_t(q)));
        s.lengths.push_back(p.seq_length(int32_t(q)));
        s.revisions.push_back(p.table_revision(int32_t(q)));
        s.salts.push_back(p.salt(int32_t(q)));
        s.sharing.push_back(p.sharing(int32_t(q)));
    }
    for (uint32_t b = 0; b < p.n_blocks(); ++b) {
        s.refs.push_back(p.refcount(b));
        s.fills.push_back(p.block_fill(b));
        s.parents.push_back(p.parent(b));
        s.reg.push_back(p.registered(b));
    }
    const size_t n_slots = size_t(p.n_blocks()) * p.block_size();
    s.pos.assign(p.positions(), p.positions() + n_slots);
    s.tok.assign(p.token_ids(), p.token_ids() + n_slots);
    s.lru = lru_order(p);
    s.n_free = p.free_count();
    s.n_cached = p.cached_count();
    s.n_used = p.used_count();
    s.n_registered = p.registered_count();
    return s;
}

// The tokens of `seq` read back through its block table.
std::vector<TP> read_back(const BlockPool& p, int32_t seq) {
    std::vector<TP> v;
    for (uint32_t t = 0; t < p.seq_length(seq); ++t) {
        const uint32_t slot = p.slot(seq, t);
        v.emplace_back(p.token_ids()[slot], p.positions()[slot]);
    }
    return v;
}

// Appends tokens with the given ids at consecutive positions from `pos0`.
kvrt::Result append_run(BlockPool& p, int32_t seq, const std::vector<int32_t>& ids, int32_t pos0,
                        BlockWork* out) {
    std::vector<int32_t> pos(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) pos[i] = pos0 + int32_t(i);
    return p.append(seq, uint32_t(ids.size()), ids.data(), pos.data(), out);
}

kvrt::Result admit_run(BlockPool& p, int32_t seq, const std::vector<int32_t>& ids, uint64_t salt, BlockWork* out,
                       int32_t pos0 = 0) {
    std::vector<int32_t> pos(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) pos[i] = pos0 + int32_t(i);
    return p.admit(seq, uint32_t(ids.size()), ids.data(), pos.data(), salt, out);
}

uint64_t constant_hash(uint64_t, uint64_t, const int32_t*, const int32_t*, uint32_t) { return 42; }

// Four distinct keys in all: nearly every lookup meets blocks with other
// contents under the same key, so the model check exercises the comparison.
uint64_t weak_hash(uint64_t parent_key, uint64_t, const int32_t* tokens, const int32_t*, uint32_t) {
    return (parent_key + uint64_t(tokens[0])) & 3u;
}

std::vector<int32_t> iota_ids(int32_t first, size_t n) {
    std::vector<int32_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = first + int32_t(i);
    return v;
}

}  // namespace

// ---- Focused tests -------------------------------------------------------------

TEST_CASE("BlockPool maps only blocks whose tokens, positions, salt and parent match, whatever the hash",
          "[kv][block_pool]") {
    BlockPool p;
    REQUIRE(p.init(32, 4, 8) == KVRT_SUCCESS);
    REQUIRE(p.set_hash_function(constant_hash) == KVRT_SUCCESS);  // every key collides
    BlockWork w;
    const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9};  // two full blocks + 1
    REQUIRE(admit_run(p, 0, a, 7, &w) == KVRT_SUCCESS);
    CHECK(w.n_cached == 0);
    REQUIRE(p.registered_count() == 2);
    const std::vector<uint32_t> ta = p.block_table(0);
    REQUIRE(p.verify() == KVRT_SUCCESS);

    // Same key, another token in block 0: nothing maps.
    std::vector<int32_t> b = a;
    b[2] = 99;
    REQUIRE(admit_run(p, 1, b, 7, &w) == KVRT_SUCCESS);
    CHECK(w.n_cached == 0);
    CHECK(p.block_table(1)[0] != ta[0]);
    CHECK(read_back(p, 1)[2] == TP(99, 2));

    // Same tokens, other positions: nothing maps.
    REQUIRE(admit_run(p, 2, a, 7, &w, 1) == KVRT_SUCCESS);
    CHECK(w.n_cached == 0);
    // Same tokens and positions, another salt: nothing maps.
    REQUIRE(admit_run(p, 3, a, 8, &w) == KVRT_SUCCESS);
    CHECK(w.n_cached == 0);

    // A difference in block 1 only: block 0 maps, block 1 does not.
    std::vector<int32_t> c = a;
    c[6] = 77;
    REQUIRE(admit_run(p, 4, c, 7, &w) == KVRT_SUCCESS);
    CHECK(w.n_cached == 4);
    CHECK(p.block_table(4)[0] == ta[0]);
    CHECK(p.block_table(4)[1] != ta[1]);
    CHECK(read_back(p, 4)[6] == TP(77, 6));

    // The whole prompt: both blocks map, the last token is computed.
    REQUIRE(admit_run(p, 5, a, 7, &w) == KVRT_SUCCESS);
    CHECK(w.n_cached == 8);
    CHECK(w.slots.size() == 1);
    CHECK(p.block_table(5)[0] == ta[0]);
    CHECK(p.block_table(5)[1] == ta[1]);
    CHECK(p.refcount(ta[0]) == 3);

    // Equal block contents under another parent: the chain decides. Block 1
    // of `d` equals block 1 of `b` (registered under b's block 0), but d's
    // block 0 is a's: it must not map b's block 1.
    std::vector<int32_t> d = a;
    for (int i = 4; i < 8; ++i) d[size_t(i)] = b[size_t(i)];
    d[4] = 55;
    std::vector<int32_t> e = b;
    e[4] = 55;  // e's block 1 == d's block 1, e's block 0 == b's block 0
    REQUIRE(p.remove(1) == KVRT_SUCCESS);
    REQUIRE(admit_run(p, 1, e, 7, &w) == KVRT_SUCCESS);  // registers e's block 1 under b's block 0
    REQUIRE(p.remove(6) == KVRT_SUCCESS);
    REQUIRE(admit_run(p, 6, d, 7, &w) == KVRT_SUCCESS);
    CHECK(w.n_cached == 4);  // a's block 0 only
    CHECK(p.block_table(6)[1] != p.block_table(1)[1]);
    REQUIRE(p.verify() == KVRT_SUCCESS);

    // Sharing off: nothing maps, nothing registers.
    REQUIRE(p.set_sharing(7, false) == KVRT_SUCCESS);
    const uint32_t registered = p.registered_count();
    REQUIRE(admit_run(p, 7, a, 7, &w) == KVRT_SUCCESS);
    CHECK(w.n_cached == 0);
    for (uint32_t blk : p.block_table(7)) CHECK(p.refcount(blk) == 1);
    CHECK(p.registered_count() == registered);
    REQUIRE(p.verify() == KVRT_SUCCESS);
    // The hash cannot change under registered blocks.
    CHECK(p.set_hash_function(nullptr) == KVRT_ERROR_INVALID_STATE);
}

TEST_CASE("BlockPool evicts the least recently released cached block first", "[kv][block_pool]") {
    BlockPool p;
    REQUIRE(p.init(6, 4, 4) == KVRT_SUCCESS);
    BlockWork w;
    REQUIRE(append_run(p, 0, iota_ids(100, 8), 0, &w) == KVRT_SUCCESS);  // 2 full blocks, registered
    REQUIRE(append_run(p, 1, iota_ids(200, 8), 0, &w) == KVRT_SUCCESS);
    const std::vector<uint32_t> a = p.block_table(0);
    const std::vector<uint32_t> b = p.block_table(1);
    REQUIRE(p.registered_count() == 4);
    REQUIRE(p.remove(0) == KVRT_SUCCESS);  // tail first: a[1] is older than a[0]
    REQUIRE(p.remove(1) == KVRT_SUCCESS);
    CHECK(lru_order(p) == std::vector<uint32_t>{a[1], a[0], b[1], b[0]});
    CHECK(p.free_count() == 2);
    CHECK(p.cached_count() == 4);

    // Mapping takes blocks out of the list; releasing puts them at the new end.
    REQUIRE(admit_run(p, 3, iota_ids(200, 9), 0, &w) == KVRT_SUCCESS);
    CHECK(w.n_cached == 8);
    CHECK(lru_order(p) == std::vector<uint32_t>{a[1], a[0]});
    CHECK(p.free_count() == 1);
    REQUIRE(p.remove(3) == KVRT_SUCCESS);  // its partial block is freed
    CHECK(lru_order(p) == std::vector<uint32_t>{a[1], a[0], b[1], b[0]});
    CHECK(p.free_count() == 2);

    // Three blocks: the two free ones, then the oldest cached one.
    REQUIRE(append_run(p, 2, iota_ids(300, 12), 0, &w) == KVRT_SUCCESS);
    CHECK(p.block_table(2)[2] == a[1]);
    CHECK(lru_order(p) == std::vector<uint32_t>{a[0], b[1], b[0]});
    REQUIRE(append_run(p, 2, iota_ids(312, 1), 12, &w) == KVRT_SUCCESS);
    CHECK(p.block_table(2)[3] == a[0]);
    CHECK(lru_order(p) == std::vector<uint32_t>{b[1], b[0]});
    CHECK(p.free_count() == 0);
    REQUIRE(p.verify() == KVRT_SUCCESS);
    // Nothing left to evict: the admit fails and changes nothing.
    const Snapshot before = snapshot(p);
    CHECK(admit_run(p, 3, iota_ids(200, 9), 0, &w) == KVRT_ERROR_CACHE_FULL);
    CHECK(snapshot(p) == before);
    CHECK(p.free_count() + p.cached_count() + p.used_count() == p.n_blocks());
}

TEST_CASE("BlockPool unregisters the descendants of a block it unregisters", "[kv][block_pool]") {
    BlockPool p;
    REQUIRE(p.init(8, 4, 4) == KVRT_SUCCESS);
    BlockWork w;
    REQUIRE(append_run(p, 0, iota_ids(100, 12), 0, &w) == KVRT_SUCCESS);
    const std::vector<uint32_t> a = p.block_table(0);
    CHECK(p.parent(a[1]) == a[0]);
    CHECK(p.parent(a[2]) == a[1]);
    REQUIRE(p.truncate(0, 4) == KVRT_SUCCESS);  // a[1], a[2] cached
    CHECK(p.cached_count() == 2);
    // Shifting a[0] in place changes its contents: its cached chain goes too.
    REQUIRE(p.shift(0, 1, 0, &w) == KVRT_SUCCESS);
    CHECK(w.copies.empty());
    CHECK(w.slots.size() == 4);
    CHECK(p.registered_count() == 0);
    CHECK(p.cached_count() == 0);
    CHECK(p.free_count() == 7);
    CHECK(read_back(p, 0)[0] == TP(100, 1));
    REQUIRE(p.verify() == KVRT_SUCCESS);
}

TEST_CASE("BlockPool match tells what admit maps; a capped admit maps fewer and can replace the rest",
          "[kv][block_pool]") {
    BlockPool p;
    REQUIRE(p.init(16, 4, 4) == KVRT_SUCCESS);
    BlockWork w;
    const std::vector<int32_t> ids = iota_ids(200, 13);
    REQUIRE(admit_run(p, 0, ids, 7, &w) == KVRT_SUCCESS);
    const std::vector<uint32_t> a = p.block_table(0);
    std::vector<int32_t> pos(13);
    for (int32_t i = 0; i < 13; ++i) pos[size_t(i)] = i;
    // 13 tokens: three full blocks match (the last token is left to compute).
    std::vector<uint32_t> m;
    REQUIRE(p.match(1, 13, ids.data(), pos.data(), 7, &m) == KVRT_SUCCESS);
    CHECK(m == std::vector<uint32_t>(a.begin(), a.begin() + 3));
    REQUIRE(p.match(1, 13, ids.data(), pos.data(), 8, &m) == KVRT_SUCCESS);  // another salt
    CHECK(m.empty());
    const Snapshot before = snapshot(p);
    REQUIRE(p.match(0, 13, ids.data(), pos.data(), 7, &m) == KVRT_SUCCESS);  // any sequence may ask
    CHECK(snapshot(p) == before);

    // Capped at one block: the second and third are computed again, in new
    // blocks that stay unregistered while the equal ones are.
    REQUIRE(p.admit(1, 13, ids.data(), pos.data(), 7, &w, 1) == KVRT_SUCCESS);
    CHECK(w.n_cached == 4);
    CHECK(p.block_table(1)[0] == a[0]);
    CHECK(p.block_table(1)[1] != a[1]);
    CHECK(!p.registered(p.block_table(1)[1]));
    CHECK(p.registered(a[1]));
    // With replace, the matched blocks past the cap leave the registry and
    // the blocks this admit fills take their place.
    REQUIRE(p.admit(2, 13, ids.data(), pos.data(), 7, &w, 1, true) == KVRT_SUCCESS);
    CHECK(w.n_cached == 4);
    const std::vector<uint32_t> c = p.block_table(2);
    CHECK(!p.registered(a[1]));
    CHECK(!p.registered(a[2]));
    CHECK(p.registered(c[1]));
    CHECK(p.registered(c[2]));
    REQUIRE(p.match(3, 13, ids.data(), pos.data(), 7, &m) == KVRT_SUCCESS);
    CHECK(m == std::vector<uint32_t>{a[0], c[1], c[2]});
    REQUIRE(p.verify() == KVRT_SUCCESS);
}

TEST_CASE("BlockPool operations that fail change nothing", "[kv][block_pool]") {
    BlockPool p;
    REQUIRE(p.init(5, 4, 4) == KVRT_SUCCESS);
    BlockWork w;
    REQUIRE(append_run(p, 0, iota_ids(10, 10), 0, &w) == KVRT_SUCCESS);  // 3 blocks, 2 registered
    REQUIRE(p.fork(0, 1) == KVRT_SUCCESS);
    REQUIRE(append_run(p, 2, iota_ids(50, 5), 0, &w) == KVRT_SUCCESS);  // 2 blocks: the pool is full
    REQUIRE(p.remove(2) == KVRT_SUCCESS);
    REQUIRE(append_run(p, 2, iota_ids(50, 4), 0, &w) == KVRT_SUCCESS);  // 1 registered block
    REQUIRE(p.remove(2) == KVRT_SUCCESS);                               // cached: 1 free, 1 cached
    const Snapshot before = snapshot(p);

    CHECK(append_run(p, 3, iota_ids(70, 9), 0, &w) == KVRT_ERROR_CACHE_FULL);  // 3 blocks, 2 available
    CHECK(snapshot(p) == before);
    CHECK(admit_run(p, 3, iota_ids(90, 9), 0, &w) == KVRT_ERROR_CACHE_FULL);
    CHECK(snapshot(p) == before);
    CHECK(p.shift(1, 5, 0, &w) == KVRT_ERROR_CACHE_FULL);  // 3 shared blocks to copy
    CHECK(snapshot(p) == before);
    CHECK(p.shift(1, -1, 0, &w) == KVRT_ERROR_INVALID_ARGUMENT);  // position 0 - 1
    CHECK(snapshot(p) == before);
    CHECK(p.fork(0, 1) == KVRT_ERROR_INVALID_ARGUMENT);  // not empty
    CHECK(admit_run(p, 0, iota_ids(1, 3), 0, &w) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(p.append(9, 1, nullptr, nullptr, &w) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(p.seq_rm(0, 2, 4) == KVRT_ERROR_UNSUPPORTED);  // a hole in the middle
    CHECK(snapshot(p) == before);

    // Host memory: every reserving operation, failing at its reserve step.
    kvrt::fault::arm_site("block_pool.reserve");
    CHECK(append_run(p, 3, iota_ids(70, 2), 0, &w) == KVRT_ERROR_OUT_OF_HOST_MEMORY);
    kvrt::fault::arm_site("block_pool.reserve");
    CHECK(admit_run(p, 3, iota_ids(50, 5), 0, &w) == KVRT_ERROR_OUT_OF_HOST_MEMORY);
    kvrt::fault::arm_site("block_pool.reserve");
    CHECK(p.fork(0, 3) == KVRT_ERROR_OUT_OF_HOST_MEMORY);
    kvrt::fault::arm_site("block_pool.reserve");
    CHECK(p.shift(0, 3, 9, &w) == KVRT_ERROR_OUT_OF_HOST_MEMORY);
    kvrt::fault::arm(0);
    CHECK(snapshot(p) == before);
    REQUIRE(p.verify() == KVRT_SUCCESS);

    // And the same admit succeeds, reviving the cached block.
    REQUIRE(admit_run(p, 3, iota_ids(50, 5), 0, &w) == KVRT_SUCCESS);
    CHECK(w.n_cached == 4);
    CHECK(p.free_count() == 0);
    REQUIRE(p.verify() == KVRT_SUCCESS);
}

TEST_CASE("BlockPool copies a shared block once, on the first write or shift", "[kv][block_pool]") {
    BlockPool p;
    REQUIRE(p.init(16, 4, 4) == KVRT_SUCCESS);
    BlockWork w;
    REQUIRE(append_run(p, 0, iota_ids(10, 6), 0, &w) == KVRT_SUCCESS);  // 1 full + 2 of 4
    REQUIRE(p.fork(0, 1) == KVRT_SUCCESS);
    const std::vector<uint32_t> t0 = p.block_table(0);
    CHECK(p.block_table(1) == t0);
    CHECK(p.refcount(t0[1]) == 2);

    REQUIRE(append_run(p, 1, {77}, 6, &w) == KVRT_SUCCESS);
    REQUIRE(w.copies.size() == 1);
    CHECK(w.copies[0].src == t0[1]);
    CHECK(w.copies[0].dst == p.block_table(1)[1]);
    CHECK(w.slots == std::vector<uint32_t>{p.block_table(1)[1] * 4 + 2});
    CHECK(p.block_table(1)[0] == t0[0]);  // the full block stays shared
    REQUIRE(append_run(p, 1, {78, 79}, 7, &w) == KVRT_SUCCESS);
    CHECK(w.copies.empty());
    REQUIRE(append_run(p, 0, {88}, 6, &w) == KVRT_SUCCESS);  // now ours alone
    CHECK(w.copies.empty());
    CHECK(p.block_table(0) == t0);
    CHECK(read_back(p, 0).back() == TP(88, 6));
    CHECK(read_back(p, 1)[6] == TP(77, 6));

    // Shift: shared blocks are copied, the other sequence sees no change.
    REQUIRE(p.fork(1, 2) == KVRT_SUCCESS);
    const std::vector<TP> seen = read_back(p, 1);
    const std::vector<uint32_t> t1 = p.block_table(1);
    REQUIRE(p.registered(t1[0]));
    REQUIRE(p.shift(2, 100, 2, &w) == KVRT_SUCCESS);
    CHECK(w.copies.size() == 3);  // blocks 0, 1 (shared by 1 and 2) and 2
    CHECK(w.delta == 100);
    CHECK(w.slots.size() == 7);
    CHECK(read_back(p, 1) == seen);
    CHECK(p.registered(t1[0]));                      // the original keeps its key
    CHECK(!p.registered(p.block_table(2)[0]));       // the copy has none
    CHECK(read_back(p, 2)[1] == TP(11, 1));
    CHECK(read_back(p, 2)[2] == TP(12, 102));
    // In place when not shared, and unregistered.
    REQUIRE(p.registered(t1[1]));
    REQUIRE(p.shift(1, 1, 4, &w) == KVRT_SUCCESS);
    CHECK(w.copies.empty());
    CHECK(!p.registered(t1[1]));
    CHECK(p.registered(t1[0]));
    CHECK(p.block_table(1) == t1);
    REQUIRE(p.verify() == KVRT_SUCCESS);

    // Truncating into a shared block copies on the next write only.
    REQUIRE(p.fork(0, 3) == KVRT_SUCCESS);
    REQUIRE(p.truncate(3, 5) == KVRT_SUCCESS);
    CHECK(p.block_table(3) == std::vector<uint32_t>{t0[0], t0[1]});
    CHECK(p.block_fill(t0[1]) == 3);
    REQUIRE(append_run(p, 3, {5}, 5, &w) == KVRT_SUCCESS);
    REQUIRE(w.copies.size() == 1);
    CHECK(read_back(p, 3).back() == TP(5, 5));
    CHECK(read_back(p, 0)[5] == TP(15, 5));
    // seq_rm of a tail is a truncation.
    REQUIRE(p.seq_rm(0, 4, -1) == KVRT_SUCCESS);
    CHECK(p.seq_length(0) == 4);
    REQUIRE(p.verify() == KVRT_SUCCESS);
}

// ---- Model check ---------------------------------------------------------------

namespace {

// The reference: every sequence is a list of (token, position) with a sharing
// flag and a salt; blocks are model objects (never reused) that remember the
// physical block the pool gave them; the registry is a map from (salt, whole
// prefix) to the block holding that prefix's last B tokens; cached blocks are
// a list, oldest release first. Counts are recomputed by brute force.
struct Model {
    struct Block {
        bool alive = true;
        bool registered = false;
        bool shifted = false;  // holds rows a shift moved: never registered
        uint64_t salt = 0;
        std::vector<TP> key;  // the registered prefix
        uint32_t phys = kNone;
    };
    struct Seq {
        std::vector<TP> toks;
        std::vector<int> blocks;
        bool sharing = true;
        uint64_t salt = 0;
    };

    uint32_t B = 0;
    uint32_t n_blocks = 0;
    std::vector<Seq> seqs;
    std::vector<Block> blocks;
    std::map<std::pair<uint64_t, std::vector<TP>>, int> registry;
    std::vector<int> lru;
    std::vector<std::pair<int, int>> copies;  // (original, copy) of the last operation
    uint64_t evictions = 0;

    uint32_t refcount(int m) const {
        uint32_t n = 0;
        for (const Seq& s : seqs) n += uint32_t(std::count(s.blocks.begin(), s.blocks.end(), m));
        return n;
    }
    uint32_t used() const {
        std::set<int> u;
        for (const Seq& s : seqs) u.insert(s.blocks.begin(), s.blocks.end());
        return uint32_t(u.size());
    }
    uint32_t available() const { return n_blocks - used(); }  // free + cached
    uint32_t n_free() const { return n_blocks - used() - uint32_t(lru.size()); }

    // Unregisters m and every registered prefix that extends m's.
    void unregister(int m) {
        const uint64_t salt = blocks[size_t(m)].salt;
        const std::vector<TP> key = blocks[size_t(m)].key;
        for (auto it = registry.begin(); it != registry.end();) {
            const std::vector<TP>& k = it->first.second;
            if (it->first.first == salt && k.size() >= key.size() && std::equal(key.begin(), key.end(), k.begin())) {
                Block& b = blocks[size_t(it->second)];
                b.registered = false;
                b.key.clear();
                if (refcount(it->second) == 0) {
                    lru.erase(std::find(lru.begin(), lru.end(), it->second));
                    b.alive = false;
                }
                it = registry.erase(it);
            } else {
                ++it;
            }
        }
    }
    int alloc() {
        if (n_free() == 0) {
            unregister(lru.front());
            ++evictions;
        }
        blocks.emplace_back();
        return int(blocks.size() - 1);
    }
    // After m left a table.
    void released(int m) {
        if (refcount(m) != 0) return;
        if (blocks[size_t(m)].registered) {
            lru.push_back(m);
        } else {
            blocks[size_t(m)].alive = false;
        }
    }
    void maybe_register(Seq& s, size_t i) {
        if (!s.sharing) return;
        if (i > 0 && !blocks[size_t(s.blocks[i - 1])].registered) return;
        std::pair<uint64_t, std::vector<TP>> k(s.salt, {s.toks.begin(), s.toks.begin() + ptrdiff_t((i + 1) * B)});
        if (registry.count(k) != 0) return;
        Block& b = blocks[size_t(s.blocks[i])];
        if (b.shifted) return;
        b.registered = true;
        b.salt = s.salt;
        b.key = k.second;
        registry.emplace(std::move(k), s.blocks[i]);
    }
    uint32_t append_need(const Seq& s, size_t n) const {
        if (n == 0) return 0;
        const size_t view = s.toks.size() % B;
        const size_t room = view == 0 ? 0 : B - view;
        uint32_t need = n > room ? uint32_t((n - room + B - 1) / B) : 0;
        if (view != 0 && refcount(s.blocks.back()) > 1) ++need;
        return need;
    }
    void append(Seq& s, const std::vector<TP>& t) {
        if (t.empty()) return;
        if (s.toks.size() % B != 0) {
            const int last = s.blocks.back();
            if (refcount(last) > 1) {
                const int c = alloc();
                blocks[size_t(c)].shifted = blocks[size_t(last)].shifted;
                s.blocks.back() = c;
                copies.emplace_back(last, c);
            } else if (blocks[size_t(last)].registered) {
                unregister(last);  // overwritten past our length
            }
        }
        for (const TP& x : t) {
            if (s.toks.size() % B == 0) s.blocks.push_back(alloc());
            s.toks.push_back(x);
            if (s.toks.size() % B == 0) maybe_register(s, s.blocks.size() - 1);
        }
    }
    // The registered blocks an admit of `t` would map.
    std::vector<int> matches(const Seq& s, const std::vector<TP>& t, uint64_t salt) const {
        std::vector<int> m;
        if (!s.sharing || t.size() < 2) return m;
        for (size_t i = 0; i < (t.size() - 1) / B; ++i) {
            auto it = registry.find({salt, std::vector<TP>(t.begin(), t.begin() + ptrdiff_t((i + 1) * B))});
            if (it == registry.end()) break;
            m.push_back(it->second);
        }
        return m;
    }
    void admit(Seq& s, const std::vector<TP>& t, uint64_t salt, const std::vector<int>& m) {
        s.salt = salt;
        for (int b : m) {
            if (refcount(b) == 0) lru.erase(std::find(lru.begin(), lru.end(), b));
            s.blocks.push_back(b);
        }
        s.toks.assign(t.begin(), t.begin() + ptrdiff_t(m.size() * B));
        append(s, std::vector<TP>(t.begin() + ptrdiff_t(m.size() * B), t.end()));
    }
    void truncate(Seq& s, size_t keep) {
        if (keep >= s.toks.size()) return;
        const size_t kept = (keep + B - 1) / B;
        if (keep % B != 0) {
            const int b = s.blocks[kept - 1];
            if (refcount(b) == 1 && blocks[size_t(b)].registered) unregister(b);
        }
        while (s.blocks.size() > kept) {
            const int b = s.blocks.back();
            s.blocks.pop_back();
            released(b);
        }
        s.toks.resize(keep);
        if (keep == 0) s.salt = 0;
    }
    uint32_t shift_copies(const Seq& s, size_t from) const {
        uint32_t n = 0;
        for (size_t i = from / B; i < s.blocks.size(); ++i) n += refcount(s.blocks[i]) > 1 ? 1 : 0;
        return n;
    }
    void shift(Seq& s, int32_t delta, size_t from) {
        if (from >= s.toks.size()) return;
        for (size_t i = from / B; i < s.blocks.size(); ++i) {
            const int b = s.blocks[i];
            if (refcount(b) > 1) {
                const int c = alloc();
                s.blocks[i] = c;
                copies.emplace_back(b, c);
                blocks[size_t(c)].shifted = true;
            } else {
                if (blocks[size_t(b)].registered) unregister(b);
                blocks[size_t(b)].shifted = true;
            }
        }
        for (size_t t = from; t < s.toks.size(); ++t) s.toks[t].second += delta;
    }
    void clear_registry() {
        for (int b : lru) blocks[size_t(b)].alive = false;
        lru.clear();
        for (auto& e : registry) {
            blocks[size_t(e.second)].registered = false;
            blocks[size_t(e.second)].key.clear();
        }
        registry.clear();
    }
};

template <class... Parts>
std::string say(const Parts&... parts) {
    std::ostringstream os;
    (void)(os << ... << parts);
    return os.str();
}

// Learns the physical block of every new model block, then compares
// everything; returns the first disagreement, or "".
std::string compare(const BlockPool& p, Model& m) {
    const uint32_t nb = p.n_blocks();
    for (size_t q = 0; q < m.seqs.size(); ++q) {
        const Model::Seq& s = m.seqs[q];
        const std::vector<uint32_t>& table = p.block_table(int32_t(q));
        if (table.size() != s.blocks.size() || p.seq_length(int32_t(q)) != s.toks.size()) {
            return say("seq ", q, ": ", table.size(), " blocks / ", p.seq_length(int32_t(q)), " tokens, model ",
                       s.blocks.size(), " / ", s.toks.size());
        }
        for (size_t i = 0; i < table.size(); ++i) {
            Model::Block& b = m.blocks[size_t(s.blocks[i])];
            if (b.phys == kNone) b.phys = table[i];
            if (b.phys != table[i]) return say("seq ", q, " block ", i, ": ", table[i], ", model ", b.phys);
        }
        if (read_back(p, int32_t(q)) != s.toks) return say("seq ", q, ": tokens or positions differ");
        if (p.sharing(int32_t(q)) != s.sharing || p.salt(int32_t(q)) != s.salt) return say("seq ", q, ": flags");
    }
    // Physical block -> model block, for every block in use or cached.
    std::vector<int> owner(nb, -1);
    std::vector<uint32_t> refs(nb, 0);
    auto own = [&](int mb) -> std::string {
        const uint32_t b = m.blocks[size_t(mb)].phys;
        if (b >= nb) return say("model block ", mb, " has no physical block");
        if (owner[b] != -1 && owner[b] != mb) return say("block ", b, " belongs to two model blocks");
        owner[b] = mb;
        return "";
    };
    for (const Model::Seq& s : m.seqs) {
        for (int mb : s.blocks) {
            const std::string e = own(mb);
            if (!e.empty()) return e;
            ++refs[m.blocks[size_t(mb)].phys];
        }
    }
    for (int mb : m.lru) {
        const std::string e = own(mb);
        if (!e.empty()) return e;
    }
    for (uint32_t b = 0; b < nb; ++b) {
        if (p.refcount(b) != refs[b]) return say("block ", b, ": refcount ", p.refcount(b), ", entries ", refs[b]);
        const bool reg = owner[b] >= 0 && m.blocks[size_t(owner[b])].registered;
        if (p.registered(b) != reg) return say("block ", b, ": registered ", p.registered(b), ", model ", reg);
    }
    std::vector<uint32_t> lru;
    for (int mb : m.lru) lru.push_back(m.blocks[size_t(mb)].phys);
    if (lru_order(p) != lru) return "eviction order differs";
    if (p.used_count() != m.used() || p.cached_count() != m.lru.size() || p.free_count() != m.n_free()) {
        return say("counts: used ", p.used_count(), " cached ", p.cached_count(), " free ", p.free_count(),
                   "; model ", m.used(), " ", m.lru.size(), " ", m.n_free());
    }
    if (p.free_count() + p.cached_count() + p.used_count() != nb) return "blocks leaked";
    if (p.registered_count() != m.registry.size()) return "registered count differs";
    if (p.verify() != KVRT_SUCCESS) return say("verify: ", kvrt::last_error_message());
    return "";
}

// The device work of the last operation against the model's copies and the
// slots of the tokens it wrote (first..last-1) or shifted.
std::string compare_work(const BlockPool& p, const Model& m, const BlockWork& w, int32_t seq, uint32_t first) {
    if (w.copies.size() != m.copies.size()) {
        return say("copies: ", w.copies.size(), ", model ", m.copies.size());
    }
    for (size_t i = 0; i < w.copies.size(); ++i) {
        const uint32_t src = m.blocks[size_t(m.copies[i].first)].phys;
        const uint32_t dst = m.blocks[size_t(m.copies[i].second)].phys;
        if (w.copies[i].src != src || w.copies[i].dst != dst) return say("copy ", i, " differs");
    }
    std::vector<uint32_t> slots;
    for (uint32_t t = first; t < p.seq_length(seq); ++t) slots.push_back(p.slot(seq, t));
    if (w.slots != slots) return "slots differ";
    return "";
}

struct Outcome {
    std::string name;
    kvrt::Result got;
};

void run_model_check(uint32_t n_blocks, uint32_t block_size, kvrt::kv::BlockHashFn hash, uint32_t seed) {
    constexpr int32_t kSeqs = 6;
    constexpr int kSteps = 100000;
    constexpr int kDocs = 5;
    constexpr uint32_t kDocLen = 64;
    kvrt_test::Rng rng(seed);
    auto rnd = [&](int64_t lo, int64_t hi) { return lo + int64_t(rng() % uint64_t(hi - lo + 1)); };

    BlockPool p;
    REQUIRE(p.init(n_blocks, block_size, kSeqs) == KVRT_SUCCESS);
    REQUIRE(p.set_hash_function(hash) == KVRT_SUCCESS);
    Model m;
    m.B = block_size;
    m.n_blocks = n_blocks;
    m.seqs.resize(kSeqs);
    // Prompts share prefixes with these documents; a small vocabulary makes
    // equal blocks under other parents common.
    std::vector<std::vector<int32_t>> docs(kDocs, std::vector<int32_t>(kDocLen));
    for (auto& d : docs)
        for (auto& t : d) t = int32_t(rnd(0, 5));
    for (int i = 1; i < kDocs; ++i) {  // docs 1.. start with a piece of doc 0
        const size_t common = size_t(rnd(0, kDocLen / 2));
        std::copy(docs[0].begin(), docs[0].begin() + ptrdiff_t(common), docs[size_t(i)].begin());
    }

    std::map<std::string, int> ok, failed;
    std::map<std::string, int> stats;
    int disagreements = 0;
    std::string first_disagreement;
    uint64_t n_copies = 0;  // block copies reported
    BlockWork w;

    for (int step = 0; step < kSteps && disagreements == 0; ++step) {
        const Snapshot before = snapshot(p);
        m.copies.clear();
        int64_t op = rnd(0, 999);
        int32_t q = int32_t(rnd(0, kSeqs - 1));
        // Keep the pool busy but not always full: remove a sequence more
        // often when few blocks are left.
        if (m.available() < n_blocks / 4 && rnd(0, 3) == 0) op = 650;
        if (op >= 280 && op < 460 && rnd(0, 9) != 0) {
            // Admit mostly into an empty sequence; make one if there is none.
            for (int32_t k = 0; k < kSeqs && !m.seqs[size_t(q)].toks.empty(); ++k) q = (q + 1) % kSeqs;
            if (!m.seqs[size_t(q)].toks.empty()) op = 650;
        }
        Model::Seq& s = m.seqs[size_t(q)];
        const bool inject = rnd(0, 99) < 2;  // a host allocation failure
        if (inject) kvrt::fault::arm_site("block_pool.reserve");
        kvrt::Result want = KVRT_SUCCESS;
        kvrt::Result got = KVRT_SUCCESS;
        std::string name;
        std::string err;
        std::function<void()> apply;  // the model's change, run when the pool succeeded
        std::function<std::string()> check_work = [] { return std::string(); };

        const int32_t next_pos = s.toks.empty() ? 0 : s.toks.back().second + 1;
        if (op < 280) {
            // Append: generated tokens, a document's continuation, or (rarely)
            // far more than the pool holds.
            name = "append";
            uint32_t n = uint32_t(rnd(1, 3 * block_size));
            if (rnd(0, 99) < 4) n = uint32_t(rnd(1, 2) * n_blocks * block_size / 2);
            std::vector<int32_t> ids(n), pos(n);
            const size_t d = size_t(rnd(0, kDocs - 1));
            const bool follow = rnd(0, 1) == 0;
            std::vector<TP> t;
            for (uint32_t i = 0; i < n; ++i) {
                const size_t at = s.toks.size() + i;
                ids[i] = follow && at < kDocLen ? docs[d][at] : int32_t(rnd(0, 5));
                pos[i] = next_pos + int32_t(i);
                t.emplace_back(ids[i], pos[i]);
            }
            const uint32_t need = m.append_need(s, n);
            want = need > m.available() ? KVRT_ERROR_CACHE_FULL : KVRT_SUCCESS;
            if (want != KVRT_SUCCESS) {
                name = "append (full)";
            } else if (s.toks.size() % block_size != 0 && m.refcount(s.blocks.back()) > 1) {
                name = "append (copy-on-write)";
            }
            const uint32_t first = uint32_t(s.toks.size());
            got = p.append(q, n, ids.data(), pos.data(), &w);
            apply = [&m, &s, t] { m.append(s, t); };
            check_work = [&, q, first] { return compare_work(p, m, w, q, first); };
        } else if (op < 460) {
            // Admit a prompt into an empty sequence (or, rarely, a full one).
            name = "admit";
            const size_t d = size_t(rnd(0, kDocs - 1));
            const size_t len = size_t(rnd(1, kDocLen));
            std::vector<int32_t> ids(docs[d].begin(), docs[d].begin() + ptrdiff_t(len));
            for (int64_t k = rnd(-3, 4); k > 0; --k) ids.push_back(int32_t(rnd(0, 5)));
            const int32_t pos0 = rnd(0, 9) == 0 ? 1 : 0;
            const uint64_t salt = rnd(0, 9) == 0 ? 1 : 0;
            std::vector<int32_t> pos(ids.size());
            std::vector<TP> t;
            for (size_t i = 0; i < ids.size(); ++i) {
                pos[i] = pos0 + int32_t(i);
                t.emplace_back(ids[i], pos[i]);
            }
            const std::vector<int> match = m.matches(s, t, salt);
            uint32_t revived = 0;
            for (int b : match) revived += m.refcount(b) == 0 ? 1 : 0;
            const uint32_t need = uint32_t((t.size() - match.size() * block_size + block_size - 1) / block_size);
            if (!s.toks.empty()) {
                want = KVRT_ERROR_INVALID_ARGUMENT;
                name = "admit (not empty)";
            } else if (need > m.available() - revived) {
                want = KVRT_ERROR_CACHE_FULL;
                name = "admit (full)";
            } else if (!match.empty()) {
                name = "admit (prefix hit)";
            }
            got = p.admit(q, uint32_t(ids.size()), ids.data(), pos.data(), salt, &w);
            apply = [&m, &s, t, salt, match] { m.admit(s, t, salt, match); };
            const uint32_t n_cached = uint32_t(match.size()) * block_size;
            const bool sharing = s.sharing;
            check_work = [&, q, n_cached, sharing]() -> std::string {
                if (w.n_cached != n_cached) return say("n_cached ", w.n_cached, ", model ", n_cached);
                if (!sharing) {
                    // Isolation: nothing mapped, every block its own, and every
                    // token written by this call (no slot read from elsewhere).
                    if (w.n_cached != 0 || w.slots.size() != p.seq_length(q)) return "a private sequence reuses data";
                    for (uint32_t b : p.block_table(q))
                        if (p.refcount(b) != 1) return "a private sequence maps a shared block";
                }
                return compare_work(p, m, w, q, n_cached);
            };
        } else if (op < 540) {
            name = "fork";
            int32_t dst = int32_t(rnd(0, kSeqs - 1));
            if (rnd(0, 4) != 0) {  // mostly an empty destination
                for (int32_t k = 0; k < kSeqs && (dst == q || !m.seqs[size_t(dst)].toks.empty()); ++k)
                    dst = (dst + 1) % kSeqs;
            }
            Model::Seq& d = m.seqs[size_t(dst)];
            want = dst == q || !d.toks.empty() ? KVRT_ERROR_INVALID_ARGUMENT : KVRT_SUCCESS;
            if (want != KVRT_SUCCESS) name = "fork (bad)";
            got = p.fork(q, dst);
            apply = [&s, &d] {
                d.toks = s.toks;
                d.blocks = s.blocks;
                d.salt = s.salt;
            };
        } else if (op < 640) {
            name = "truncate";
            const size_t keep = size_t(rnd(0, int64_t(s.toks.size())));
            got = p.truncate(q, uint32_t(keep));
            apply = [&m, &s, keep] { m.truncate(s, keep); };
        } else if (op < 710) {
            name = "remove";
            got = p.remove(q);
            apply = [&m, &s] { m.truncate(s, 0); };
        } else if (op < 820) {
            name = "shift";
            const size_t from = size_t(rnd(0, int64_t(s.toks.size())));
            int32_t delta = int32_t(rnd(-6, 6));
            if (delta == 0) delta = 1000;
            bool in_range = true;
            for (size_t t = from; t < s.toks.size(); ++t) in_range = in_range && s.toks[t].second + delta >= 0;
            const bool noop = from >= s.toks.size();
            if (noop) {
                name = "shift (no-op)";
            } else if (!in_range) {
                want = KVRT_ERROR_INVALID_ARGUMENT;
                name = "shift (negative)";
            } else if (m.shift_copies(s, from) > m.available()) {
                want = KVRT_ERROR_CACHE_FULL;
                name = "shift (full)";
            } else if (m.shift_copies(s, from) > 0) {
                name = "shift (copies)";
            }
            got = p.shift(q, delta, uint32_t(from), &w);
            apply = [&m, &s, delta, from] { m.shift(s, delta, from); };
            check_work = [&, q, from, delta, noop]() -> std::string {
                if (w.delta != (noop ? 0 : delta)) return "delta differs";
                return compare_work(p, m, w, q, noop ? p.seq_length(q) : uint32_t(from));
            };
        } else if (op < 870) {
            name = "set_sharing";
            const bool on = rnd(0, 99) < 75;
            got = p.set_sharing(q, on);
            apply = [&s, on] { s.sharing = on; };
        } else if (op < 875) {
            name = "clear_registry";
            p.clear_registry();
            apply = [&m] { m.clear_registry(); };
        } else if (op < 930) {
            name = "seq_rm";
            const int32_t top = s.toks.empty() ? 0 : s.toks.back().second;
            const int32_t p0 = int32_t(rnd(-1, top + 2));
            const int32_t p1 = rnd(0, 2) == 0 ? -1 : p0 + int32_t(rnd(std::max<int32_t>(0, -p0), 8));
            const int64_t lo = std::max(p0, 0);
            const int64_t hi = p1 < 0 ? INT64_MAX : p1;
            size_t first = s.toks.size();
            bool suffix = true;
            for (size_t t = 0; t < s.toks.size(); ++t) {
                const bool in = s.toks[t].second >= lo && s.toks[t].second < hi;
                if (in && first == s.toks.size()) first = t;
                if (!in && first != s.toks.size()) suffix = false;
            }
            if (!suffix) {
                want = KVRT_ERROR_UNSUPPORTED;
                name = "seq_rm (hole)";
            }
            got = p.seq_rm(q, p0, p1);
            apply = [&m, &s, first] { m.truncate(s, first); };
        } else {
            // Pressure: a big prompt into the pool as it is, often too big.
            name = "append";
            const uint32_t n = uint32_t(rnd(1, n_blocks * block_size));
            std::vector<int32_t> ids(n), pos(n);
            std::vector<TP> t;
            for (uint32_t i = 0; i < n; ++i) {
                ids[i] = int32_t(rnd(0, 5));
                pos[i] = next_pos + int32_t(i);
                t.emplace_back(ids[i], pos[i]);
            }
            want = m.append_need(s, n) > m.available() ? KVRT_ERROR_CACHE_FULL : KVRT_SUCCESS;
            if (want != KVRT_SUCCESS) name = "append (full)";
            const uint32_t first = uint32_t(s.toks.size());
            got = p.append(q, n, ids.data(), pos.data(), &w);
            apply = [&m, &s, t] { m.append(s, t); };
            check_work = [&, q, first] { return compare_work(p, m, w, q, first); };
        }
        kvrt::fault::arm(0);

        if (inject && want == KVRT_SUCCESS && got == KVRT_ERROR_OUT_OF_HOST_MEMORY) {
            name += " (out of memory)";
            want = got;
        }
        if (got != want) {
            err = say("returned ", kvrt::result_name(got), ", expected ", kvrt::result_name(want), " (",
                      kvrt::last_error_message(), ")");
        } else if (got != KVRT_SUCCESS) {
            if (!(snapshot(p) == before)) err = "a failed operation changed the pool";
        } else {
            apply();
            err = compare(p, m);
            if (err.empty()) err = check_work();
        }
        (got == KVRT_SUCCESS ? ok : failed)[name]++;
        if (got == KVRT_SUCCESS) n_copies += w.copies.size();
        if (!err.empty()) {
            ++disagreements;
            first_disagreement = say("step ", step, " (", name, " on seq ", q, "): ", err);
        }
    }

    // Drop everything: every block must come back.
    for (int32_t q = 0; q < kSeqs; ++q) REQUIRE(p.remove(q) == KVRT_SUCCESS);
    p.clear_registry();
    const uint32_t leaked = p.n_blocks() - p.free_count();

    std::ostringstream report;
    report << "block pool model check (" << n_blocks << " blocks of " << block_size << ", seed " << seed
           << "):\n";
    for (const auto& e : ok) report << "  " << e.first << ": " << e.second << " ok\n";
    for (const auto& e : failed) report << "  " << e.first << ": " << e.second << " failed as expected\n";
    report << "  block copies: " << n_copies << ", evictions: " << m.evictions << "\n";
    report << "  disagreements: " << disagreements << ", leaked blocks: " << leaked << "\n";
    WARN(report.str());
    INFO(first_disagreement);
    CHECK(disagreements == 0);
    CHECK(leaked == 0);
    CHECK(p.verify() == KVRT_SUCCESS);
}

}  // namespace

TEST_CASE("BlockPool agrees with a reference model over 100,000 random operations", "[kv][block_pool][model]") {
    run_model_check(40, 4, nullptr, 0x70616765u);
}

TEST_CASE("BlockPool agrees with the model when lookup keys collide all the time", "[kv][block_pool][model]") {
    run_model_check(24, 16, weak_hash, 0x636f6c6cu);
}

namespace {

// Isolation: sequences 0-3 keep sharing off, 4-7 on, all over the same few
// prompts. Every slot remembers the family that wrote it (a private sequence
// and the sequences forked from it form a family; every sharing sequence is
// in the public family), block copies carry those tags along, and after
// every step every token a sequence can see must come from its own family.
// A private sequence's blocks are mapped by no other family, and it never
// maps a registered block; the sharing sequences must still share (admit
// reports cached tokens), so the check is not vacuous.
void run_isolation_check(uint32_t seed) {
    constexpr int32_t kSeqs = 8, kPrivate = 4;
    constexpr uint32_t kB = 8, kBlocks = 96;
    constexpr int kSteps = 20000;
    constexpr int32_t kPublic = -1;
    kvrt_test::Rng rng(seed);
    auto rnd = [&](int64_t lo, int64_t hi) { return lo + int64_t(rng() % uint64_t(hi - lo + 1)); };
    BlockPool p;
    REQUIRE(p.init(kBlocks, kB, kSeqs) == KVRT_SUCCESS);
    std::vector<int32_t> family(kSeqs);
    for (int32_t q = 0; q < kSeqs; ++q) {
        family[size_t(q)] = q < kPrivate ? q : kPublic;
        REQUIRE(p.set_sharing(q, q >= kPrivate) == KVRT_SUCCESS);
    }
    std::vector<int32_t> writer(size_t{kBlocks} * kB, INT32_MIN);  // family that wrote each slot
    std::vector<std::vector<int32_t>> prompts(3, std::vector<int32_t>(5 * kB));
    for (auto& d : prompts)
        for (auto& t : d) t = int32_t(rnd(0, 3));
    int private_admits = 0, public_cached = 0, violations = 0;
    std::string first;
    BlockWork w;
    const auto apply_work = [&](int32_t q) {
        for (const BlockCopy& c : w.copies)
            std::copy_n(writer.begin() + ptrdiff_t(c.src) * kB, kB, writer.begin() + ptrdiff_t(c.dst) * kB);
        for (uint32_t slot : w.slots) writer[slot] = family[size_t(q)];
    };
    for (int step = 0; step < kSteps && violations == 0; ++step) {
        const int32_t q = int32_t(rnd(0, kSeqs - 1));
        const bool priv = q < kPrivate;
        const uint32_t len = p.seq_length(q);
        const int64_t op = rnd(0, 99);
        if (len == 0 && op < 60) {
            // A prompt: one of the common ones, cut anywhere, plus its own tail.
            const auto& d = prompts[size_t(rnd(0, 2))];
            std::vector<int32_t> toks(d.begin(), d.begin() + rnd(1, int64_t(d.size())));
            for (int64_t i = rnd(0, 10); i > 0; --i) toks.push_back(int32_t(rnd(0, 3)));
            std::vector<int32_t> pos(toks.size());
            for (size_t i = 0; i < pos.size(); ++i) pos[i] = int32_t(i);
            if (p.admit(q, uint32_t(toks.size()), toks.data(), pos.data(), 0, &w) != KVRT_SUCCESS) continue;
            apply_work(q);
            if (priv) {
                ++private_admits;
                if (w.n_cached != 0 && violations++ == 0) first = "a private sequence mapped cached tokens";
            } else if (w.n_cached > 0) {
                ++public_cached;
            }
        } else if (len == 0) {
            // A fork within the class: the new sequence joins the family.
            const int32_t src = int32_t(priv ? rnd(0, kPrivate - 1) : rnd(kPrivate, kSeqs - 1));
            if (src == q || p.seq_length(src) == 0) continue;
            REQUIRE(p.fork(src, q) == KVRT_SUCCESS);
            family[size_t(q)] = family[size_t(src)];
        } else if (op < 55) {
            std::vector<int32_t> toks(size_t(rnd(1, 2 * kB))), pos(toks.size());
            for (size_t i = 0; i < toks.size(); ++i) {
                toks[i] = int32_t(rnd(0, 3));
                pos[i] = int32_t(len + i);
            }
            if (p.append(q, uint32_t(toks.size()), toks.data(), pos.data(), &w) != KVRT_SUCCESS) continue;
            apply_work(q);
        } else if (op < 70) {
            if (p.shift(q, int32_t(rnd(1, 3)), uint32_t(rnd(0, len - 1)), &w) != KVRT_SUCCESS) continue;
            apply_work(q);
        } else if (op < 97) {
            REQUIRE(p.truncate(q, op < 85 ? uint32_t(rnd(0, len)) : 0) == KVRT_SUCCESS);
        } else {
            p.clear_registry();
        }
        // An emptied sequence starts its own family again.
        for (int32_t s = 0; s < kSeqs; ++s)
            if (p.seq_length(s) == 0) family[size_t(s)] = s < kPrivate ? s : kPublic;
        for (int32_t s = 0; s < kSeqs && violations == 0; ++s) {
            for (uint32_t t = 0; t < p.seq_length(s); ++t) {
                const uint32_t slot = p.slot(s, t);
                if (writer[slot] == family[size_t(s)]) continue;
                std::ostringstream o;
                o << "step " << step << ": sequence " << s << " (family " << family[size_t(s)] << ") sees token " << t
                  << " in slot " << slot << ", written by family " << writer[slot];
                first = o.str();
                ++violations;
                break;
            }
        }
    }
    INFO(first);
    CHECK(violations == 0);
    CHECK(private_admits > 100);
    CHECK(public_cached > 100);
    CHECK(p.verify() == KVRT_SUCCESS);
}

}  // namespace

TEST_CASE("BlockPool keeps sequences with sharing off isolated from every other family", "[kv][block_pool][model]") {
    run_isolation_check(0x69736f6cu);
    run_isolation_check(7u);
}

TEST_CASE("BlockPool keep_tail slides the kept tokens down and cuts the rest", "[kv][block_pool]") {
    BlockPool p;
    REQUIRE(p.init(8, 4, 2) == KVRT_SUCCESS);
    BlockWork w;
    REQUIRE(append_run(p, 0, iota_ids(10, 6), 0, &w) == KVRT_SUCCESS);  // tokens 0..5, blocks of 4
    const std::vector<TP> before = read_back(p, 0);
    std::vector<std::pair<uint32_t, uint32_t>> moves;
    // Keep tokens 3 and 5 of the tail from 2: token 3 -> 2, token 5 -> 3.
    const uint32_t keep[] = {3, 5};
    REQUIRE(p.keep_tail(0, 2, keep, 2, &moves) == KVRT_SUCCESS);
    const std::vector<TP> after = read_back(p, 0);
    REQUIRE(after.size() == 4);
    CHECK(after[0] == before[0]);
    CHECK(after[1] == before[1]);
    CHECK(after[2] == before[3]);
    CHECK(after[3] == before[5]);
    REQUIRE(moves.size() == 2);
    CHECK(moves[0] == std::make_pair(p.slot(0, 3), p.slot(0, 2)));
    // Token 5 lived in the released block 1; its slot is the source.
    CHECK(moves[1].second == p.slot(0, 3));
    CHECK(p.used_count() == 1);
    CHECK(p.verify() == KVRT_SUCCESS);
    // Bad lists, and a tail that a fork shares, change nothing.
    const uint32_t unordered[] = {3, 2}, below[] = {1};
    CHECK(p.keep_tail(0, 2, unordered, 2, &moves) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(p.keep_tail(0, 2, below, 1, &moves) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(p.keep_tail(0, 5, nullptr, 0, &moves) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(p.fork(0, 1) == KVRT_SUCCESS);
    const uint32_t last[] = {3};
    CHECK(p.keep_tail(0, 2, last, 1, &moves) == KVRT_ERROR_UNSUPPORTED);
    CHECK(read_back(p, 0) == after);
    CHECK(p.verify() == KVRT_SUCCESS);
}

// ---- Undo record ---------------------------------------------------------------

namespace {

// Random mutations of every kind on a small pool that fills, evicts and
// collides, each step a few of them between mark() and rewind() or commit():
// after rewind() the pool must equal a plain copy taken before mark(), field
// by field, and verify() must pass either way.
void run_undo_check(uint32_t n_blocks, uint32_t block_size, kvrt::kv::BlockHashFn hash, uint32_t seed) {
    constexpr int32_t kSeqs = 6;
    BlockPool p;
    REQUIRE(p.init(n_blocks, block_size, kSeqs) == KVRT_SUCCESS);
    REQUIRE(p.set_hash_function(hash) == KVRT_SUCCESS);
    kvrt_test::Rng gen(seed);
    auto rnd = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen); };
    BlockWork w;
    std::vector<std::pair<uint32_t, uint32_t>> moves;
    std::map<std::string, int> done;
    uint32_t rewinds = 0, mismatches = 0;
    std::string first_mismatch;
    for (int step = 0; step < 4000; ++step) {
        const BlockPool before = p;
        p.mark();
        REQUIRE(p.recording());
        const int n_ops = int(rnd(1, 4));
        for (int i = 0; i < n_ops; ++i) {
            const int32_t q = int32_t(rnd(0, kSeqs - 1));
            const uint32_t len = p.seq_length(q);
            const int op = int(rnd(0, 99));
            kvrt::Result r = KVRT_SUCCESS;
            std::string name;
            if (op < 30) {
                name = "append";
                // Few distinct ids and positions that restart: blocks repeat,
                // so appends register, and admits below find them.
                const uint32_t n = uint32_t(rnd(1, 3 * block_size));
                std::vector<int32_t> ids(n), pos(n);
                for (uint32_t t = 0; t < n; ++t) {
                    ids[t] = int32_t(rnd(0, 2));
                    pos[t] = int32_t(len + t);
                }
                r = p.append(q, n, ids.data(), pos.data(), &w);
            } else if (op < 50) {
                name = "admit";
                if (len) (void)p.remove(q);
                const uint32_t n = uint32_t(rnd(1, 4 * block_size));
                std::vector<int32_t> ids(n), pos(n);
                for (uint32_t t = 0; t < n; ++t) {
                    ids[t] = int32_t(rnd(0, 2) == 0 ? rnd(0, 2) : 1);
                    pos[t] = int32_t(t);
                }
                r = p.admit(q, n, ids.data(), pos.data(), uint64_t(rnd(0, 1)), &w, uint32_t(rnd(0, 4)),
                            rnd(0, 1) == 0);
            } else if (op < 60) {
                name = "fork";
                const int32_t d = int32_t(rnd(0, kSeqs - 1));
                if (d != q && p.seq_length(d)) (void)p.remove(d);
                r = p.fork(q, d);
            } else if (op < 70) {
                name = rnd(0, 1) ? "truncate" : "forget_tail";
                const uint32_t keep = uint32_t(rnd(0, len));
                r = name == "truncate" ? p.truncate(q, keep) : p.forget_tail(q, keep);
            } else if (op < 80) {
                name = "shift";
                r = p.shift(q, int32_t(rnd(1, 5)), uint32_t(rnd(0, len)), &w);
            } else if (op < 88) {
                name = "keep_tail";
                const uint32_t from = uint32_t(rnd(0, len));
                std::vector<uint32_t> keep;
                for (uint32_t t = from; t < len; ++t)
                    if (rnd(0, 1)) keep.push_back(t);
                r = p.keep_tail(q, from, keep.data(), uint32_t(keep.size()), &moves);
            } else if (op < 94) {
                name = "set_sharing";
                r = p.set_sharing(q, rnd(0, 3) != 0);
            } else if (op < 96) {
                name = "clear_registry";
                p.clear_registry();
            } else {
                name = "seq_rm";
                r = p.seq_rm(q, int32_t(rnd(-1, int64_t(len) + 2)), -1);
            }
            if (r == KVRT_SUCCESS) done[name]++;
        }
        if (rnd(0, 1)) {
            p.rewind();
            ++rewinds;
            if (!p.same_state(before) && mismatches++ == 0) first_mismatch = "step " + std::to_string(step);
        } else {
            p.commit();
        }
        REQUIRE_FALSE(p.recording());
        REQUIRE(p.verify() == KVRT_SUCCESS);
    }
    std::ostringstream report;
    report << "block pool undo check (" << n_blocks << " blocks of " << block_size << "): " << rewinds
           << " rewinds;";
    for (const auto& e : done) report << " " << e.first << " " << e.second;
    WARN(report.str());
    INFO(first_mismatch);
    CHECK(mismatches == 0);
    // Every kind of mutation ran, so every kind was undone somewhere.
    for (const char* name : {"append", "admit", "fork", "truncate", "forget_tail", "shift", "keep_tail",
                             "set_sharing", "clear_registry", "seq_rm"})
        CHECK(done[name] > 0);
}

}  // namespace

TEST_CASE("BlockPool rewind gives back every change since mark, exactly", "[kv][block_pool][undo]") {
    run_undo_check(24, 4, nullptr, 0x756e646fu);
    run_undo_check(12, 16, weak_hash, 0x72657769u);
}

TEST_CASE("BlockPool rewind without mark and mark twice", "[kv][block_pool][undo]") {
    BlockPool p;
    REQUIRE(p.init(8, 4, 2) == KVRT_SUCCESS);
    BlockWork w;
    REQUIRE(append_run(p, 0, iota_ids(0, 6), 0, &w) == KVRT_SUCCESS);
    const BlockPool a = p;
    p.rewind();  // nothing recorded: nothing changes
    CHECK(p.same_state(a));
    p.mark();
    REQUIRE(append_run(p, 0, iota_ids(6, 3), 6, &w) == KVRT_SUCCESS);
    const BlockPool b = p;
    p.mark();  // a new record from here
    REQUIRE(p.fork(0, 1) == KVRT_SUCCESS);
    REQUIRE(append_run(p, 1, iota_ids(20, 5), 9, &w) == KVRT_SUCCESS);
    p.rewind();
    CHECK(p.same_state(b));
    CHECK_FALSE(p.same_state(a));
    CHECK(p.verify() == KVRT_SUCCESS);
}
