// The decode tests of the cell cache: the model of decode_model.hpp decodes
// three times the cache's capacity through it, making room whenever it is
// full, for each way of making room and K/V type, with one sequence and with
// two that share the prompt's cells.
//
// The prompt is evaluated as one batch in sequence 0; every other sequence
// then shares its cells (kvrt_cache_seq_cp). Each step evaluates the pending
// token of every sequence in one batch and samples the next greedily. When
// the cache has no cell left for the step, the run makes room in every
// sequence: it keeps the first n_keep positions (attention sinks) and drops
// half of the rest,
//   shift:      kvrt_cache_context_shift moves the newer half down; kvrt
//               rotates their keys (kvrt_cache_apply_shifts);
//   reevaluate: kvrt_cache_discard_for_reevaluation drops everything after
//               the sinks and names the tokens to evaluate again at their
//               new positions; the model runs them as one batch.
//
// Checked: attention against the reference (decode_check.hpp) for the prompt,
// every check_every-th step, each re-evaluated batch and the first step after
// making room; after every round of making room and at the end, kvrt's cell
// metadata (cells in use, pending shifts, each sequence's positions) against
// the mirror's, and that the cache's device memory stayed the same; and that
// the cache filled several times.
#include <algorithm>
#include <string>

#include "decode_run.hpp"

using namespace kvrt_test;
using namespace kvrt_test::decode;

namespace {

enum class Room { Shift, Reevaluate };

struct CellCase {
    Room room = Room::Shift;
    kvrt_type type = KVRT_TYPE_F16;
    uint32_t seqs = 1;
    uint32_t capacity = 64;
    uint32_t tokens = 192;      // decode steps per sequence
    uint32_t n_keep = 4;        // attention sinks kept when making room
    uint32_t check_every = 16;
};

class CellRun : public CacheRun {
public:
    CellRun(kvrt_context ctx, const CellCase& c) : CacheRun(ctx, c.type, c.seqs, c.capacity), c_(c) {}

    void run() {
        setup();
        prompt();
        decode();
        verify_metadata();
        check_.verify();
        // The cache filled several times.
        CHECK(rounds_ >= 3);
    }

private:
    void setup();
    void prompt();
    void decode();
    void make_room();
    void shift(int32_t n_keep, int32_t n_discard);
    void reevaluate(int32_t n_keep, int32_t n_discard);
    void verify_metadata();
    void placed(const TokenBatch& b, const std::vector<uint32_t>& cells) override;
    void stored(const AttentionIO& io, const TokenBatch& b, const std::vector<uint32_t>& cells) override;
    void checked_cells(std::vector<uint32_t>* cells, std::vector<uint32_t>* mirror_cells) const override;

    const CellCase c_;
    // Positions [0, shared_end_) are cells shared by every sequence (the
    // prompt, copied with kvrt_cache_seq_cp); 0 with a single sequence.
    int32_t shared_end_ = 0;
    uint32_t rounds_ = 0;      // rounds of making room
    uint64_t cache_bytes_ = 0;  // kvrt_cache_get_info's device bytes at creation
};

void CellRun::setup() {
    kvrt_rope_desc rope = model_rope();  // the model's RoPE, for kvrt's shifts
    kvrt_cache_desc d = cache_desc();
    d.capacity = c_.capacity;
    d.next = &rope;
    // The largest batch is the prompt or a re-evaluation, never above capacity.
    create(d, c_.capacity);
    cache_bytes_ = info().device_bytes;
}

void CellRun::prompt() {
    const TokenBatch b = prompt_batch(1);
    std::vector<float> logits;
    evaluate(b, true, "the prompt", &logits);
    for (uint32_t s = 1; s < c_.seqs; ++s) {
        KVRT_REQUIRE_OK(kvrt_cache_seq_cp(cache_, 0, static_cast<int32_t>(s), -1, -1));
        mirror_.seq_cp(0, static_cast<int>(s));
    }
    start_sequences(logits);
    shared_end_ = c_.seqs > 1 ? static_cast<int32_t>(b.size()) : 0;
}

void CellRun::decode() {
    bool made_room = false;
    for (uint32_t step = 0; step < c_.tokens; ++step) {
        // Make room until the step fits: with shared cells, one round may free
        // fewer cells than there are sequences.
        for (kvrt_cache_info i = info(); i.capacity - i.used < c_.seqs; i = info()) {
            make_room();
            made_room = true;
        }
        const bool check = made_room || (step + 1) % c_.check_every == 0;
        std::vector<float> logits;
        evaluate(step_batch(), check, "step " + std::to_string(step + 1), &logits);
        made_room = false;
        advance(logits);
    }
}

// Frees cells in every sequence: keeps the first n_keep positions and drops
// n_discard after them, half of the rest.
void CellRun::make_room() {
    const int32_t n_past = static_cast<int32_t>(seqs_[0].tokens.size());
    const int32_t n_keep = static_cast<int32_t>(c_.n_keep);
    // Cells shared by all sequences must leave all of them in the same round:
    // a shift moves a shared cell for every sequence that uses it (kvrt.h,
    // kvrt_cache_seq_add), and re-evaluated tokens become private copies. So
    // at least the shared positions past the sinks are discarded.
    const int32_t n_discard = std::max((n_past - n_keep) / 2, shared_end_ - n_keep);
    ++rounds_;
    INFO("round " << rounds_ << " of making room: n_past " << n_past << ", keep " << n_keep << ", discard "
                  << n_discard);
    if (c_.room == Room::Shift)
        shift(n_keep, n_discard);
    else
        reevaluate(n_keep, n_discard);
    shared_end_ = std::min(shared_end_, n_keep);
    verify_metadata();
}

// kvrt_cache_context_shift in every sequence, then the RoPE shift of the
// moved keys in a submission of its own.
void CellRun::shift(int32_t n_keep, int32_t n_discard) {
    for (uint32_t s = 0; s < c_.seqs; ++s) {
        const int32_t seq = static_cast<int32_t>(s);
        const int32_t n_past = static_cast<int32_t>(seqs_[s].tokens.size());
        int32_t new_past = -1;
        KVRT_REQUIRE_OK(kvrt_cache_context_shift(cache_, seq, n_keep, n_discard, &new_past));
        mirror_.seq_rm(seq, n_keep, n_keep + n_discard);
        mirror_.seq_add(seq, n_keep + n_discard, n_past, -n_discard);
        std::vector<int>& tokens = seqs_[s].tokens;
        tokens.erase(tokens.begin() + n_keep, tokens.begin() + n_keep + n_discard);
        INFO("sequence " << s);
        REQUIRE(new_past == static_cast<int32_t>(tokens.size()));
    }
    run_stream(stream_, [&] { KVRT_REQUIRE_OK(kvrt_cache_apply_shifts(cache_, stream_)); });
}

// kvrt_cache_discard_for_reevaluation in every sequence, then the tokens it
// names evaluated again at their new positions, as one checked batch.
void CellRun::reevaluate(int32_t n_keep, int32_t n_discard) {
    TokenBatch b;
    for (uint32_t s = 0; s < c_.seqs; ++s) {
        const int32_t seq = static_cast<int32_t>(s);
        const int32_t n_past = static_cast<int32_t>(seqs_[s].tokens.size());
        int32_t src = -1, dst = -1, count = -1;
        KVRT_REQUIRE_OK(kvrt_cache_discard_for_reevaluation(cache_, seq, n_keep, n_discard, &src, &dst, &count));
        mirror_.seq_rm(seq, n_keep, -1);
        INFO("sequence " << s << ": kvrt asks to move [" << src << ", " << src + count << ") to " << dst);
        REQUIRE(dst == n_keep);
        REQUIRE(src == n_keep + n_discard);
        REQUIRE(count == n_past - src);
        std::vector<int>& tokens = seqs_[s].tokens;
        for (int32_t i = 0; i < count; ++i) b.add(tokens[static_cast<size_t>(src + i)], static_cast<size_t>(dst + i), s);
        tokens.erase(tokens.begin() + dst, tokens.begin() + src);
    }
    std::vector<float> no_logits;
    if (b.size()) evaluate(b, true, "re-evaluation " + std::to_string(rounds_), &no_logits);
}

// kvrt's cell metadata against the mirror's.
void CellRun::verify_metadata() {
    const kvrt_cache_info i = info();
    REQUIRE(i.used == mirror_.used());
    REQUIRE(i.pending_shifts == 0);
    REQUIRE(i.device_bytes == cache_bytes_);
    for (uint32_t s = 0; s < c_.seqs; ++s) {
        const int32_t seq = static_cast<int32_t>(s);
        int32_t lo = -1, hi = -1;
        KVRT_REQUIRE_OK(kvrt_cache_seq_pos_min(cache_, seq, &lo));
        KVRT_REQUIRE_OK(kvrt_cache_seq_pos_max(cache_, seq, &hi));
        INFO("sequence " << s);
        REQUIRE(lo == mirror_.pos_min(seq));
        REQUIRE(hi == mirror_.pos_max(seq));
    }
}

void CellRun::placed(const TokenBatch& b, const std::vector<uint32_t>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) mirror_.place(cells[i], b.positions[i], b.seq_ids[i]);
}

void CellRun::stored(const AttentionIO& io, const TokenBatch&, const std::vector<uint32_t>& cells) {
    const size_t kvd = static_cast<size_t>(model_.config().kv_dim());
    for (size_t i = 0; i < cells.size(); ++i) mirror_.set_layer(cells[i], io.layer, io.k_raw + i * kvd, io.v + i * kvd);
}

void CellRun::checked_cells(std::vector<uint32_t>* cells, std::vector<uint32_t>* mirror_cells) const {
    *cells = mirror_.used_cells();
    *mirror_cells = *cells;
}

void run_case(Room room, kvrt_type type, uint32_t seqs = 1) {
    CellCase c;
    c.room = room;
    c.type = type;
    c.seqs = seqs;
    GpuContext ctx;
    CellRun run(ctx, c);
    run.run();
}

}  // namespace

TEST_CASE("decode: shift f16", "[decode]") { run_case(Room::Shift, KVRT_TYPE_F16); }
TEST_CASE("decode: shift q8_0", "[decode]") { run_case(Room::Shift, KVRT_TYPE_Q8_0); }
TEST_CASE("decode: shift q4_0", "[decode]") { run_case(Room::Shift, KVRT_TYPE_Q4_0); }
TEST_CASE("decode: shift f16, 2 sequences", "[decode]") { run_case(Room::Shift, KVRT_TYPE_F16, 2); }
TEST_CASE("decode: reevaluate f16", "[decode]") { run_case(Room::Reevaluate, KVRT_TYPE_F16); }
TEST_CASE("decode: reevaluate q8_0", "[decode]") { run_case(Room::Reevaluate, KVRT_TYPE_Q8_0); }
TEST_CASE("decode: reevaluate q4_0", "[decode]") { run_case(Room::Reevaluate, KVRT_TYPE_Q4_0); }
TEST_CASE("decode: reevaluate f16, 2 sequences", "[decode]") { run_case(Room::Reevaluate, KVRT_TYPE_F16, 2); }
