// The block pool: CPU-side metadata of the cache's paged layout.
//
// The cache holds `n_blocks` physical blocks of B tokens, shared by all layers:
// block b addresses slots b * B .. b * B + B - 1 in every layer's K and V
// arrays. Each sequence owns a block table; its logical block i holds the
// sequence's tokens i * B .. i * B + B - 1 in append order, so token t of a
// sequence lives in slot table[t / B] * B + t % B. Every slot stores the
// position and the token id written there (-1 when empty); a block shared by
// several sequences therefore shows the same positions to all of them.
//
// Sharing. A block's reference count is the number of block-table entries
// that point at it. Blocks are shared by fork() and by automatic prefix
// sharing: a full block of a sequence with sharing on is registered under its
// exact contents (token ids and positions of its B slots), a salt, and its
// parent (the registered block before it), so a registered block stands for
// the whole prefix up to its end, as in vLLM's hash chain. admit() maps the
// longest run of registered leading blocks whose tokens, positions and salt
// equal the prompt's. A 64-bit hash of (parent's key, salt, contents) only
// finds candidates; every match compares the stored tokens, positions, salt
// and parent exactly, so a hash collision can never map a wrong block.
// Registered blocks form a tree (each one's parent is registered); when a
// block is unregistered, its registered descendants are unregistered with it.
// A block with reference count 0 is cached when registered (it keeps its
// contents, can be mapped again, and is evicted least recently released first
// when a new block is needed) and free otherwise.
//
// Writing into a shared block is copy-on-write: a sequence that appends to a
// partly filled last block that others also use first gets a private copy,
// and shift() copies every shared block whose positions it changes, so no
// operation ever changes what another sequence sees. Every mutation reports
// the device work it implies in a BlockWork: the whole-block copies to record
// first, then the slots to write (or, for shift(), to rotate).
//
// Layout for upload: positions() and token_ids() are int32 arrays of
// n_blocks * B slots; a block table is an array of uint32 block ids. Slot
// metadata changes widen a range of changed blocks (take_changes()), and each
// sequence's table has a revision that changes with it (table_revision()),
// so a device mirror can resend only what changed.
//
// Failure model. Every mutating operation validates its arguments, checks the
// block budget and reserves every host allocation it needs before it changes
// anything, so an operation that returns an error (bad argument,
// KVRT_ERROR_CACHE_FULL, KVRT_ERROR_OUT_OF_HOST_MEMORY) leaves the pool
// exactly as it was, including the eviction order. The BlockWork passed in is
// cleared on entry and may hold nothing useful after a failure.
//
// Thread-safety: a BlockPool is externally synchronized. Concurrent calls to
// const member functions are safe; anything else needs exclusive access.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/result.hpp"

namespace kvrt::kv {

// One device copy: every slot of block `src` to block `dst`, in every layer.
struct BlockCopy {
    uint32_t src = 0;
    uint32_t dst = 0;
};

// What the device must do for one mutation, in this order: record the copies
// (each destination is a fresh block; sources are not written by the same
// mutation), then write the tokens to `slots` (append, admit) or rotate the
// K of `slots` by `delta` (shift).
struct BlockWork {
    std::vector<BlockCopy> copies;
    // append/admit: the slot of each token to compute, in token order (for
    // admit, tokens n_cached .. n_tokens - 1). shift: the slots whose position
    // changed, in token order (after the copies).
    std::vector<uint32_t> slots;
    // admit: leading tokens found in the cache (a multiple of the block size);
    // they need not be computed. 0 for every other operation.
    uint32_t n_cached = 0;
    // shift: the position change of every slot in `slots`. 0 otherwise.
    int32_t delta = 0;

    void clear() {
        copies.clear();
        slots.clear();
        n_cached = 0;
        delta = 0;
    }
};

// Hash of one block's registry key: the parent's key (or BlockPool::root_key
// for a sequence's first block), the salt, and the block's `n` token ids and
// positions. Only a lookup key; matching always compares contents.
using BlockHashFn = uint64_t (*)(uint64_t parent_key, uint64_t salt, const int32_t* tokens,
                                 const int32_t* positions, uint32_t n);

// The default BlockHashFn: a 64-bit mix of every argument.
uint64_t default_block_hash(uint64_t parent_key, uint64_t salt, const int32_t* tokens, const int32_t* positions,
                            uint32_t n);

class BlockPool {
public:
    // "No block" in parent/LRU queries and slot() for a token that does not exist.
    static constexpr uint32_t none = UINT32_MAX;
    // The parent key of a sequence's first block.
    static constexpr uint64_t root_key = 0x6b7672742d706167ull;
    // The id of a token whose id is unknown (append only).
    static constexpr int32_t unknown_token = -1;

    BlockPool() = default;

    // (Re)initializes an empty pool of `n_blocks` blocks of `block_size` tokens
    // serving sequence ids in [0, max_seqs). The cache uses block sizes 16, 32
    // and 64; any power of two up to 64 is accepted. Every sequence starts
    // empty with sharing on and salt 0. Returns KVRT_ERROR_INVALID_ARGUMENT
    // when a count is 0, the block size is not a power of two <= 64, max_seqs
    // exceeds INT32_MAX or n_blocks * block_size exceeds INT32_MAX;
    // KVRT_ERROR_OUT_OF_HOST_MEMORY. On failure the previous contents are kept.
    Result init(uint32_t n_blocks, uint32_t block_size, uint32_t max_seqs);

    // Replaces the registry's hash (nullptr: the default). Only allowed while
    // nothing is registered (else KVRT_ERROR_INVALID_STATE). Meant for tests,
    // which force collisions with it.
    Result set_hash_function(BlockHashFn fn);

    // ---- Mutations -------------------------------------------------------------
    //
    // A sequence id outside [0, max_seqs), a NULL `out`, NULL token or
    // position arrays with n > 0, or a negative position is
    // KVRT_ERROR_INVALID_ARGUMENT. On any error the pool is unchanged.

    // Appends `n` tokens (ids and positions) to the end of `seq` (a block
    // that a shift changed is never registered; see shift()). An id of
    // unknown_token (-1) stands for a token whose id the caller does not
    // know; a block holding one is never registered. New blocks
    // come from the free blocks first, then by evicting the least recently
    // released cached block (which unregisters it and its descendants). If
    // the sequence's last block is partly filled and shared, it is first
    // copied to a new block (one BlockCopy). A block that this call fills is
    // registered when the sequence has sharing on, its previous block is
    // registered (or it is the first block), and no equal entry exists.
    // Writing into a partly filled last block that the sequence alone uses
    // and that is registered (possible after truncate()) unregisters it.
    // KVRT_ERROR_CACHE_FULL when free plus cached blocks do not cover the
    // blocks needed; KVRT_ERROR_OUT_OF_HOST_MEMORY.
    Result append(int32_t seq, uint32_t n, const int32_t* token_ids, const int32_t* positions, BlockWork* out);

    // Starts the EMPTY sequence `seq` with a prompt of `n` tokens under
    // `salt` (opaque: whatever else decides block contents, such as RoPE
    // parameters and K/V types). With sharing on, it maps the longest run of
    // registered leading blocks that match the prompt exactly (tokens,
    // positions, salt and chain), leaving at least one token to compute so
    // that the engine gets the logits of the last one; out->n_cached tells
    // how many tokens that skips. The rest is appended as by append().
    // KVRT_ERROR_INVALID_ARGUMENT when `seq` is not empty; KVRT_ERROR_CACHE_FULL
    // and KVRT_ERROR_OUT_OF_HOST_MEMORY as append(). At most `max_blocks`
    // leading blocks are mapped; with `replace`, a registered block that
    // matched past them is unregistered (with its descendants) once the call
    // cannot fail, so that the blocks this call fills take its place in the
    // registry (a cache whose copies of those rows are incomplete).
    Result admit(int32_t seq, uint32_t n, const int32_t* token_ids, const int32_t* positions, uint64_t salt,
                 BlockWork* out, uint32_t max_blocks = UINT32_MAX, bool replace = false);

    // The registered blocks that admit() would map for the same arguments,
    // in order, without changing anything (none when `seq` has sharing off).
    // Arguments are checked as by admit() (`seq` need not be empty);
    // KVRT_ERROR_OUT_OF_HOST_MEMORY.
    Result match(int32_t seq, uint32_t n, const int32_t* token_ids, const int32_t* positions, uint64_t salt,
                 std::vector<uint32_t>* out) const;

    // Gives the EMPTY sequence `dst` the block table, tokens and salt of `src`
    // (reference counts go up; no data moves). src == dst or a non-empty dst
    // is KVRT_ERROR_INVALID_ARGUMENT; KVRT_ERROR_OUT_OF_HOST_MEMORY.
    Result fork(int32_t src, int32_t dst);

    // Keeps the first `keep` tokens of `seq` and drops the rest (keep >= the
    // sequence's length is a no-op). Blocks past the kept ones are released
    // (last first, so a sequence's tail is evicted before its head). A partly
    // kept last block that others share is left as it is; the sequence copies
    // it on its next append. One the sequence alone uses has its dropped
    // slots emptied now and is unregistered if it was registered. A sequence
    // emptied by this gets salt 0. Allocates nothing.
    Result truncate(int32_t seq, uint32_t keep);

    // truncate(seq, keep) after unregistering (with their descendants) the
    // blocks of `seq` that hold its tokens from `keep` on: for tokens whose
    // rows never reached the device, so that no admit maps them. Allocates
    // nothing.
    Result forget_tail(int32_t seq, uint32_t keep);

    // Keeps, of the tokens of `seq` from token index `from` on, those listed
    // in keep[0..n_keep) (increasing token indices >= from) and drops the
    // others: the j-th kept token moves to token index from + j (its slot
    // takes the kept token's id and position), then the sequence is cut to
    // from + n_keep tokens. `moves` receives each (source slot, destination
    // slot) whose rows the device must copy, in order: a move may write the
    // source of an earlier one, never of a later one. The blocks from
    // `from` on must be the sequence's alone (else KVRT_ERROR_UNSUPPORTED:
    // a fork shares them); those whose contents change are unregistered.
    // KVRT_ERROR_INVALID_ARGUMENT for bad indices; KVRT_ERROR_OUT_OF_HOST_MEMORY.
    Result keep_tail(int32_t seq, uint32_t from, const uint32_t* keep, uint32_t n_keep,
                     std::vector<std::pair<uint32_t, uint32_t>>* moves);

    // Drops every token of `seq` (truncate(seq, 0)).
    Result remove(int32_t seq) { return truncate(seq, 0); }

    // llama.cpp's seq_rm on a block table: removes the tokens of `seq` whose
    // position is in [p0, p1) (p0 < 0 means 0, p1 < 0 means +infinity). Only
    // a removal that leaves a prefix of the sequence (every removed token
    // comes after every kept one, in token order) is supported; others are
    // KVRT_ERROR_UNSUPPORTED. A reversed range is KVRT_ERROR_INVALID_ARGUMENT.
    Result seq_rm(int32_t seq, int32_t p0, int32_t p1);

    // The first token of `seq` (in token order) whose position is in
    // [p0, p1) (same bounds as seq_rm), or its length when none is, when
    // every token from it on is in the range; else KVRT_ERROR_UNSUPPORTED.
    // A reversed range or a bad seq is KVRT_ERROR_INVALID_ARGUMENT.
    Result suffix_start(int32_t seq, int32_t p0, int32_t p1, uint32_t* out) const;

    // A shift leaves rows that a fresh prompt would not compute (their keys
    // were computed at other positions, in another context), so a block it
    // changes, and any copy of one, is never registered again until it is
    // reused; neither are the blocks after it in the sequence, since a block
    // is registered only after its parent.
    //
    // Adds `delta` to the positions of the tokens of `seq` from token index
    // `from_token` on (context shift); out->slots lists their slots, whose K
    // the device rotates by out->delta. A shifted block that other sequences
    // share is replaced in this sequence's table by a private copy (one
    // BlockCopy; the others keep the original, still registered if it was);
    // a shifted block the sequence alone uses changes in place and is
    // unregistered with its descendants, since its contents no longer match
    // its key. from_token >= the sequence's length or delta == 0 is a no-op.
    // KVRT_ERROR_INVALID_ARGUMENT when a new position would be negative or
    // exceed INT32_MAX; KVRT_ERROR_CACHE_FULL when the copies need more blocks
    // than free plus cached; KVRT_ERROR_OUT_OF_HOST_MEMORY.
    Result shift(int32_t seq, int32_t delta, uint32_t from_token, BlockWork* out);

    // Turns prefix sharing of `seq` on or off. Off, the sequence neither maps
    // registered blocks in admit() nor registers the blocks it fills (its
    // contents stay private); blocks registered earlier stay registered.
    Result set_sharing(int32_t seq, bool on);

    // Unregisters every block: cached blocks become free, blocks in use stay
    // where they are. Never fails.
    void clear_registry();

    // ---- Queries ---------------------------------------------------------------

    uint32_t n_blocks() const { return n_blocks_; }
    uint32_t block_size() const { return block_size_; }
    uint32_t max_seqs() const { return max_seqs_; }

    // Blocks with reference count 0 that are not registered / registered /
    // blocks with a reference count above 0. They add up to n_blocks().
    uint32_t free_count() const { return uint32_t(free_.size()); }
    uint32_t cached_count() const { return n_cached_; }
    uint32_t used_count() const { return n_used_; }
    uint32_t registered_count() const { return n_registered_; }

    // Blocks a new allocation can take: free_count() + cached_count().
    uint32_t available_count() const { return uint32_t(free_.size()) + n_cached_; }

    // Blocks that `n` tokens fill: ceil(n / block_size()).
    uint32_t blocks_for_tokens(uint32_t n) const {
        return block_size_ == 0 ? 0 : uint32_t((uint64_t(n) + block_size_ - 1) >> block_shift_);
    }

    // The block table of `seq` (empty for a bad seq). Valid until the next
    // mutation.
    const std::vector<uint32_t>& block_table(int32_t seq) const;

    // Changes whenever the block table or length of `seq` changes (0 for a
    // bad seq; drawn from a process-wide counter).
    uint64_t table_revision(int32_t seq) const;

    // Tokens of `seq` (0 for a bad seq).
    uint32_t seq_length(int32_t seq) const;

    // Sharing flag and salt of `seq` (false / 0 for a bad seq).
    bool sharing(int32_t seq) const;
    uint64_t salt(int32_t seq) const;

    // Slot of token `token` of `seq`, or `none` when it does not exist.
    uint32_t slot(int32_t seq, uint32_t token) const;

    // Per-slot arrays (n_blocks() * block_size() entries; -1 when empty).
    // Slots past a sequence's length in its last block may hold the tokens
    // of another sequence that shares the block.
    const int32_t* positions() const { return pos_.data(); }
    const int32_t* token_ids() const { return tok_.data(); }

    // Blocks in more than one block-table entry. O(n_blocks).
    uint32_t shared_count() const;

    // Per-block state; block < n_blocks().
    uint32_t refcount(uint32_t block) const { return ref_[block]; }
    bool registered(uint32_t block) const { return reg_[block] != 0; }
    // Leading slots of the block that hold a token.
    uint32_t block_fill(uint32_t block) const { return fill_[block]; }
    // The registered parent of a registered block (`none` for a first block
    // or an unregistered block).
    uint32_t parent(uint32_t block) const { return reg_[block] ? parent_[block] : none; }

    // The cached blocks in eviction order: lru_oldest() is evicted first,
    // lru_newer(b) follows b (`none` at the end).
    uint32_t lru_oldest() const { return lru_head_; }
    uint32_t lru_newer(uint32_t block) const { return lru_next_[block]; }

    // Writes the range of blocks [*lo, *hi) whose slots changed since the last
    // call and resets it; false when nothing changed. init() marks every block.
    bool take_changes(uint32_t* lo, uint32_t* hi);

    // ---- Undo ------------------------------------------------------------------
    //
    // An undo point, for a caller that changes the pool in several steps and
    // must give all of them back when a later step (its own, not the pool's)
    // fails. mark() starts a record: from then on each block, hash bucket,
    // free-list entry and sequence that a mutation changes has its contents
    // saved the first time it changes. rewind() puts every saved item back
    // and ends the record; commit() ends it and keeps the changes. Both cost
    // what changed since mark(), never the pool's size: the save areas are
    // allocated by init() (about the pool's own size) and by the reservations
    // each mutation already makes, so recording allocates nothing and adds no
    // failure. After rewind() the pool equals what it was at mark() in every
    // field (eviction order, free-list order and table revisions included),
    // but for the range of changed blocks, which only widens. mark() while
    // recording starts a new record at the current state.
    void mark();
    void rewind();
    void commit() { recording_ = false; }
    bool recording() const { return recording_; }

    // Whether `other` holds the same blocks, slots, registry, lists,
    // counters and sequences, field by field (tests).
    bool same_state(const BlockPool& other) const;

    // Recomputes reference counts, counters, lists and the registry from the
    // tables and compares; KVRT_ERROR_INTERNAL with the first mismatch, or
    // KVRT_ERROR_OUT_OF_HOST_MEMORY. O(n_blocks * block_size + tables); meant
    // for tests and for checking restored state.
    Result verify() const;

private:
    struct Seq {
        std::vector<uint32_t> table;
        uint32_t n_tokens = 0;
        bool sharing = true;
        uint64_t salt = 0;
        uint64_t revision = 0;
    };

    size_t slot_index(uint32_t block, uint32_t j) const { return (size_t(block) << block_shift_) + j; }
    Result check_seq(const char* op, int32_t seq) const;
    Result check_tokens(const char* op, uint32_t n, const int32_t* token_ids, const int32_t* positions,
                        bool unknown_ok) const;
    Result reserve_work(const char* op, Seq& s, size_t table_size, size_t n_slots, size_t n_copies,
                        BlockWork* out);
    uint32_t append_need(const Seq& s, uint32_t n) const;
    void append_tokens(Seq& s, uint32_t n, const int32_t* token_ids, const int32_t* positions, BlockWork* out);
    void maybe_register(Seq& s, uint32_t index);
    uint32_t find_registered(uint32_t parent, uint64_t key, uint64_t salt, const int32_t* tokens,
                             const int32_t* positions) const;
    // admit()'s matching: appends the matched blocks to `out` (reserved by
    // the caller for (n - 1) / B entries), at most max_blocks.
    void match_chain(const Seq& s, uint32_t n, const int32_t* token_ids, const int32_t* positions, uint64_t salt,
                     uint32_t max_blocks, std::vector<uint32_t>* out) const;
    uint32_t take_block();
    uint32_t copy_block(uint32_t src, uint32_t n_slots);
    void release(uint32_t block);
    void free_block(uint32_t block);
    void clear_slots(uint32_t block, uint32_t from);
    void register_block(uint32_t block, uint32_t parent, uint64_t key, uint64_t salt);
    void unregister_tree(uint32_t block);
    void unregister_one(uint32_t block);
    void lru_push(uint32_t block);
    void lru_remove(uint32_t block);
    void mark_changed(uint32_t block) {
        if (changed_lo_ >= changed_hi_) {
            changed_lo_ = block;
            changed_hi_ = block + 1;
        } else if (block < changed_lo_) {
            changed_lo_ = block;
        } else if (block >= changed_hi_) {
            changed_hi_ = block + 1;
        }
    }
    static void touch(Seq& s);

    // The undo record (mark()): each item's contents are saved once, before
    // its first change while recording.
    struct BlockSave {
        uint32_t ref, fill, parent, first_child, next_sibling, prev_sibling, bucket_next, lru_prev, lru_next;
        uint64_t key, salt;
        uint8_t shifted, reg;
    };
    void save_block(uint32_t block) {
        if (recording_ && block_saved_at_[block] != record_epoch_) save_block_now(block);
    }
    void save_block_now(uint32_t block);
    void save_bucket(size_t bucket);
    // The sequence's fields; its save area holds its table without
    // allocating (reserve_work reserves both).
    void save_seq(const Seq& s);
    // Pops the free list's top, saving an entry that was there at mark().
    uint32_t pop_free();

    uint32_t n_blocks_ = 0;
    uint32_t block_size_ = 0;
    uint32_t block_shift_ = 0;           // log2(block_size_)
    uint32_t max_seqs_ = 0;
    std::vector<int32_t> pos_;           // per slot
    std::vector<int32_t> tok_;           // per slot
    std::vector<uint32_t> ref_;          // per block: table entries pointing at it
    std::vector<uint32_t> fill_;         // per block: leading slots in use
    std::vector<uint8_t> shifted_;       // per block: holds rows a shift moved (never registered)
    std::vector<uint32_t> free_;         // free blocks (a stack; capacity n_blocks)
    std::vector<uint32_t> scratch_;      // admit's matches (capacity n_blocks)
    // Registry, per block: flag, key, salt, parent, children (an intrusive
    // list), and the next block in the same hash bucket.
    std::vector<uint8_t> reg_;
    std::vector<uint64_t> key_;
    std::vector<uint64_t> salt_;
    std::vector<uint32_t> parent_;
    std::vector<uint32_t> first_child_;
    std::vector<uint32_t> next_sibling_;
    std::vector<uint32_t> prev_sibling_;
    std::vector<uint32_t> bucket_next_;
    std::vector<uint32_t> buckets_;      // power-of-two count >= n_blocks
    // Cached blocks, oldest release first (an intrusive doubly linked list).
    std::vector<uint32_t> lru_prev_;
    std::vector<uint32_t> lru_next_;
    uint32_t lru_head_ = none;
    uint32_t lru_tail_ = none;
    uint32_t n_cached_ = 0;
    uint32_t n_used_ = 0;
    uint32_t n_registered_ = 0;
    std::vector<Seq> seqs_;
    BlockHashFn hash_ = default_block_hash;
    uint32_t changed_lo_ = 0;            // blocks whose slots changed since take_changes()
    uint32_t changed_hi_ = 0;

    // The undo record: per item, the record it was saved in (record_epoch_
    // when saved in the current one), its saved contents, and the items saved
    // in order; the free list's size at mark() and the lowest size it has had
    // since (entries below that one are unchanged); the counters at mark().
    bool recording_ = false;
    uint32_t record_epoch_ = 0;
    std::vector<uint32_t> block_saved_at_;
    std::vector<BlockSave> block_save_;
    std::vector<int32_t> pos_save_, tok_save_;  // per slot
    std::vector<uint32_t> saved_blocks_;        // capacity n_blocks
    std::vector<uint32_t> bucket_saved_at_;
    std::vector<uint32_t> bucket_save_;
    std::vector<uint32_t> saved_buckets_;       // capacity: the bucket count
    std::vector<uint32_t> seq_saved_at_;
    std::vector<Seq> seq_save_;
    std::vector<uint32_t> saved_seqs_;          // capacity max_seqs
    std::vector<uint32_t> free_save_;           // per free-list index
    size_t free_size_at_mark_ = 0;
    size_t free_low_ = 0;
    uint32_t mark_lru_head_ = none, mark_lru_tail_ = none;
    uint32_t mark_cached_ = 0, mark_used_ = 0, mark_registered_ = 0;
};

}  // namespace kvrt::kv
