// The bad-input rows of the fixed-capacity memory's functions (see
// test_bad_input.cpp).
#include "test_bad_input.hpp"

#include <cmath>
#include <string>
#include <vector>

using namespace kvrt_test;

namespace kvrt_test::bad_input {

namespace {

// A call that would succeed: two tokens of sequence 0, all inputs host f32,
// `out` a host output; `tamper` changes one thing.
struct Batch {
    std::vector<float> x = std::vector<float>(2 * World::kMemHeads * World::kMemDim, 0.125f);
    std::vector<float> y = std::vector<float>(x.size(), 0.0f);
    int32_t seqs[2] = {0, 0};
    kvrt_tensor_ref wq = KVRT_TENSOR_REF_INIT, wv = KVRT_TENSOR_REF_INIT, q = KVRT_TENSOR_REF_INIT;
    kvrt_output_ref o = KVRT_OUTPUT_REF_INIT;
    kvrt_memory_batch batch = KVRT_MEMORY_BATCH_INIT;
    kvrt_stream stream = nullptr;

    Batch() {
        wq = wv = q = host_tensor(x.data());
        o = host_output(y.data());
        batch.n_tokens = 2;
        batch.seq_ids = seqs;
        batch.wq = &wq;
        batch.wv = &wv;
        batch.q = &q;
        batch.out = &o;
    }
    Batch(const Batch&) = delete;
    Batch& operator=(const Batch&) = delete;
};

using MemoryFn = kvrt_result (*)(kvrt_memory, kvrt_stream, const kvrt_memory_batch*);

}  // namespace

void add_memory_rows(World& w, std::vector<Row>* rows) {
    const Target N = Target::None, M = Target::Memory;
    const auto inv = KVRT_ERROR_INVALID_ARGUMENT;
    const auto hnd = KVRT_ERROR_INVALID_HANDLE;
    const auto state = KVRT_ERROR_INVALID_STATE;
    auto& r = *rows;
    static const Foreign foreign;

    // Descriptors: kvrt_memory_estimate_size and kvrt_memory_create.
    static kvrt_memory_init init = KVRT_MEMORY_INIT_INIT;
    const std::pair<std::string, std::function<void(World&, kvrt_memory_desc*)>> bad_descs[] = {
        {"desc->type -7", [](World&, kvrt_memory_desc* d) { d->type = bad_enum<kvrt_struct_type>(-7); }},
        {"a foreign struct chained", [](World&, kvrt_memory_desc* d) { d->next = &foreign; }},
        {"n_slots 0", [](World&, kvrt_memory_desc* d) { d->n_slots = 0; }},
        {"n_layers 0", [](World&, kvrt_memory_desc* d) { d->n_layers = 0; }},
        {"chunk_tokens 513", [](World&, kvrt_memory_desc* d) { d->chunk_tokens = 513; }},
        {"chunk_tokens UINT32_MAX", [](World&, kvrt_memory_desc* d) { d->chunk_tokens = kMaxU32; }},
        {"state_type -7", [](World&, kvrt_memory_desc* d) { d->state_type = bad_enum<kvrt_type>(-7); }},
        {"state_type 12345", [](World&, kvrt_memory_desc* d) { d->state_type = bad_enum<kvrt_type>(12345); }},
        {"state_type UNDEFINED", [](World&, kvrt_memory_desc* d) { d->state_type = KVRT_TYPE_UNDEFINED; }},
        {"state_type Q8_0", [](World&, kvrt_memory_desc* d) { d->state_type = KVRT_TYPE_Q8_0; }},
        {"every size UINT32_MAX: sizes overflow", [](World&, kvrt_memory_desc* d) {
             d->n_layers = d->n_heads = d->n_slots = d->key_dim = d->value_dim = d->max_seqs = kMaxU32;
         }},
        {"n_slots and key_dim 65536: a head exceeds the binding", [](World&, kvrt_memory_desc* d) {
             d->n_slots = 65536;
             d->key_dim = 65536;
         }},
        {"keys->type -7", [](World&, kvrt_memory_desc* d) {
             init = kvrt_memory_init KVRT_MEMORY_INIT_INIT;
             init.type = bad_enum<kvrt_struct_type>(-7);
             d->keys = &init;
         }},
        {"keys->source -7", [](World&, kvrt_memory_desc* d) {
             init = kvrt_memory_init KVRT_MEMORY_INIT_INIT;
             init.source = bad_enum<kvrt_memory_source>(-7);
             d->keys = &init;
         }},
        {"values->source 12345", [](World&, kvrt_memory_desc* d) {
             init = kvrt_memory_init KVRT_MEMORY_INIT_INIT;
             init.source = bad_enum<kvrt_memory_source>(12345);
             d->values = &init;
         }},
        {"keys->element_type -7", [](World&, kvrt_memory_desc* d) {
             init = kvrt_memory_init KVRT_MEMORY_INIT_INIT;
             init.source = KVRT_MEMORY_SOURCE_SEED;
             init.element_type = bad_enum<kvrt_type>(-7);
             d->keys = &init;
         }},
        {"keys source HOST with host NULL", [](World&, kvrt_memory_desc* d) {
             init = kvrt_memory_init KVRT_MEMORY_INIT_INIT;
             init.source = KVRT_MEMORY_SOURCE_HOST;
             d->keys = &init;
         }},
        {"keys source BUFFER with buffer NULL", [](World&, kvrt_memory_desc* d) {
             init = kvrt_memory_init KVRT_MEMORY_INIT_INIT;
             init.source = KVRT_MEMORY_SOURCE_BUFFER;
             d->keys = &init;
         }},
        {"keys buffer offset 2 (misaligned)", [](World& wd, kvrt_memory_desc* d) {
             init = kvrt_memory_init KVRT_MEMORY_INIT_INIT;
             init.source = KVRT_MEMORY_SOURCE_BUFFER;
             init.buffer = wd.buffer;
             init.offset = 2;
             d->keys = &init;
         }},
    };
    for (const auto& [what, tamper] : bad_descs) {
        const auto t = tamper;
        r.push_back(err("kvrt_memory_estimate_size", what, inv, N, [&w, t] {
            kvrt_memory_desc d = World::memory_desc();
            t(w, &d);
            kvrt_memory_estimate e = KVRT_MEMORY_ESTIMATE_INIT;
            return out(kvrt_memory_estimate_size(w.a, &d, &e));
        }));
    }
    // Rows that need the buffer handle: kvrt_memory_create only.
    const std::pair<std::string, std::function<void(World&, kvrt_memory_desc*)>> bad_buffer_descs[] = {
        {"keys buffer offset UINT64_MAX - 3", [](World& wd, kvrt_memory_desc* d) {
             init = kvrt_memory_init KVRT_MEMORY_INIT_INIT;
             init.source = KVRT_MEMORY_SOURCE_BUFFER;
             init.buffer = wd.buffer;
             init.offset = kMax64 - 3;
             d->keys = &init;
         }},
        {"keys buffer too small for the keys", [](World& wd, kvrt_memory_desc* d) {
             init = kvrt_memory_init KVRT_MEMORY_INIT_INIT;
             init.source = KVRT_MEMORY_SOURCE_BUFFER;
             init.buffer = wd.buffer;
             init.offset = World::kBufferBytes - 4;
             d->keys = &init;
         }},
        {"keys buffer of another context", [](World& wd, kvrt_memory_desc* d) {
             init = kvrt_memory_init KVRT_MEMORY_INIT_INIT;
             init.source = KVRT_MEMORY_SOURCE_BUFFER;
             init.buffer = wd.buffer_b;
             d->keys = &init;
         }},
    };
    const auto create = [&w](const std::function<void(World&, kvrt_memory_desc*)>& t) {
        return [&w, t] {
            kvrt_memory_desc d = World::memory_desc();
            t(w, &d);
            kvrt_memory m = reinterpret_cast<kvrt_memory>(&d);
            Outcome o = out(kvrt_memory_create(w.a, &d, &m));
            if (m) {
                if (m != reinterpret_cast<kvrt_memory>(&d)) kvrt_memory_destroy(m);
                if (o.r != KVRT_SUCCESS) o.r = KVRT_ERROR_INTERNAL;  // a handle despite the error
            }
            return o;
        };
    };
    for (const auto& [what, t] : bad_descs) r.push_back(err("kvrt_memory_create", what, inv, N, create(t)));
    for (const auto& [what, t] : bad_buffer_descs) r.push_back(err("kvrt_memory_create", what, inv, N, create(t)));
    for (const auto& [what, buf] : {std::pair<std::string, kvrt_buffer>{"keys buffer destroyed", w.dead_buffer},
                                    {"keys buffer: a stream cast to a buffer", reinterpret_cast<kvrt_buffer>(w.stream)}}) {
        const kvrt_buffer b = buf;
        r.push_back(err("kvrt_memory_create", what, hnd, N, create([b](World&, kvrt_memory_desc* d) {
                            init = kvrt_memory_init KVRT_MEMORY_INIT_INIT;
                            init.source = KVRT_MEMORY_SOURCE_BUFFER;
                            init.buffer = b;
                            d->keys = &init;
                        })));
    }
    r.push_back(err("kvrt_memory_estimate_size", "desc NULL", inv, N, [] {
        kvrt_memory_estimate e = KVRT_MEMORY_ESTIMATE_INIT;
        return out(kvrt_memory_estimate_size(nullptr, nullptr, &e));
    }));
    r.push_back(err("kvrt_memory_estimate_size", "out NULL", inv, N, [] {
        const kvrt_memory_desc d = World::memory_desc();
        return out(kvrt_memory_estimate_size(nullptr, &d, nullptr));
    }));
    r.push_back(err("kvrt_memory_estimate_size", "a destroyed context", hnd, N, [&w] {
        const kvrt_memory_desc d = World::memory_desc();
        kvrt_memory_estimate e = KVRT_MEMORY_ESTIMATE_INIT;
        return out(kvrt_memory_estimate_size(w.dead_context, &d, &e));
    }));
    r.push_back(err("kvrt_memory_create", "out_memory NULL", inv, N, [&w] {
        const kvrt_memory_desc d = World::memory_desc();
        return out(kvrt_memory_create(w.a, &d, nullptr));
    }));
    r.push_back(err("kvrt_memory_create", "desc NULL", inv, N, [&w] {
        kvrt_memory m = nullptr;
        return out(kvrt_memory_create(w.a, nullptr, &m));
    }));
    for (const auto& [what, ctx] : {std::pair<std::string, kvrt_context>{"context NULL", nullptr},
                                    {"a destroyed context", w.dead_context},
                                    {"a buffer cast to a context", reinterpret_cast<kvrt_context>(w.buffer)}}) {
        const kvrt_context c = ctx;
        r.push_back(err("kvrt_memory_create", what, hnd, N, [c] {
            const kvrt_memory_desc d = World::memory_desc();
            kvrt_memory m = nullptr;
            return out(kvrt_memory_create(c, &d, &m));
        }));
    }

    // Bad memory handles.
    const MemoryFn ops[] = {&kvrt_memory_update, &kvrt_memory_read, &kvrt_memory_update_read};
    const char* op_names[] = {"kvrt_memory_update", "kvrt_memory_read", "kvrt_memory_update_read"};
    for (const auto& [what, bad] : {std::pair<std::string, kvrt_memory>{"memory NULL", nullptr},
                                    {"a destroyed memory", w.dead_memory},
                                    {"a cache cast to a memory", reinterpret_cast<kvrt_memory>(w.cache.get())},
                                    {"a stream cast to a memory", reinterpret_cast<kvrt_memory>(w.stream)}}) {
        const kvrt_memory m = bad;
        r.push_back(noop("kvrt_memory_destroy", what, M, [m] {
            kvrt_memory_destroy(m);
            return Outcome{};
        }));
        for (size_t i = 0; i < 3; ++i) {
            const MemoryFn fn = ops[i];
            r.push_back(err(op_names[i], what, hnd, N, [m, fn] {
                Batch b;
                return out(fn(m, nullptr, &b.batch));
            }));
        }
        r.push_back(err("kvrt_memory_seq_rm", what, hnd, N, [m] { return out(kvrt_memory_seq_rm(m, nullptr, 0)); }));
        r.push_back(err("kvrt_memory_seq_cp", what, hnd, N, [m] { return out(kvrt_memory_seq_cp(m, nullptr, 0, 1)); }));
        r.push_back(err("kvrt_memory_get_state", what, hnd, N, [m] {
            std::vector<float> s(World::kMemHeads * World::kMemSlots * World::kMemDim);
            return out(kvrt_memory_get_state(m, 0, 0, s.data(), bytes_of(s)));
        }));
    }

    // Batches.
    const std::pair<std::string, std::function<void(World&, Batch&)>> bad_batches[] = {
        {"batch->type -7", [](World&, Batch& b) { b.batch.type = bad_enum<kvrt_struct_type>(-7); }},
        {"a foreign struct chained on batch", [](World&, Batch& b) { b.batch.next = &foreign; }},
        {"n_tokens 0", [](World&, Batch& b) { b.batch.n_tokens = 0; }},
        {"sequence INT32_MAX", [](World&, Batch& b) { b.seqs[1] = kMax32; }},
        {"sequence INT32_MIN", [](World&, Batch& b) { b.seqs[0] = kMin32; }},
        {"sequence -1", [](World&, Batch& b) { b.seqs[0] = -1; }},
        {"sequence 2 (max_seqs)", [](World&, Batch& b) { b.seqs[0] = 2; }},
        {"layer INT32_MIN", [](World&, Batch& b) { b.batch.layer = kMin32; }},
        {"layer 1 (n_layers)", [](World&, Batch& b) { b.batch.layer = 1; }},
        {"layer INT32_MAX", [](World&, Batch& b) { b.batch.layer = kMax32; }},
        {"stream of another context", [](World& wd, Batch& b) { b.stream = wd.stream_b; }},
    };
    // Inputs: each op reads some of wq, wv, q and out.
    struct Input {
        const char* name;
        bool update, read;
    };
    const Input inputs[] = {{"wq", true, false}, {"wv", true, false}, {"q", false, true}};
    const auto tensor = [](Batch& b, const char* name) -> kvrt_tensor_ref& {
        return std::string(name) == "wq" ? b.wq : std::string(name) == "wv" ? b.wv : b.q;
    };
    const auto unset = [](Batch& b, const char* name) {
        const std::string n = name;
        if (n == "wq") b.batch.wq = nullptr;
        if (n == "wv") b.batch.wv = nullptr;
        if (n == "q") b.batch.q = nullptr;
    };
    for (size_t i = 0; i < 3; ++i) {
        const MemoryFn fn = ops[i];
        const bool updates = i != 1, reads = i != 0;
        const auto row = [&w, fn](const std::function<void(World&, Batch&)>& t) {
            return [&w, fn, t] {
                Batch b;
                t(w, b);
                if (!b.stream) return out(fn(w.memory, nullptr, &b.batch));
                return while_recording(b.stream, [&] { return out(fn(w.memory, b.stream, &b.batch)); });
            };
        };
        for (const auto& [what, t] : bad_batches) r.push_back(err(op_names[i], what, inv, M, row(t)));
        r.push_back(err(op_names[i], "batch NULL", inv, M, [&w, fn] { return out(fn(w.memory, nullptr, nullptr)); }));
        r.push_back(err(op_names[i], "a stream that is not recording", state, M, [&w, fn] {
            Batch b;
            b.o = buffer_output(w.buffer, 0);
            return out(fn(w.memory, w.stream, &b.batch));
        }));
        r.push_back(err(op_names[i], "a destroyed stream", hnd, M, [&w, fn] {
            Batch b;
            return out(fn(w.memory, w.dead_stream, &b.batch));
        }));
        for (const Input& in : inputs) {
            if (!(in.update ? updates : reads)) continue;
            const std::string n = in.name;
            const char* name = in.name;
            const std::pair<std::string, std::function<void(World&, Batch&)>> bad_inputs[] = {
                {n + " missing", [unset, name](World&, Batch& b) { unset(b, name); }},
                {n + "->type -7", [tensor, name](World&, Batch& b) { tensor(b, name).type = bad_enum<kvrt_struct_type>(-7); }},
                {n + "->element_type -7", [tensor, name](World&, Batch& b) { tensor(b, name).element_type = bad_enum<kvrt_type>(-7); }},
                {n + "->element_type 12345", [tensor, name](World&, Batch& b) { tensor(b, name).element_type = bad_enum<kvrt_type>(12345); }},
                {n + "->element_type Q8_0", [tensor, name](World&, Batch& b) { tensor(b, name).element_type = KVRT_TYPE_Q8_0; }},
                {n + " row_stride UINT64_MAX - 3 (strided)", [tensor, name](World&, Batch& b) { tensor(b, name).row_stride = kMax64 - 3; }},
                {n + " host offset UINT64_MAX - 3", [tensor, name](World&, Batch& b) { tensor(b, name).offset = kMax64 - 3; }},
                {n + " with neither host nor buffer", [tensor, name](World&, Batch& b) { tensor(b, name).host = nullptr; }},
                {n + " with both host and buffer", [tensor, name](World& wd, Batch& b) { tensor(b, name).buffer = wd.buffer; }},
                {n + " buffer offset UINT64_MAX - 3", [tensor, name](World& wd, Batch& b) { tensor(b, name) = buffer_tensor(wd.buffer, kMax64 - 3); }},
                {n + " buffer offset at the end", [tensor, name](World& wd, Batch& b) { tensor(b, name) = buffer_tensor(wd.buffer, World::kBufferBytes - 4); }},
                {n + " buffer offset 2 (misaligned)", [tensor, name](World& wd, Batch& b) { tensor(b, name) = buffer_tensor(wd.buffer, 2); }},
                {n + " buffer of another context", [tensor, name](World& wd, Batch& b) { tensor(b, name) = buffer_tensor(wd.buffer_b, 0); }},
            };
            for (const auto& [what, t] : bad_inputs) r.push_back(err(op_names[i], what, inv, M, row(t)));
            r.push_back(err(op_names[i], n + " buffer destroyed", hnd, M, row([tensor, name](World& wd, Batch& b) {
                                tensor(b, name) = buffer_tensor(wd.dead_buffer, 0);
                            })));
        }
        if (reads) {
            const std::pair<std::string, std::function<void(World&, Batch&)>> bad_outputs[] = {
                {"out missing", [](World&, Batch& b) { b.batch.out = nullptr; }},
                {"out->type -7", [](World&, Batch& b) { b.o.type = bad_enum<kvrt_struct_type>(-7); }},
                {"out->element_type -7", [](World&, Batch& b) { b.o.element_type = bad_enum<kvrt_type>(-7); }},
                {"out->element_type Q4_0", [](World&, Batch& b) { b.o.element_type = KVRT_TYPE_Q4_0; }},
                {"out head_stride UINT64_MAX - 3 (strided)", [](World&, Batch& b) { b.o.head_stride = kMax64 - 3; }},
                {"out host offset UINT64_MAX - 3", [](World&, Batch& b) { b.o.offset = kMax64 - 3; }},
                {"out host with a stream", [](World& wd, Batch& b) { b.stream = wd.stream; }},
                {"out buffer offset UINT64_MAX - 3", [](World& wd, Batch& b) { b.o = buffer_output(wd.buffer, kMax64 - 3); }},
                {"out buffer of another context", [](World& wd, Batch& b) { b.o = buffer_output(wd.buffer_b, 0); }},
                {"scale NaN", [](World&, Batch& b) { b.batch.scale = NAN; }},
                {"scale infinite", [](World&, Batch& b) { b.batch.scale = INFINITY; }},
            };
            for (const auto& [what, t] : bad_outputs) r.push_back(err(op_names[i], what, inv, M, row(t)));
        }
    }

    // Sequence operations and the state.
    const std::pair<std::string, kvrt_stream> bad_streams[] = {{"a destroyed stream", w.dead_stream},
                                                               {"a buffer cast to a stream", reinterpret_cast<kvrt_stream>(w.buffer)}};
    for (const auto& [what, st] : bad_streams) {
        const kvrt_stream s = st;
        r.push_back(err("kvrt_memory_seq_rm", what, hnd, M, [&w, s] { return out(kvrt_memory_seq_rm(w.memory, s, 0)); }));
        r.push_back(err("kvrt_memory_seq_cp", what, hnd, M, [&w, s] { return out(kvrt_memory_seq_cp(w.memory, s, 0, 1)); }));
    }
    r.push_back(err("kvrt_memory_seq_rm", "stream of another context", inv, M, [&w] { return out(kvrt_memory_seq_rm(w.memory, w.stream_b, 0)); }));
    r.push_back(err("kvrt_memory_seq_cp", "stream of another context", inv, M, [&w] { return out(kvrt_memory_seq_cp(w.memory, w.stream_b, 0, 1)); }));
    r.push_back(err("kvrt_memory_seq_rm", "a stream that is not recording", state, M, [&w] { return out(kvrt_memory_seq_rm(w.memory, w.stream, 0)); }));
    r.push_back(err("kvrt_memory_seq_cp", "a stream that is not recording", state, M, [&w] { return out(kvrt_memory_seq_cp(w.memory, w.stream, 0, 1)); }));
    for (int32_t s : {2, kMax32}) {
        r.push_back(err("kvrt_memory_seq_rm", "sequence " + std::to_string(s), inv, M, [&w, s] { return out(kvrt_memory_seq_rm(w.memory, nullptr, s)); }));
    }
    for (int32_t s : {kMin32, -1, 2, kMax32}) {
        const std::string what = "sequence " + std::to_string(s);
        r.push_back(err("kvrt_memory_seq_cp", "src " + what, inv, M, [&w, s] { return out(kvrt_memory_seq_cp(w.memory, nullptr, s, 1)); }));
        r.push_back(err("kvrt_memory_seq_cp", "dst " + what, inv, M, [&w, s] { return out(kvrt_memory_seq_cp(w.memory, nullptr, 0, s)); }));
        r.push_back(err("kvrt_memory_get_state", what, inv, N, [&w, s] {
            std::vector<float> st(World::kMemHeads * World::kMemSlots * World::kMemDim);
            return out(kvrt_memory_get_state(w.memory, s, 0, st.data(), bytes_of(st)));
        }));
    }
    for (int32_t l : {kMin32, -1, 1, kMax32})
        r.push_back(err("kvrt_memory_get_state", "layer " + std::to_string(l), inv, N, [&w, l] {
            std::vector<float> st(World::kMemHeads * World::kMemSlots * World::kMemDim);
            return out(kvrt_memory_get_state(w.memory, 0, l, st.data(), bytes_of(st)));
        }));
    // The state of one layer is kMemHeads * kMemSlots * kMemDim floats; a
    // buffer short of it is refused and not written.
    const uint64_t state_bytes = uint64_t{World::kMemHeads} * World::kMemSlots * World::kMemDim * sizeof(float);
    for (uint64_t room : {uint64_t{0}, uint64_t{4}, state_bytes - 4})
        r.push_back(err("kvrt_memory_get_state",
                        "out_bytes " + std::to_string(room) + " (the state is " + std::to_string(state_bytes) + ")", inv,
                        N, [&w, room, state_bytes] {
                            std::vector<float> st(state_bytes / 4, 12345.0f);
                            Outcome o = out(kvrt_memory_get_state(w.memory, 0, 0, st.data(), room));
                            for (float x : st)
                                if (x != 12345.0f) o.r = KVRT_ERROR_INTERNAL;  // written
                            return o;
                        }));
    r.push_back(err("kvrt_memory_get_state", "out NULL", inv, N,
                    [&w] { return out(kvrt_memory_get_state(w.memory, 0, 0, nullptr, 0)); }));
}

}  // namespace kvrt_test::bad_input
