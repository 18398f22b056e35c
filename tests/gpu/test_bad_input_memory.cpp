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
    // The host output, 1.5 everywhere: a call that fails writes none of it.
    std::vector<float> y = std::vector<float>(x.size(), 1.5f);
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
    // Initial keys from host memory, 1 layer x 2 heads x 16 slots x 16.
    static const std::vector<float> host_keys(size_t{World::kMemHeads} * World::kMemSlots * World::kMemDim, 0.25f);
    const std::pair<std::string, std::function<void(World&, kvrt_memory_desc*)>> bad_descs[] = {
        {"desc->type -7", [](World&, kvrt_memory_desc* d) { d->type = bad_enum<kvrt_struct_type>(-7); }},
        {"desc->type BUFFER_DESC (another struct)", [](World&, kvrt_memory_desc* d) { d->type = KVRT_STRUCT_TYPE_BUFFER_DESC; }},
        {"key_dim 0", [](World&, kvrt_memory_desc* d) { d->key_dim = 0; }},
        {"n_heads 0", [](World&, kvrt_memory_desc* d) { d->n_heads = 0; }},
        {"n_slots and key_dim 2^31: sizes overflow", [](World&, kvrt_memory_desc* d) {
             d->n_slots = 0x80000000u;
             d->key_dim = 0x80000000u;
         }},
        {"n_layers, n_heads and max_seqs UINT32_MAX: the totals overflow", [](World&, kvrt_memory_desc* d) {
             d->n_layers = d->n_heads = d->max_seqs = kMaxU32;
         }},
        {"keys->type TENSOR_REF (another struct)", [](World&, kvrt_memory_desc* d) {
             init = kvrt_memory_init KVRT_MEMORY_INIT_INIT;
             init.type = KVRT_STRUCT_TYPE_TENSOR_REF;
             init.source = KVRT_MEMORY_SOURCE_SEED;
             d->keys = &init;
         }},
        {"values->type UNDEFINED", [](World&, kvrt_memory_desc* d) {
             init = kvrt_memory_init KVRT_MEMORY_INIT_INIT;
             init.type = KVRT_STRUCT_TYPE_UNDEFINED;
             d->values = &init;
         }},
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
        {"keys from host, element_type UNDEFINED", [](World&, kvrt_memory_desc* d) {
             init = kvrt_memory_init KVRT_MEMORY_INIT_INIT;
             init.source = KVRT_MEMORY_SOURCE_HOST;
             init.host = host_keys.data();
             init.element_type = KVRT_TYPE_UNDEFINED;
             d->keys = &init;
         }},
        {"keys from host, element_type Q4_0", [](World&, kvrt_memory_desc* d) {
             init = kvrt_memory_init KVRT_MEMORY_INIT_INIT;
             init.source = KVRT_MEMORY_SOURCE_HOST;
             init.host = host_keys.data();
             init.element_type = KVRT_TYPE_Q4_0;
             d->keys = &init;
         }},
        {"keys from host, element_type U8_STATIC", [](World&, kvrt_memory_desc* d) {
             init = kvrt_memory_init KVRT_MEMORY_INIT_INIT;
             init.source = KVRT_MEMORY_SOURCE_HOST;
             init.host = host_keys.data();
             init.element_type = KVRT_TYPE_U8_STATIC;
             d->keys = &init;
         }},
        {"keys from host, element_type 77", [](World&, kvrt_memory_desc* d) {
             init = kvrt_memory_init KVRT_MEMORY_INIT_INIT;
             init.source = KVRT_MEMORY_SOURCE_HOST;
             init.host = host_keys.data();
             init.element_type = bad_enum<kvrt_type>(77);
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
            // Without a context, then with one: the same error, nothing written.
            kvrt_memory_estimate e = KVRT_MEMORY_ESTIMATE_INIT;
            e.device_bytes = 7;
            const Outcome alone = out(kvrt_memory_estimate_size(nullptr, &d, &e));
            Outcome o = out(kvrt_memory_estimate_size(w.a, &d, &e));
            if (alone.r != o.r || alone.message.empty() || e.device_bytes != 7) o.r = KVRT_ERROR_INTERNAL;
            return o;
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
        // The values are 1 x 2 x 16 x 16 floats (2048 bytes).
        {"values buffer too small for the values", [](World& wd, kvrt_memory_desc* d) {
             init = kvrt_memory_init KVRT_MEMORY_INIT_INIT;
             init.source = KVRT_MEMORY_SOURCE_BUFFER;
             init.buffer = wd.buffer;
             init.offset = World::kBufferBytes - 1024;
             d->values = &init;
         }},
        {"values buffer of another context", [](World& wd, kvrt_memory_desc* d) {
             init = kvrt_memory_init KVRT_MEMORY_INIT_INIT;
             init.source = KVRT_MEMORY_SOURCE_BUFFER;
             init.buffer = wd.buffer_b;
             d->values = &init;
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
    r.push_back(err("kvrt_memory_estimate_size", "context: an address that is no handle", hnd, N, [] {
        const kvrt_memory_desc d = World::memory_desc();
        kvrt_memory_estimate e = KVRT_MEMORY_ESTIMATE_INIT;
        return out(kvrt_memory_estimate_size(reinterpret_cast<kvrt_context>(&e), &d, &e));
    }));
    r.push_back(err("kvrt_memory_estimate_size", "out->type CACHE_ESTIMATE (another struct)", inv, N, [] {
        const kvrt_memory_desc d = World::memory_desc();
        kvrt_memory_estimate e = KVRT_MEMORY_ESTIMATE_INIT;
        e.type = KVRT_STRUCT_TYPE_CACHE_ESTIMATE;
        return out(kvrt_memory_estimate_size(nullptr, &d, &e));
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
                                    {"a buffer cast to a context", reinterpret_cast<kvrt_context>(w.buffer)},
                                    {"an address that is no handle", reinterpret_cast<kvrt_context>(&w)}}) {
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
        {"batch->type UNDEFINED", [](World&, Batch& b) { b.batch.type = KVRT_STRUCT_TYPE_UNDEFINED; }},
        {"layer INT32_MIN", [](World&, Batch& b) { b.batch.layer = kMin32; }},
        {"layer -2", [](World&, Batch& b) { b.batch.layer = -2; }},
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
                Outcome o = !b.stream ? out(fn(w.memory, nullptr, &b.batch))
                                      : while_recording(b.stream, [&] { return out(fn(w.memory, b.stream, &b.batch)); });
                for (float y : b.y)
                    if (y != 1.5f) o.r = KVRT_ERROR_INTERNAL;  // the host output written
                return o;
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
                {n + "->element_type UNDEFINED", [tensor, name](World&, Batch& b) { tensor(b, name).element_type = KVRT_TYPE_UNDEFINED; }},
                {n + "->element_type U16_STATIC", [tensor, name](World&, Batch& b) { tensor(b, name).element_type = KVRT_TYPE_U16_STATIC; }},
                {n + "->type OUTPUT_REF (another struct)", [tensor, name](World&, Batch& b) { tensor(b, name).type = KVRT_STRUCT_TYPE_OUTPUT_REF; }},
                {n + " row_stride UINT64_MAX - 3 (strided)", [tensor, name](World&, Batch& b) { tensor(b, name).row_stride = kMax64 - 3; }},
                {n + " row_stride 4 (strided)", [tensor, name](World&, Batch& b) { tensor(b, name).row_stride = 4; }},
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
                {"out buffer too small (offset at the end)", [](World& wd, Batch& b) { b.o = buffer_output(wd.buffer, World::kBufferBytes - 4); }},
                {"out buffer offset 2 (misaligned)", [](World& wd, Batch& b) { b.o = buffer_output(wd.buffer, 2); }},
                {"out with both host and buffer", [](World& wd, Batch& b) { b.o.buffer = wd.buffer; }},
                {"scale NaN", [](World&, Batch& b) { b.batch.scale = NAN; }},
                {"scale infinite", [](World&, Batch& b) { b.batch.scale = INFINITY; }},
            };
            for (const auto& [what, t] : bad_outputs) r.push_back(err(op_names[i], what, inv, M, row(t)));
            r.push_back(err(op_names[i], "out buffer destroyed", hnd, M,
                            row([](World& wd, Batch& b) { b.o = buffer_output(wd.dead_buffer, 0); })));
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
    // Of another context and not recording: the context is checked first.
    r.push_back(err("kvrt_memory_update", "a stream of another context that is not recording", inv, M, [&w] {
        Batch b;
        b.o = buffer_output(w.buffer, 0);
        return out(kvrt_memory_update(w.memory, w.stream_b, &b.batch));
    }));
    r.push_back(err("kvrt_memory_seq_rm", "a recording stream of another context", inv, M, [&w] {
        return while_recording(w.stream_b, [&] { return out(kvrt_memory_seq_rm(w.memory, w.stream_b, 0)); });
    }));
    r.push_back(err("kvrt_memory_seq_cp", "a recording stream of another context", inv, M, [&w] {
        return while_recording(w.stream_b, [&] { return out(kvrt_memory_seq_cp(w.memory, w.stream_b, 0, 1)); });
    }));
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
