// The handle table: handles as generation-counted slots in reserved address
// space, lock-free lookups, bounded memory, stale handles refused for good.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <set>
#include <thread>
#include <vector>

#include "core/handle_table.hpp"

using namespace kvrt;

namespace {

int objects[8];  // addresses to stand for objects

}  // namespace

TEST_CASE("a handle finds its object only while alive and only as its kind", "[core][handles]") {
    HandleTable table;
    const uintptr_t a = table.add(&objects[0], 1);
    const uintptr_t b = table.add(&objects[1], 2);
    REQUIRE(a != 0);
    REQUIRE(b != 0);
    CHECK(a != b);
    CHECK(table.find(a, 1) == &objects[0]);
    CHECK(table.find(b, 2) == &objects[1]);
    CHECK(table.find(a, 2) == nullptr);  // another kind
    CHECK(table.find(b, 1) == nullptr);
    CHECK(table.find(0, 1) == nullptr);
    CHECK(table.find(reinterpret_cast<uintptr_t>(&objects[0]), 1) == nullptr);  // an object's own address
    CHECK(table.find(a + 1, 1) == nullptr);  // a generation not given out
    CHECK(table.find(a - 1, 1) == nullptr);
    CHECK_FALSE(table.remove(a, 2));  // the wrong kind removes nothing
    CHECK(table.remove(a, 1));
    CHECK_FALSE(table.remove(a, 1));  // twice: nothing
    CHECK(table.find(a, 1) == nullptr);
    CHECK(table.find(b, 2) == &objects[1]);
    CHECK(table.add(nullptr, 1) == 0);
    CHECK(table.add(&objects[2], 0) == 0);
    const HandleTable::Stats s = table.stats();
    CHECK(s.live == 1);
    CHECK(s.ranges == 1);
}

TEST_CASE("handles are addresses nothing else can hold", "[core][handles]") {
    // Inside address space the table reserved and left inaccessible: no
    // allocation of the process (malloc, a stack, a collector's heap) is there.
    HandleTable table;
    std::vector<uintptr_t> handles;
    for (int i = 0; i < 300; ++i) handles.push_back(table.add(&objects[0], 1));
    std::vector<std::unique_ptr<char[]>> blocks;
    for (int i = 0; i < 300; ++i) {
        blocks.emplace_back(new char[64]);
        CHECK(table.find(reinterpret_cast<uintptr_t>(blocks.back().get()), 1) == nullptr);
    }
    int local = 0;
    CHECK(table.find(reinterpret_cast<uintptr_t>(&local), 1) == nullptr);
    for (uintptr_t h : handles) CHECK(table.find(h, 1) == &objects[0]);
}

TEST_CASE("a removed handle is never given out again and stays refused", "[core][handles]") {
    // Four generations per slot, 16 slots per range: slots retire and ranges
    // are added quickly.
    HandleTable table(HandleTable::Params{2, 4, 1000});
    std::set<uintptr_t> dead;
    std::vector<uintptr_t> live;
    for (int round = 0; round < 200; ++round) {
        for (int i = 0; i < 5; ++i) {
            const uintptr_t h = table.add(&objects[i], 1);
            REQUIRE(h != 0);
            REQUIRE(dead.count(h) == 0);
            live.push_back(h);
        }
        for (uintptr_t h : live) {
            REQUIRE(table.remove(h, 1));
            dead.insert(h);
        }
        live.clear();
    }
    CHECK(dead.size() == 1000);
    for (uintptr_t h : dead) CHECK(table.find(h, 1) == nullptr);
    const HandleTable::Stats s = table.stats();
    CHECK(s.live == 0);
    // Each slot serves its 3 generations (1..3), then retires: five slots at
    // a time, 66 times over, and five more that served two.
    CHECK(s.retired == 330);
    CHECK(s.slots >= s.retired);
}

TEST_CASE("memory stays bounded over a million creations", "[core][handles]") {
    HandleTable table;  // this target's sizes
    uintptr_t first = 0;
    for (int i = 0; i < 1000000; ++i) {
        const uintptr_t h = table.add(&objects[i % 8], 3);
        REQUIRE(h != 0);
        if (i == 0) first = h;
        REQUIRE(table.remove(h, 3));
    }
    const HandleTable::Stats s = table.stats();
    const HandleTable::Params p = HandleTable::default_params();
    // A chunk of slots, and one slot retired per spent generation count.
    CHECK(s.retired == 1000000 / ((1u << p.gen_bits) - 1));
    CHECK(s.slots <= 256);
    CHECK(s.ranges == 1);
    CHECK(s.slot_bytes < 64 * 1024);
    CHECK(table.find(first, 3) == nullptr);
}

TEST_CASE("the table runs out cleanly", "[core][handles]") {
    HandleTable table(HandleTable::Params{2, 2, 2});  // 2 ranges of 4 slots
    std::vector<uintptr_t> handles;
    for (;;) {
        const uintptr_t h = table.add(&objects[0], 1);
        if (!h) break;
        handles.push_back(h);
        REQUIRE(handles.size() <= 8);
    }
    CHECK(handles.size() == 8);
    for (uintptr_t h : handles) CHECK(table.find(h, 1) == &objects[0]);
    REQUIRE(table.remove(handles[3], 1));
    const uintptr_t again = table.add(&objects[1], 1);  // the freed slot, next generation
    CHECK(again != 0);
    CHECK(again != handles[3]);
    CHECK(table.find(again, 1) == &objects[1]);
}

TEST_CASE("lookups run beside creation and removal in other threads", "[core][handles]") {
    HandleTable table(HandleTable::Params{3, 5, 64});  // small: slots retire and ranges grow while readers look
    std::vector<uintptr_t> fixed;
    for (int i = 0; i < 8; ++i) fixed.push_back(table.add(&objects[i], 1));
    std::atomic<bool> stop{false};
    std::atomic<long> wrong{0};
    std::vector<std::thread> readers;
    for (int t = 0; t < 2; ++t) {
        readers.emplace_back([&] {
            while (!stop.load()) {
                for (int i = 0; i < 8; ++i)
                    if (table.find(fixed[i], 1) != &objects[i]) ++wrong;
            }
        });
    }
    for (int i = 0; i < 20000; ++i) {
        const uintptr_t h = table.add(&objects[i % 8], 2);
        if (!h) break;  // address space of this small table spent
        if (table.find(h, 2) != &objects[i % 8]) ++wrong;
        table.remove(h, 2);
        if (table.find(h, 2) != nullptr) ++wrong;
    }
    stop = true;
    for (auto& t : readers) t.join();
    CHECK(wrong.load() == 0);
}
