#include "kv/block_pool.hpp"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <limits>
#include <new>
#include <stdexcept>

#include "core/fault.hpp"

namespace kvrt::kv {

namespace {

constexpr int64_t kPosMax = std::numeric_limits<int32_t>::max();
constexpr uint32_t kNone = BlockPool::none;

uint64_t next_revision() {
    static std::atomic<uint64_t> counter{0};
    return counter.fetch_add(1, std::memory_order_relaxed) + 1;
}

// splitmix64's finalizer: a cheap full-avalanche 64-bit mix.
uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

bool same_slots(const int32_t* a, const int32_t* b, uint32_t n) { return std::equal(a, a + n, b); }

}  // namespace

uint64_t default_block_hash(uint64_t parent_key, uint64_t salt, const int32_t* tokens, const int32_t* positions,
                            uint32_t n) {
    uint64_t h = mix64(parent_key ^ mix64(salt + 0x9e3779b97f4a7c15ull)) ^ n;
    for (uint32_t i = 0; i < n; ++i) {
        h = mix64(h ^ (uint64_t(uint32_t(tokens[i])) | uint64_t(uint32_t(positions[i])) << 32));
    }
    return h;
}

// ---- Setup ---------------------------------------------------------------------

Result BlockPool::init(uint32_t n_blocks, uint32_t block_size, uint32_t max_seqs) {
    if (n_blocks == 0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "block pool: n_blocks is 0");
    if (max_seqs == 0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "block pool: max_seqs is 0");
    if (block_size == 0 || block_size > 64 || (block_size & (block_size - 1)) != 0) {
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "block pool: block size %u is not a power of two <= 64", block_size);
    }
    if (max_seqs > uint32_t(kPosMax)) {
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "block pool: max_seqs %u exceeds INT32_MAX", max_seqs);
    }
    uint32_t shift = 0;
    while ((1u << shift) < block_size) ++shift;
    const uint64_t n_slots = uint64_t(n_blocks) << shift;
    if (n_slots > uint64_t(kPosMax)) {
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "block pool: %u blocks of %u tokens exceed INT32_MAX slots",
                    n_blocks, block_size);
    }
    uint32_t n_buckets = 1;
    while (n_buckets < n_blocks) n_buckets <<= 1;  // n_blocks <= 2^31: no overflow
    try {
        std::vector<int32_t> pos(size_t(n_slots), -1);
        std::vector<int32_t> tok(size_t(n_slots), -1);
        std::vector<uint32_t> ref(n_blocks, 0);
        std::vector<uint32_t> fill(n_blocks, 0);
        std::vector<uint8_t> shifted(n_blocks, 0);
        std::vector<uint32_t> free_list;
        free_list.reserve(n_blocks);
        for (uint32_t b = n_blocks; b-- > 0;) free_list.push_back(b);  // block 0 is taken first
        std::vector<uint32_t> scratch;
        scratch.reserve(n_blocks);
        std::vector<uint8_t> reg(n_blocks, 0);
        std::vector<uint64_t> key(n_blocks, 0);
        std::vector<uint64_t> salt(n_blocks, 0);
        std::vector<uint32_t> parent(n_blocks, kNone);
        std::vector<uint32_t> first_child(n_blocks, kNone);
        std::vector<uint32_t> next_sibling(n_blocks, kNone);
        std::vector<uint32_t> prev_sibling(n_blocks, kNone);
        std::vector<uint32_t> bucket_next(n_blocks, kNone);
        std::vector<uint32_t> buckets(n_buckets, kNone);
        std::vector<uint32_t> lru_prev(n_blocks, kNone);
        std::vector<uint32_t> lru_next(n_blocks, kNone);
        std::vector<Seq> seqs(max_seqs);
        for (Seq& s : seqs) touch(s);
        // The undo record's save areas.
        std::vector<uint32_t> block_saved_at(n_blocks, 0);
        std::vector<BlockSave> block_save(n_blocks);
        std::vector<int32_t> pos_save(static_cast<size_t>(n_slots)), tok_save(static_cast<size_t>(n_slots));
        std::vector<uint32_t> saved_blocks;
        saved_blocks.reserve(n_blocks);
        std::vector<uint32_t> bucket_saved_at(n_buckets, 0), bucket_save(n_buckets);
        std::vector<uint32_t> saved_buckets;
        saved_buckets.reserve(n_buckets);
        std::vector<uint32_t> seq_saved_at(max_seqs, 0);
        std::vector<Seq> seq_save(max_seqs);
        std::vector<uint32_t> saved_seqs;
        saved_seqs.reserve(max_seqs);
        std::vector<uint32_t> free_save(n_blocks);
        // Nothing below throws.
        pos_.swap(pos);
        tok_.swap(tok);
        ref_.swap(ref);
        fill_.swap(fill);
        shifted_.swap(shifted);
        free_.swap(free_list);
        scratch_.swap(scratch);
        reg_.swap(reg);
        key_.swap(key);
        salt_.swap(salt);
        parent_.swap(parent);
        first_child_.swap(first_child);
        next_sibling_.swap(next_sibling);
        prev_sibling_.swap(prev_sibling);
        bucket_next_.swap(bucket_next);
        buckets_.swap(buckets);
        lru_prev_.swap(lru_prev);
        lru_next_.swap(lru_next);
        seqs_.swap(seqs);
        block_saved_at_.swap(block_saved_at);
        block_save_.swap(block_save);
        pos_save_.swap(pos_save);
        tok_save_.swap(tok_save);
        saved_blocks_.swap(saved_blocks);
        bucket_saved_at_.swap(bucket_saved_at);
        bucket_save_.swap(bucket_save);
        saved_buckets_.swap(saved_buckets);
        seq_saved_at_.swap(seq_saved_at);
        seq_save_.swap(seq_save);
        saved_seqs_.swap(saved_seqs);
        free_save_.swap(free_save);
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "block pool: out of host memory for %u blocks", n_blocks);
    } catch (const std::length_error&) {
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "block pool: %u blocks x %u sequences is too large", n_blocks,
                    max_seqs);
    }
    n_blocks_ = n_blocks;
    block_size_ = block_size;
    block_shift_ = shift;
    max_seqs_ = max_seqs;
    lru_head_ = lru_tail_ = kNone;
    n_cached_ = 0;
    n_used_ = 0;
    n_registered_ = 0;
    changed_lo_ = 0;
    changed_hi_ = n_blocks;  // whatever a mirror held before
    recording_ = false;
    record_epoch_ = 0;
    return KVRT_SUCCESS;
}

Result BlockPool::set_hash_function(BlockHashFn fn) {
    if (n_registered_ != 0) {
        return fail(KVRT_ERROR_INVALID_STATE, "block pool: the hash cannot change while %u blocks are registered",
                    n_registered_);
    }
    hash_ = fn != nullptr ? fn : default_block_hash;
    return KVRT_SUCCESS;
}

// ---- Internal helpers ----------------------------------------------------------

void BlockPool::touch(Seq& s) { s.revision = next_revision(); }

bool BlockPool::take_changes(uint32_t* lo, uint32_t* hi) {
    *lo = changed_lo_;
    *hi = changed_hi_;
    changed_lo_ = changed_hi_ = 0;
    return *lo < *hi;
}

Result BlockPool::check_seq(const char* op, int32_t seq) const {
    if (n_blocks_ == 0) return fail(KVRT_ERROR_INVALID_STATE, "%s: the block pool is not initialized", op);
    if (seq < 0 || uint32_t(seq) >= max_seqs_) {
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: sequence id %d is outside [0, %u)", op, seq, max_seqs_);
    }
    return KVRT_SUCCESS;
}

Result BlockPool::check_tokens(const char* op, uint32_t n, const int32_t* token_ids, const int32_t* positions,
                               bool unknown_ok) const {
    if (n == 0) return KVRT_SUCCESS;
    if (token_ids == nullptr || positions == nullptr) {
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: token ids or positions are NULL", op);
    }
    const int32_t min_id = unknown_ok ? unknown_token : 0;
    for (uint32_t i = 0; i < n; ++i) {
        if (token_ids[i] < min_id || positions[i] < 0) {
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: token %u has a negative id (%d) or position (%d)", op, i,
                        token_ids[i], positions[i]);
        }
    }
    return KVRT_SUCCESS;
}

// Grows the sequence's table and the output lists to what the mutation will
// use, so that the mutation itself never allocates. Capacity is not state: a
// failure here changes nothing observable.
Result BlockPool::reserve_work(const char* op, Seq& s, size_t table_size, size_t n_slots, size_t n_copies,
                               BlockWork* out) {
    KVRT_FAULT_POINT("block_pool.reserve", KVRT_ERROR_OUT_OF_HOST_MEMORY);
    try {
        // The save area first: it must always hold the table (save_seq).
        seq_save_[size_t(&s - seqs_.data())].table.reserve(table_size);
        s.table.reserve(table_size);
        if (out != nullptr) {
            out->slots.reserve(n_slots);
            out->copies.reserve(n_copies);
        }
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "%s: out of host memory", op);
    } catch (const std::length_error&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "%s: out of host memory", op);
    }
    save_seq(s);
    return KVRT_SUCCESS;
}

// ---- Undo record -----------------------------------------------------------------

void BlockPool::mark() {
    if (++record_epoch_ == 0) {
        // After 2^32 records: forget every old epoch.
        std::fill(block_saved_at_.begin(), block_saved_at_.end(), 0);
        std::fill(bucket_saved_at_.begin(), bucket_saved_at_.end(), 0);
        std::fill(seq_saved_at_.begin(), seq_saved_at_.end(), 0);
        record_epoch_ = 1;
    }
    recording_ = true;
    saved_blocks_.clear();
    saved_buckets_.clear();
    saved_seqs_.clear();
    free_size_at_mark_ = free_low_ = free_.size();
    mark_lru_head_ = lru_head_;
    mark_lru_tail_ = lru_tail_;
    mark_cached_ = n_cached_;
    mark_used_ = n_used_;
    mark_registered_ = n_registered_;
}

void BlockPool::save_block_now(uint32_t block) {
    block_saved_at_[block] = record_epoch_;
    block_save_[block] = BlockSave{ref_[block],          fill_[block],         parent_[block],
                                   first_child_[block],  next_sibling_[block], prev_sibling_[block],
                                   bucket_next_[block],  lru_prev_[block],     lru_next_[block],
                                   key_[block],          salt_[block],         shifted_[block],
                                   reg_[block]};
    const size_t base = slot_index(block, 0);
    std::copy_n(pos_.begin() + ptrdiff_t(base), block_size_, pos_save_.begin() + ptrdiff_t(base));
    std::copy_n(tok_.begin() + ptrdiff_t(base), block_size_, tok_save_.begin() + ptrdiff_t(base));
    saved_blocks_.push_back(block);  // capacity n_blocks, each block once
}

void BlockPool::save_bucket(size_t bucket) {
    if (!recording_ || bucket_saved_at_[bucket] == record_epoch_) return;
    bucket_saved_at_[bucket] = record_epoch_;
    bucket_save_[bucket] = buckets_[bucket];
    saved_buckets_.push_back(uint32_t(bucket));  // capacity: the bucket count
}

void BlockPool::save_seq(const Seq& s) {
    const size_t q = size_t(&s - seqs_.data());
    if (!recording_ || seq_saved_at_[q] == record_epoch_) return;
    seq_saved_at_[q] = record_epoch_;
    Seq& save = seq_save_[q];
    save.table.assign(s.table.begin(), s.table.end());  // reserved: no allocation
    save.n_tokens = s.n_tokens;
    save.sharing = s.sharing;
    save.salt = s.salt;
    save.revision = s.revision;
    saved_seqs_.push_back(uint32_t(q));  // capacity max_seqs
}

uint32_t BlockPool::pop_free() {
    const size_t top = free_.size() - 1;
    if (recording_ && top < free_low_) {
        free_save_[top] = free_[top];
        free_low_ = top;
    }
    const uint32_t b = free_[top];
    free_.pop_back();
    return b;
}

void BlockPool::rewind() {
    if (!recording_) return;
    for (const uint32_t b : saved_blocks_) {
        const BlockSave& v = block_save_[b];
        ref_[b] = v.ref;
        fill_[b] = v.fill;
        parent_[b] = v.parent;
        first_child_[b] = v.first_child;
        next_sibling_[b] = v.next_sibling;
        prev_sibling_[b] = v.prev_sibling;
        bucket_next_[b] = v.bucket_next;
        lru_prev_[b] = v.lru_prev;
        lru_next_[b] = v.lru_next;
        key_[b] = v.key;
        salt_[b] = v.salt;
        shifted_[b] = v.shifted;
        reg_[b] = v.reg;
        const size_t base = slot_index(b, 0);
        std::copy_n(pos_save_.begin() + ptrdiff_t(base), block_size_, pos_.begin() + ptrdiff_t(base));
        std::copy_n(tok_save_.begin() + ptrdiff_t(base), block_size_, tok_.begin() + ptrdiff_t(base));
        mark_changed(b);
    }
    for (const uint32_t k : saved_buckets_) buckets_[k] = bucket_save_[k];
    for (const uint32_t q : saved_seqs_) {
        const Seq& save = seq_save_[q];
        Seq& s = seqs_[q];
        s.table.assign(save.table.begin(), save.table.end());  // it held as many: no allocation
        s.n_tokens = save.n_tokens;
        s.sharing = save.sharing;
        s.salt = save.salt;
        s.revision = save.revision;
    }
    // Entries below free_low_ never changed; those above it up to the size
    // at mark() were saved when first popped.
    free_.resize(free_size_at_mark_);  // capacity n_blocks: no allocation
    std::copy(free_save_.begin() + ptrdiff_t(free_low_), free_save_.begin() + ptrdiff_t(free_size_at_mark_),
              free_.begin() + ptrdiff_t(free_low_));
    lru_head_ = mark_lru_head_;
    lru_tail_ = mark_lru_tail_;
    n_cached_ = mark_cached_;
    n_used_ = mark_used_;
    n_registered_ = mark_registered_;
    recording_ = false;
}

bool BlockPool::same_state(const BlockPool& o) const {
    if (n_blocks_ != o.n_blocks_ || block_size_ != o.block_size_ || max_seqs_ != o.max_seqs_ || pos_ != o.pos_ ||
        tok_ != o.tok_ || ref_ != o.ref_ || fill_ != o.fill_ || shifted_ != o.shifted_ || free_ != o.free_ ||
        reg_ != o.reg_ || key_ != o.key_ || salt_ != o.salt_ || parent_ != o.parent_ ||
        first_child_ != o.first_child_ || next_sibling_ != o.next_sibling_ || prev_sibling_ != o.prev_sibling_ ||
        bucket_next_ != o.bucket_next_ || buckets_ != o.buckets_ || lru_prev_ != o.lru_prev_ ||
        lru_next_ != o.lru_next_ || lru_head_ != o.lru_head_ || lru_tail_ != o.lru_tail_ ||
        n_cached_ != o.n_cached_ || n_used_ != o.n_used_ || n_registered_ != o.n_registered_ || hash_ != o.hash_ ||
        seqs_.size() != o.seqs_.size())
        return false;
    for (size_t q = 0; q < seqs_.size(); ++q) {
        const Seq &a = seqs_[q], &b = o.seqs_[q];
        if (a.table != b.table || a.n_tokens != b.n_tokens || a.sharing != b.sharing || a.salt != b.salt ||
            a.revision != b.revision)
            return false;
    }
    return true;
}

void BlockPool::clear_slots(uint32_t block, uint32_t from) {
    if (from >= fill_[block]) return;
    save_block(block);
    const size_t base = slot_index(block, 0);
    std::fill(pos_.begin() + ptrdiff_t(base + from), pos_.begin() + ptrdiff_t(base + fill_[block]), -1);
    std::fill(tok_.begin() + ptrdiff_t(base + from), tok_.begin() + ptrdiff_t(base + fill_[block]), -1);
    fill_[block] = from;
    mark_changed(block);
}

void BlockPool::free_block(uint32_t block) {
    clear_slots(block, 0);
    free_.push_back(block);  // capacity n_blocks: never allocates
}

// A block for a new table entry (reference count 1): a free one, else the
// oldest cached one, evicted with its registered descendants. The caller
// checked that free + cached blocks suffice.
uint32_t BlockPool::take_block() {
    if (free_.empty()) {
        assert(lru_head_ != kNone);
        unregister_tree(lru_head_);  // frees the victim (and cached descendants)
    }
    const uint32_t b = pop_free();
    save_block(b);
    ref_[b] = 1;
    shifted_[b] = 0;
    ++n_used_;
    return b;
}

// A new block holding a copy of the first `n_slots` slots of `src`.
uint32_t BlockPool::copy_block(uint32_t src, uint32_t n_slots) {
    const uint32_t b = take_block();
    const size_t from = slot_index(src, 0);
    const size_t to = slot_index(b, 0);
    std::copy(pos_.begin() + ptrdiff_t(from), pos_.begin() + ptrdiff_t(from + n_slots), pos_.begin() + ptrdiff_t(to));
    std::copy(tok_.begin() + ptrdiff_t(from), tok_.begin() + ptrdiff_t(from + n_slots), tok_.begin() + ptrdiff_t(to));
    fill_[b] = n_slots;
    shifted_[b] = shifted_[src];
    mark_changed(b);
    return b;
}

// Drops one table entry's reference. A block nobody uses any more is cached
// (the newest in the eviction order) when registered, else freed.
void BlockPool::release(uint32_t block) {
    assert(ref_[block] > 0);
    save_block(block);
    if (--ref_[block] != 0) return;
    --n_used_;
    if (reg_[block]) {
        lru_push(block);
        ++n_cached_;
    } else {
        free_block(block);
    }
}

void BlockPool::lru_push(uint32_t block) {
    save_block(block);
    if (lru_tail_ != kNone) save_block(lru_tail_);
    lru_prev_[block] = lru_tail_;
    lru_next_[block] = kNone;
    if (lru_tail_ != kNone) {
        lru_next_[lru_tail_] = block;
    } else {
        lru_head_ = block;
    }
    lru_tail_ = block;
}

void BlockPool::lru_remove(uint32_t block) {
    const uint32_t p = lru_prev_[block];
    const uint32_t n = lru_next_[block];
    save_block(block);
    if (p != kNone) save_block(p);
    if (n != kNone) save_block(n);
    if (p != kNone) {
        lru_next_[p] = n;
    } else {
        lru_head_ = n;
    }
    if (n != kNone) {
        lru_prev_[n] = p;
    } else {
        lru_tail_ = p;
    }
    lru_prev_[block] = lru_next_[block] = kNone;
}

void BlockPool::register_block(uint32_t block, uint32_t parent, uint64_t key, uint64_t salt) {
    save_block(block);
    reg_[block] = 1;
    key_[block] = key;
    salt_[block] = salt;
    parent_[block] = parent;
    first_child_[block] = kNone;
    prev_sibling_[block] = kNone;
    next_sibling_[block] = kNone;
    if (parent != kNone) {
        const uint32_t first = first_child_[parent];
        save_block(parent);
        if (first != kNone) save_block(first);
        next_sibling_[block] = first;
        if (first != kNone) prev_sibling_[first] = block;
        first_child_[parent] = block;
    }
    const size_t bucket = size_t(key & (buckets_.size() - 1));
    save_bucket(bucket);
    bucket_next_[block] = buckets_[bucket];
    buckets_[bucket] = block;
    ++n_registered_;
}

// Unregisters a registered block that has no registered children; a cached
// one becomes free.
void BlockPool::unregister_one(uint32_t block) {
    assert(reg_[block] && first_child_[block] == kNone);
    save_block(block);
    const size_t bucket = size_t(key_[block] & (buckets_.size() - 1));
    uint32_t* link = &buckets_[bucket];
    uint32_t before = kNone;  // the block whose bucket_next_ is `link`
    while (*link != block) {
        assert(*link != kNone);
        before = *link;
        link = &bucket_next_[before];
    }
    if (before == kNone) {
        save_bucket(bucket);
    } else {
        save_block(before);
    }
    *link = bucket_next_[block];
    bucket_next_[block] = kNone;
    const uint32_t parent = parent_[block];
    const uint32_t prev = prev_sibling_[block];
    const uint32_t next = next_sibling_[block];
    if (prev != kNone) save_block(prev);
    if (next != kNone) save_block(next);
    if (prev == kNone && parent != kNone) save_block(parent);
    if (prev != kNone) {
        next_sibling_[prev] = next;
    } else if (parent != kNone) {
        first_child_[parent] = next;
    }
    if (next != kNone) prev_sibling_[next] = prev;
    prev_sibling_[block] = next_sibling_[block] = parent_[block] = kNone;
    reg_[block] = 0;
    --n_registered_;
    if (ref_[block] == 0) {
        lru_remove(block);
        --n_cached_;
        free_block(block);
    }
}

// Unregisters `block` and every registered block below it, leaves first, with
// no stack: descend to a leaf, unregister it, step back up to its parent.
void BlockPool::unregister_tree(uint32_t block) {
    uint32_t cur = block;
    for (;;) {
        while (first_child_[cur] != kNone) cur = first_child_[cur];
        const uint32_t up = parent_[cur];
        unregister_one(cur);
        if (cur == block) break;
        cur = up;
    }
}

// The registered block with exactly this parent, salt and contents, or none.
// The key only picks the bucket and filters; the contents are compared.
uint32_t BlockPool::find_registered(uint32_t parent, uint64_t key, uint64_t salt, const int32_t* tokens,
                                    const int32_t* positions) const {
    for (uint32_t b = buckets_[size_t(key & (buckets_.size() - 1))]; b != kNone; b = bucket_next_[b]) {
        if (key_[b] != key || parent_[b] != parent || salt_[b] != salt) continue;
        const size_t base = slot_index(b, 0);
        if (same_slots(&tok_[base], tokens, block_size_) && same_slots(&pos_[base], positions, block_size_)) {
            return b;
        }
    }
    return kNone;
}

// Registers the just-filled block `index` of `s` when the rules allow it: the
// sequence shares, the block starts the sequence or follows a registered
// block, and no equal entry exists (a duplicate stays private, and so do the
// blocks after it).
void BlockPool::maybe_register(Seq& s, uint32_t index) {
    if (!s.sharing) return;
    const uint32_t b = s.table[index];
    if (reg_[b] || shifted_[b]) return;
    const uint32_t parent = index == 0 ? kNone : s.table[index - 1];
    if (parent != kNone && (!reg_[parent] || salt_[parent] != s.salt)) return;
    const size_t base = slot_index(b, 0);
    // A full block has no empty slot: a negative id is an unknown token.
    for (uint32_t j = 0; j < block_size_; ++j)
        if (tok_[base + j] < 0) return;
    const uint64_t key = hash_(parent == kNone ? root_key : key_[parent], s.salt, &tok_[base], &pos_[base],
                               block_size_);
    if (find_registered(parent, key, s.salt, &tok_[base], &pos_[base]) != kNone) return;
    register_block(b, parent, key, s.salt);
}

// New blocks that appending n tokens to `s` takes, the copy of a shared,
// partly filled last block included.
uint32_t BlockPool::append_need(const Seq& s, uint32_t n) const {
    if (n == 0) return 0;
    const uint32_t view = s.n_tokens & (block_size_ - 1);
    const uint32_t room = view == 0 ? 0 : block_size_ - view;
    uint32_t need = n > room ? blocks_for_tokens(n - room) : 0;
    if (view != 0 && ref_[s.table.back()] > 1) ++need;
    return need;
}

// The mutation of append(): the caller checked the budget and reserved.
void BlockPool::append_tokens(Seq& s, uint32_t n, const int32_t* token_ids, const int32_t* positions,
                              BlockWork* out) {
    if (n == 0) return;
    const uint32_t view = s.n_tokens & (block_size_ - 1);
    if (view != 0) {
        const uint32_t last = s.table.back();
        if (ref_[last] > 1) {
            // Copy-on-write: the others keep the original.
            const uint32_t copy = copy_block(last, view);
            save_block(last);
            --ref_[last];
            s.table.back() = copy;
            out->copies.push_back(BlockCopy{last, copy});
        } else if (fill_[last] > view) {
            // Ours alone, but holding tokens past our length (shared when we
            // truncated): those slots are overwritten, so the block no longer
            // has its registered contents.
            if (reg_[last]) unregister_tree(last);
            clear_slots(last, view);
        }
    }
    for (uint32_t i = 0; i < n; ++i) {
        const uint32_t j = s.n_tokens & (block_size_ - 1);
        if (j == 0) s.table.push_back(take_block());  // reserved: no allocation
        const uint32_t b = s.table.back();
        save_block(b);
        const size_t slot = slot_index(b, j);
        pos_[slot] = positions[i];
        tok_[slot] = token_ids[i];
        fill_[b] = j + 1;
        mark_changed(b);
        out->slots.push_back(uint32_t(slot));
        ++s.n_tokens;
        if (j + 1 == block_size_) maybe_register(s, uint32_t(s.table.size() - 1));
    }
    touch(s);
}

// ---- Mutations -----------------------------------------------------------------

Result BlockPool::append(int32_t seq, uint32_t n, const int32_t* token_ids, const int32_t* positions,
                         BlockWork* out) {
    if (out == nullptr) return fail(KVRT_ERROR_INVALID_ARGUMENT, "append: out is NULL");
    out->clear();
    KVRT_TRY(check_seq("append", seq));
    KVRT_TRY(check_tokens("append", n, token_ids, positions, true));
    if (n == 0) return KVRT_SUCCESS;
    Seq& s = seqs_[size_t(seq)];
    const uint32_t need = append_need(s, n);
    if (need > available_count()) {
        return fail(KVRT_ERROR_CACHE_FULL, "append: %u tokens need %u blocks but only %u of %u are available", n,
                    need, available_count(), n_blocks_);
    }
    KVRT_TRY(reserve_work("append", s, s.table.size() + need, n, 1, out));
    append_tokens(s, n, token_ids, positions, out);
    return KVRT_SUCCESS;
}

void BlockPool::match_chain(const Seq& s, uint32_t n, const int32_t* token_ids, const int32_t* positions,
                            uint64_t salt, uint32_t max_blocks, std::vector<uint32_t>* out) const {
    // Longest registered chain that matches the prompt, one full block at a
    // time, leaving the last token to compute. Each match is compared, so a
    // match at block i also proves blocks 0..i-1 (its parent chain).
    if (!s.sharing || n <= 1) return;
    const uint32_t most = std::min(max_blocks, (n - 1) >> block_shift_);
    uint32_t parent = kNone;
    uint64_t parent_key = root_key;
    for (uint32_t i = 0; i < most && n_registered_ != 0; ++i) {
        const int32_t* tk = token_ids + (size_t(i) << block_shift_);
        const int32_t* ps = positions + (size_t(i) << block_shift_);
        const uint64_t key = hash_(parent_key, salt, tk, ps, block_size_);
        const uint32_t b = find_registered(parent, key, salt, tk, ps);
        if (b == kNone) break;
        out->push_back(b);
        parent = b;
        parent_key = key;
    }
}

Result BlockPool::match(int32_t seq, uint32_t n, const int32_t* token_ids, const int32_t* positions, uint64_t salt,
                        std::vector<uint32_t>* out) const {
    if (out == nullptr) return fail(KVRT_ERROR_INVALID_ARGUMENT, "match: out is NULL");
    out->clear();
    KVRT_TRY(check_seq("match", seq));
    KVRT_TRY(check_tokens("match", n, token_ids, positions, false));
    try {
        out->reserve(n > 1 ? (n - 1) >> block_shift_ : 0);
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "match: out of host memory for %u tokens", n);
    }
    match_chain(seqs_[size_t(seq)], n, token_ids, positions, salt, UINT32_MAX, out);
    return KVRT_SUCCESS;
}

Result BlockPool::admit(int32_t seq, uint32_t n, const int32_t* token_ids, const int32_t* positions, uint64_t salt,
                        BlockWork* out, uint32_t max_blocks, bool replace) {
    if (out == nullptr) return fail(KVRT_ERROR_INVALID_ARGUMENT, "admit: out is NULL");
    out->clear();
    KVRT_TRY(check_seq("admit", seq));
    KVRT_TRY(check_tokens("admit", n, token_ids, positions, false));
    Seq& s = seqs_[size_t(seq)];
    if (s.n_tokens != 0) {
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "admit: sequence %d is not empty (%u tokens)", seq, s.n_tokens);
    }
    scratch_.clear();  // capacity n_blocks: matches are distinct blocks
    match_chain(s, n, token_ids, positions, salt, replace ? UINT32_MAX : max_blocks, &scratch_);
    uint32_t replaced = kNone;  // the first match past max_blocks
    if (scratch_.size() > max_blocks) {
        replaced = scratch_[max_blocks];
        scratch_.resize(max_blocks);
    }
    uint32_t n_revived = 0;  // matches that are cached now
    for (const uint32_t b : scratch_)
        if (ref_[b] == 0) ++n_revived;
    const uint32_t n_cached = uint32_t(scratch_.size()) << block_shift_;
    const uint32_t rest = n - n_cached;
    const uint32_t need = blocks_for_tokens(rest);
    const uint32_t avail = available_count() - n_revived;
    if (need > avail) {
        return fail(KVRT_ERROR_CACHE_FULL,
                    "admit: %u tokens (%u cached) need %u new blocks but only %u of %u are available", n, n_cached,
                    need, avail, n_blocks_);
    }
    KVRT_TRY(reserve_work("admit", s, scratch_.size() + need, rest, 0, out));

    if (replaced != kNone) unregister_tree(replaced);
    s.salt = salt;
    for (const uint32_t b : scratch_) {
        save_block(b);
        if (ref_[b] == 0) {
            lru_remove(b);
            --n_cached_;
            ++n_used_;
        }
        ++ref_[b];
        s.table.push_back(b);
    }
    s.n_tokens = n_cached;
    out->n_cached = n_cached;
    append_tokens(s, rest, token_ids + n_cached, positions + n_cached, out);
    touch(s);
    return KVRT_SUCCESS;
}

Result BlockPool::fork(int32_t src, int32_t dst) {
    KVRT_TRY(check_seq("fork", src));
    KVRT_TRY(check_seq("fork", dst));
    if (src == dst) return fail(KVRT_ERROR_INVALID_ARGUMENT, "fork: source and destination are both %d", src);
    Seq& d = seqs_[size_t(dst)];
    const Seq& s = seqs_[size_t(src)];
    if (d.n_tokens != 0) {
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "fork: destination %d is not empty (%u tokens)", dst, d.n_tokens);
    }
    KVRT_TRY(reserve_work("fork", d, s.table.size(), 0, 0, nullptr));
    for (const uint32_t b : s.table) {
        save_block(b);
        ++ref_[b];  // all in use already: no list changes
    }
    d.table.assign(s.table.begin(), s.table.end());  // fits the reserved capacity
    d.n_tokens = s.n_tokens;
    d.salt = s.salt;
    touch(d);
    return KVRT_SUCCESS;
}

Result BlockPool::truncate(int32_t seq, uint32_t keep) {
    KVRT_TRY(check_seq("truncate", seq));
    Seq& s = seqs_[size_t(seq)];
    if (keep >= s.n_tokens) return KVRT_SUCCESS;
    save_seq(s);
    const uint32_t kept_blocks = blocks_for_tokens(keep);
    const uint32_t view = keep & (block_size_ - 1);
    if (view != 0) {
        const uint32_t b = s.table[kept_blocks - 1];
        if (ref_[b] == 1) {
            // Ours alone: empty the dropped slots now. Its registered
            // descendants are the blocks released below, so they are freed.
            if (reg_[b]) unregister_tree(b);
            clear_slots(b, view);
        }
        // Shared: left as it is; append() copies it before writing.
    }
    while (s.table.size() > kept_blocks) {
        release(s.table.back());
        s.table.pop_back();
    }
    s.n_tokens = keep;
    if (keep == 0) s.salt = 0;
    touch(s);
    return KVRT_SUCCESS;
}

Result BlockPool::forget_tail(int32_t seq, uint32_t keep) {
    KVRT_TRY(check_seq("forget_tail", seq));
    Seq& s = seqs_[size_t(seq)];
    if (keep >= s.n_tokens) return KVRT_SUCCESS;
    for (size_t i = keep >> block_shift_; i < s.table.size(); ++i)
        if (reg_[s.table[i]]) unregister_tree(s.table[i]);
    return truncate(seq, keep);
}

Result BlockPool::keep_tail(int32_t seq, uint32_t from, const uint32_t* keep, uint32_t n_keep,
                            std::vector<std::pair<uint32_t, uint32_t>>* moves) {
    if (moves == nullptr || (n_keep && keep == nullptr))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "keep_tail: NULL list");
    KVRT_TRY(check_seq("keep_tail", seq));
    Seq& s = seqs_[size_t(seq)];
    if (from > s.n_tokens || n_keep > s.n_tokens - from)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "keep_tail: %u tokens from %u exceed sequence %d's %u", n_keep, from,
                    seq, s.n_tokens);
    for (uint32_t j = 0; j < n_keep; ++j) {
        if (keep[j] < from || keep[j] >= s.n_tokens || (j && keep[j] <= keep[j - 1]))
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "keep_tail: kept token %u (index %u) is out of order or range", j,
                        keep[j]);
    }
    for (size_t i = from >> block_shift_; i < s.table.size(); ++i) {
        if (ref_[s.table[i]] > 1)
            return fail(KVRT_ERROR_UNSUPPORTED,
                        "sequence %d shares the block of its token %u with another sequence (a fork): its tail "
                        "cannot be rearranged",
                        seq, uint32_t(i << block_shift_) > from ? uint32_t(i << block_shift_) : from);
    }
    moves->clear();
    try {
        moves->reserve(n_keep);
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "keep_tail: out of host memory for %u moves", n_keep);
    }
    for (uint32_t j = 0; j < n_keep; ++j) {
        if (keep[j] == from + j) continue;
        const uint32_t src = slot(seq, keep[j]), dst = slot(seq, from + j);
        save_block(dst >> block_shift_);
        pos_[dst] = pos_[src];
        tok_[dst] = tok_[src];
        moves->push_back({src, dst});
        const uint32_t b = dst >> block_shift_;
        if (reg_[b]) unregister_tree(b);
        mark_changed(b);
    }
    return truncate(seq, from + n_keep);
}

Result BlockPool::suffix_start(int32_t seq, int32_t p0, int32_t p1, uint32_t* out) const {
    if (p0 >= 0 && p1 >= 0 && p1 < p0) {
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "reversed position range [%d, %d)", p0, p1);
    }
    KVRT_TRY(check_seq("suffix_start", seq));
    const Seq& s = seqs_[size_t(seq)];
    const int64_t lo = p0 < 0 ? 0 : p0;
    const int64_t hi = p1 < 0 ? kPosMax + 1 : p1;
    uint32_t first = s.n_tokens;  // first token in the range
    if (lo < hi) {
        for (uint32_t t = 0; t < s.n_tokens; ++t) {
            const int32_t p = pos_[slot(seq, t)];
            const bool in = p >= lo && p < hi;
            if (in && first == s.n_tokens) {
                first = t;
            } else if (!in && first != s.n_tokens) {
                return fail(KVRT_ERROR_UNSUPPORTED,
                            "positions [%d, %d) of sequence %d are not its tail: token %u is kept after token %u; "
                            "the paged layout only removes or shifts a sequence's tail",
                            p0, p1, seq, t, first);
            }
        }
    }
    *out = first;
    return KVRT_SUCCESS;
}

Result BlockPool::seq_rm(int32_t seq, int32_t p0, int32_t p1) {
    uint32_t first = 0;
    KVRT_TRY(suffix_start(seq, p0, p1, &first));
    return truncate(seq, first);
}

Result BlockPool::shift(int32_t seq, int32_t delta, uint32_t from_token, BlockWork* out) {
    if (out == nullptr) return fail(KVRT_ERROR_INVALID_ARGUMENT, "shift: out is NULL");
    out->clear();
    KVRT_TRY(check_seq("shift", seq));
    Seq& s = seqs_[size_t(seq)];
    if (delta == 0 || from_token >= s.n_tokens) return KVRT_SUCCESS;
    for (uint32_t t = from_token; t < s.n_tokens; ++t) {
        const int64_t p = int64_t(pos_[slot(seq, t)]) + delta;
        if (p < 0 || p > kPosMax) {
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "shift: position %d of token %u + %d leaves [0, INT32_MAX]",
                        pos_[slot(seq, t)], t, delta);
        }
    }
    const uint32_t first = from_token >> block_shift_;
    const uint32_t n_table = uint32_t(s.table.size());
    uint32_t n_copies = 0;
    for (uint32_t i = first; i < n_table; ++i) n_copies += ref_[s.table[i]] > 1 ? 1u : 0u;
    if (n_copies > available_count()) {
        return fail(KVRT_ERROR_CACHE_FULL,
                    "shift: copying %u shared blocks needs %u blocks but only %u of %u are available", n_copies,
                    n_copies, available_count(), n_blocks_);
    }
    KVRT_TRY(reserve_work("shift", s, n_table, s.n_tokens - from_token, n_copies, out));

    out->delta = delta;
    for (uint32_t i = first; i < n_table; ++i) {
        uint32_t b = s.table[i];
        const uint32_t view = std::min(block_size_, s.n_tokens - (i << block_shift_));
        if (ref_[b] > 1) {
            // Copy-on-shift: the others keep seeing the original.
            const uint32_t copy = copy_block(b, view);
            save_block(b);
            --ref_[b];
            s.table[i] = copy;
            out->copies.push_back(BlockCopy{b, copy});
            b = copy;
        } else {
            // Ours alone: shifted in place, so its registered contents are gone.
            if (reg_[b]) unregister_tree(b);
            clear_slots(b, view);
        }
        save_block(b);
        shifted_[b] = 1;
        const uint32_t j0 = i == first ? from_token & (block_size_ - 1) : 0;
        for (uint32_t j = j0; j < view; ++j) {
            const size_t slot = slot_index(b, j);
            pos_[slot] += delta;  // checked above
            out->slots.push_back(uint32_t(slot));
        }
        mark_changed(b);
    }
    touch(s);
    return KVRT_SUCCESS;
}

Result BlockPool::set_sharing(int32_t seq, bool on) {
    KVRT_TRY(check_seq("set_sharing", seq));
    save_seq(seqs_[size_t(seq)]);
    seqs_[size_t(seq)].sharing = on;
    return KVRT_SUCCESS;
}

void BlockPool::clear_registry() {
    if (recording_) {
        // Every block and bucket may change: saved whole (this is O(pool) anyway).
        for (uint32_t b = 0; b < n_blocks_; ++b) save_block(b);
        for (size_t k = 0; k < buckets_.size(); ++k) save_bucket(k);
    }
    // Cached blocks first, oldest first, then the flags and links of the rest.
    for (uint32_t b = lru_head_; b != kNone;) {
        const uint32_t next = lru_next_[b];
        lru_prev_[b] = lru_next_[b] = kNone;
        free_block(b);
        b = next;
    }
    lru_head_ = lru_tail_ = kNone;
    n_cached_ = 0;
    for (uint32_t b = 0; b < n_blocks_; ++b) {
        reg_[b] = 0;
        parent_[b] = first_child_[b] = next_sibling_[b] = prev_sibling_[b] = bucket_next_[b] = kNone;
    }
    std::fill(buckets_.begin(), buckets_.end(), kNone);
    n_registered_ = 0;
}

// ---- Queries -------------------------------------------------------------------

uint32_t BlockPool::shared_count() const {
    uint32_t n = 0;
    for (uint32_t b = 0; b < n_blocks_; ++b) n += ref_[b] > 1;
    return n;
}

const std::vector<uint32_t>& BlockPool::block_table(int32_t seq) const {
    static const std::vector<uint32_t> empty;
    if (seq < 0 || uint32_t(seq) >= max_seqs_) return empty;
    return seqs_[size_t(seq)].table;
}

uint64_t BlockPool::table_revision(int32_t seq) const {
    return seq < 0 || uint32_t(seq) >= max_seqs_ ? 0 : seqs_[size_t(seq)].revision;
}

uint32_t BlockPool::seq_length(int32_t seq) const {
    return seq < 0 || uint32_t(seq) >= max_seqs_ ? 0 : seqs_[size_t(seq)].n_tokens;
}

bool BlockPool::sharing(int32_t seq) const {
    return seq >= 0 && uint32_t(seq) < max_seqs_ && seqs_[size_t(seq)].sharing;
}

uint64_t BlockPool::salt(int32_t seq) const {
    return seq < 0 || uint32_t(seq) >= max_seqs_ ? 0 : seqs_[size_t(seq)].salt;
}

uint32_t BlockPool::slot(int32_t seq, uint32_t token) const {
    if (seq < 0 || uint32_t(seq) >= max_seqs_) return kNone;
    const Seq& s = seqs_[size_t(seq)];
    if (token >= s.n_tokens) return kNone;
    return uint32_t(slot_index(s.table[token >> block_shift_], token & (block_size_ - 1)));
}

Result BlockPool::verify() const {
    try {
        std::vector<uint32_t> ref(n_blocks_, 0);
        std::vector<uint32_t> seen(n_blocks_, kNone);  // last sequence whose table holds the block
        for (uint32_t q = 0; q < max_seqs_; ++q) {
            const Seq& s = seqs_[q];
            if (s.table.size() != blocks_for_tokens(s.n_tokens)) {
                return fail(KVRT_ERROR_INTERNAL, "block pool: sequence %u has %u tokens but %u blocks", q,
                            s.n_tokens, uint32_t(s.table.size()));
            }
            for (uint32_t i = 0; i < uint32_t(s.table.size()); ++i) {
                const uint32_t b = s.table[i];
                if (b >= n_blocks_ || seen[b] == q) {
                    return fail(KVRT_ERROR_INTERNAL, "block pool: sequence %u holds block %u twice or out of range",
                                q, b);
                }
                seen[b] = q;
                ++ref[b];
                const uint32_t view = std::min(block_size_, s.n_tokens - (i << block_shift_));
                if (fill_[b] < view) {
                    return fail(KVRT_ERROR_INTERNAL, "block pool: block %u holds %u tokens, sequence %u reads %u", b,
                                fill_[b], q, view);
                }
                if (reg_[b] && parent_[b] != (i == 0 ? kNone : s.table[i - 1])) {
                    return fail(KVRT_ERROR_INTERNAL,
                                "block pool: registered block %u of sequence %u does not follow its parent", b, q);
                }
            }
        }
        uint32_t used = 0;
        uint32_t cached = 0;
        uint32_t registered = 0;
        for (uint32_t b = 0; b < n_blocks_; ++b) {
            if (ref[b] != ref_[b]) {
                return fail(KVRT_ERROR_INTERNAL, "block pool: block %u has reference count %u but %u table entries",
                            b, ref_[b], ref[b]);
            }
            used += ref[b] != 0 ? 1u : 0u;
            cached += ref[b] == 0 && reg_[b] ? 1u : 0u;
            const size_t base = slot_index(b, 0);
            bool unknown = false;  // a token of unknown id: never registered
            for (uint32_t j = 0; j < block_size_; ++j) {
                const bool full = pos_[base + j] >= 0 && tok_[base + j] >= unknown_token;
                const bool empty = pos_[base + j] == -1 && tok_[base + j] == -1;
                if (j < fill_[b] ? !full : !empty) {
                    return fail(KVRT_ERROR_INTERNAL, "block pool: slot %u of block %u disagrees with its fill %u", j,
                                b, fill_[b]);
                }
                unknown = unknown || (j < fill_[b] && tok_[base + j] == unknown_token);
            }
            if (reg_[b] && unknown)
                return fail(KVRT_ERROR_INTERNAL, "block pool: registered block %u holds a token of unknown id", b);
            if (!reg_[b]) continue;
            ++registered;
            const uint32_t p = parent_[b];
            if (fill_[b] != block_size_ || (p != kNone && (!reg_[p] || salt_[p] != salt_[b]))) {
                return fail(KVRT_ERROR_INTERNAL, "block pool: registered block %u is not full or has a bad parent", b);
            }
            const uint64_t key = hash_(p == kNone ? root_key : key_[p], salt_[b], &tok_[base], &pos_[base],
                                       block_size_);
            if (key != key_[b] || find_registered(p, key, salt_[b], &tok_[base], &pos_[base]) != b) {
                return fail(KVRT_ERROR_INTERNAL, "block pool: registered block %u has a stale key or a duplicate", b);
            }
            for (uint32_t c = first_child_[b]; c != kNone; c = next_sibling_[c]) {
                if (!reg_[c] || parent_[c] != b) {
                    return fail(KVRT_ERROR_INTERNAL, "block pool: the children of block %u are inconsistent", b);
                }
            }
        }
        if (used != n_used_ || cached != n_cached_ || registered != n_registered_ ||
            used + cached + uint32_t(free_.size()) != n_blocks_) {
            return fail(KVRT_ERROR_INTERNAL,
                        "block pool: counters (used %u, cached %u, registered %u, free %u) disagree with the blocks "
                        "(%u, %u, %u, %u)",
                        n_used_, n_cached_, n_registered_, uint32_t(free_.size()), used, cached, registered,
                        n_blocks_ - used - cached);
        }
        std::vector<uint8_t> mark(n_blocks_, 0);
        for (const uint32_t b : free_) {
            if (b >= n_blocks_ || mark[b] || ref_[b] != 0 || reg_[b] || fill_[b] != 0) {
                return fail(KVRT_ERROR_INTERNAL, "block pool: free block %u is repeated, in use or registered", b);
            }
            mark[b] = 1;
        }
        uint32_t n_lru = 0;
        uint32_t prev = kNone;
        for (uint32_t b = lru_head_; b != kNone; b = lru_next_[b]) {
            if (mark[b] || ref_[b] != 0 || !reg_[b] || lru_prev_[b] != prev || ++n_lru > n_cached_) {
                return fail(KVRT_ERROR_INTERNAL, "block pool: the eviction list is inconsistent at block %u", b);
            }
            mark[b] = 1;
            prev = b;
        }
        if (n_lru != n_cached_ || lru_tail_ != prev) {
            return fail(KVRT_ERROR_INTERNAL, "block pool: the eviction list holds %u of %u cached blocks", n_lru,
                        n_cached_);
        }
        uint32_t n_chained = 0;
        for (size_t k = 0; k < buckets_.size(); ++k) {
            for (uint32_t b = buckets_[k]; b != kNone; b = bucket_next_[b]) {
                if (!reg_[b] || size_t(key_[b] & (buckets_.size() - 1)) != k || ++n_chained > n_registered_) {
                    return fail(KVRT_ERROR_INTERNAL, "block pool: hash bucket %u is inconsistent", uint32_t(k));
                }
            }
        }
        if (n_chained != n_registered_) {
            return fail(KVRT_ERROR_INTERNAL, "block pool: the hash buckets hold %u of %u registered blocks",
                        n_chained, n_registered_);
        }
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "block pool: out of host memory while verifying");
    }
    return KVRT_SUCCESS;
}

}  // namespace kvrt::kv
