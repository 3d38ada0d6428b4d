// The cached torch call in C++: deepgemm.fast builds this once per machine (torch.utils.cpp_extension) and
// registers each plan it can run here. A call whose plan is registered reads its key off the tensors, points
// the plan's parameters at them and launches, all without Python; with inputs that need a gradient it records
// a C++ autograd node whose backward launches the two gradient GEMMs the same way. Everything else (a first
// call, a copy, a split-K launch whose stream has no scratch yet or is capturing a graph, a converted bias, an
// activation whose derivative needs z, a double backward) goes to the Python path, which is the reference:
// this file computes nothing that path does not.
//
// The driver is reached through dlsym on libcuda.so.1 (torch has loaded it), and the current stream and device
// through c10's device-generic interfaces, so nothing here needs CUDA's headers or links to CUDA.

#include <torch/extension.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <dlfcn.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace {

// --- the driver entry points, by name ------------------------------------------------------------------

using CUresult = int;
constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_INVALID_CONTEXT = 201;  // a thread that has not used the GPU yet

// CUlaunchAttribute and CUlaunchConfig as cuda.h lays them out (deepgemm/driver.py mirrors them with ctypes).
struct LaunchAttribute {
    unsigned id;
    char pad[4];
    int value;  // the first 4 bytes of a 64-byte union
    char rest[60];
};
struct LaunchConfig {
    unsigned grid[3], block[3], shared_mem;
    void* stream;
    LaunchAttribute* attrs;
    unsigned num_attrs;
};
constexpr unsigned PROGRAMMATIC_STREAM_SERIALIZATION = 6;  // programmatic dependent launch

struct Driver {
    CUresult (*launch)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                       void**);
    CUresult (*launch_ex)(const LaunchConfig*, void*, void**, void**);
    CUresult (*replace_address)(void*, void*);
    CUresult (*error_name)(CUresult, const char**);
    CUresult (*device_get)(int*, int);
    CUresult (*primary_ctx_retain)(void**, int);
    CUresult (*ctx_set_current)(void*);
    CUresult (*stream_is_capturing)(void*, int*);
};

template <typename F>
void bind(void* lib, const char* name, F& slot) {
    slot = reinterpret_cast<F>(dlsym(lib, name));
    TORCH_CHECK(slot != nullptr, "deepgemm's C++ call: libcuda.so.1 has no ", name);
}

const Driver& driver() {
    static const Driver found = [] {
        void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
        TORCH_CHECK(lib != nullptr, "deepgemm's C++ call: the CUDA driver (libcuda.so.1) is not installed here");
        Driver d{};
        bind(lib, "cuLaunchKernel", d.launch);
        bind(lib, "cuLaunchKernelEx", d.launch_ex);
        bind(lib, "cuTensorMapReplaceAddress", d.replace_address);
        bind(lib, "cuGetErrorName", d.error_name);
        bind(lib, "cuDeviceGet", d.device_get);
        bind(lib, "cuDevicePrimaryCtxRetain", d.primary_ctx_retain);
        bind(lib, "cuCtxSetCurrent", d.ctx_set_current);
        bind(lib, "cuStreamIsCapturing", d.stream_is_capturing);
        return d;
    }();
    return found;
}

void check(CUresult status, const char* what) {
    if (status == CUDA_SUCCESS) return;
    const char* name = nullptr;
    driver().error_name(status, &name);
    TORCH_CHECK(false, what, " failed with ", name ? name : "an unknown error", " (", status, ")");
}

// --- a plan, as the Python path registered it -----------------------------------------------------------

enum Kind : int64_t { MAP = 0, PTR = 1, F32 = 2 };  // how a parameter takes its value (deepgemm.fast.KINDS)
// Which value a parameter takes (deepgemm.fast.VALUES): an operand's, C's or the bias's address, alpha, or
// split-K's scratch (fp32 partials and counters, shared by the plans of one stream).
enum Value : int64_t { A = 0, B = 1, OUT = 2, BIAS = 3, ALPHA = 4, PARTIALS = 5, COUNTERS = 6 };

struct Write {
    Value value;
    Kind kind;
    size_t offset;       // into the parameter buffer
    uint64_t last = 0;   // the address a tensor map points at now (0: not yet pointed by this buffer)
};

struct Recipe {
    void* function = nullptr;
    unsigned grid = 0, block = 0, shared_mem = 0;
    bool programmatic = false;
    bool swap = false;  // the kernel's A is the caller's b (C^T = b^T a^T)
    int64_t rows = 0, cols = 0;
    int64_t partials_words = 0, counters_words = 0;  // split-K's scratch a launch needs (0: none)
    at::ScalarType out_dtype = at::kHalf;
    std::string name;
    std::vector<uint64_t> storage;  // the parameter bytes, 64-byte aligned within
    std::vector<void*> params;      // each parameter's address in storage
    std::vector<Write> writes;
    LaunchAttribute attribute{};
    LaunchConfig config{};
    std::mutex lock;  // one parameter buffer: from the first write to the launch, which copies it
};

// What fixes a launch, read off the tensors as the Python key reads it (deepgemm.api.plan_key), plus the
// activation and the output dtype as codes. Not keyed: requires_grad (the same plan serves both).
using Key = std::array<int64_t, 16>;

struct KeyHash {
    size_t operator()(const Key& key) const {
        size_t h = 1469598103934665603ull;
        for (int64_t v : key) h = (h ^ static_cast<size_t>(v)) * 1099511628211ull;
        return h;
    }
};

bool key_of(const at::Tensor& a, const at::Tensor& b, const c10::optional<at::Tensor>& bias, int64_t act,
            int64_t out_code, Key& key) {
    if (a.dim() != 2 || b.dim() != 2 || !a.is_cuda() || !b.is_cuda()) return false;
    const bool has_bias = bias.has_value() && bias->defined();
    if (has_bias && (bias->dim() != 1 || !bias->is_cuda())) return false;
    const auto as = a.strides(), bs = b.strides();
    const auto aligned = [](const at::Tensor& x) { return reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0; };
    key = {a.size(0), a.size(1), as[0], as[1], b.size(0), b.size(1), bs[0], bs[1],
           static_cast<int64_t>(a.scalar_type()) | static_cast<int64_t>(b.scalar_type()) << 8,
           a.get_device() | int64_t{b.get_device()} << 8 | int64_t{has_bias ? bias->get_device() : 255} << 16,
           int64_t{aligned(a)} | int64_t{aligned(b)} << 1,
           has_bias ? bias->size(0) : -1,
           has_bias ? bias->stride(0) : 0,
           has_bias ? static_cast<int64_t>(bias->scalar_type()) : -1,
           act,
           out_code};
    return true;
}

std::mutex recipes_lock;
std::unordered_map<Key, std::shared_ptr<Recipe>, KeyHash> recipes;
constexpr size_t MAX_RECIPES = 4096;  // a model has a few dozen; past this, new plans stay in Python
std::atomic<int64_t> hits{0}, misses{0};

std::shared_ptr<Recipe> find(const Key& key) {
    std::lock_guard<std::mutex> hold(recipes_lock);
    auto found = recipes.find(key);
    return found == recipes.end() ? nullptr : found->second;
}

// --- split-K's scratch, per stream, as deepgemm.plan made it (plan.ON_SCRATCH tells this file) -------------

struct Scratch {
    uint64_t partials = 0, counters = 0;
    int64_t partials_words = 0, counters_words = 0;
};

struct StreamKeyHash {
    size_t operator()(const std::pair<int64_t, uint64_t>& key) const {
        return std::hash<uint64_t>()(key.second) * 31 + static_cast<size_t>(key.first);
    }
};

std::mutex scratch_lock;
std::unordered_map<std::pair<int64_t, uint64_t>, Scratch, StreamKeyHash> scratches;  // (device, stream) ->

// --- the launch -----------------------------------------------------------------------------------------

// A call's launch as `prepare` found it: the plan, the stream, and split-K's scratch on that stream.
struct Launch {
    std::shared_ptr<Recipe> recipe;
    void* stream = nullptr;
    uint64_t partials = 0, counters = 0;
};

void* current_stream(const at::Tensor& a) {
    return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(a.device()).native_handle();
}

// The launch of a call with this key, or false where Python must make it: no plan here, or a split-K plan
// whose stream has no scratch large enough yet or is capturing a CUDA graph (a graph gets scratch of its own,
// deepgemm.plan.capture_scratch).
bool prepare(const Key& key, const at::Tensor& a, Launch& launch) {
    launch.recipe = find(key);
    if (!launch.recipe) return false;
    launch.stream = current_stream(a);
    const Recipe& r = *launch.recipe;
    if (r.partials_words == 0) return true;
    int capturing = 0;
    if (driver().stream_is_capturing(launch.stream, &capturing) != CUDA_SUCCESS || capturing != 0) return false;
    std::lock_guard<std::mutex> hold(scratch_lock);
    auto found = scratches.find({a.get_device(), reinterpret_cast<uint64_t>(launch.stream)});
    if (found == scratches.end()) return false;
    const Scratch& held = found->second;
    if (held.partials_words < r.partials_words || held.counters_words < r.counters_words) return false;
    launch.partials = held.partials;
    launch.counters = held.counters;
    return true;
}

uint64_t address(const at::Tensor& x) { return reinterpret_cast<uint64_t>(x.data_ptr()); }

void make_primary_context_current(int device) {
    int handle = 0;
    void* ctx = nullptr;
    check(driver().device_get(&handle, device), "cuDeviceGet");
    check(driver().primary_ctx_retain(&ctx, handle), "cuDevicePrimaryCtxRetain");
    check(driver().ctx_set_current(ctx), "cuCtxSetCurrent");
}

CUresult launch_on(Recipe& r, void* stream) {
    if (r.programmatic) {
        r.config.stream = stream;
        return driver().launch_ex(&r.config, r.function, r.params.data(), nullptr);
    }
    return driver().launch(r.function, r.grid, 1, 1, r.block, 1, 1, r.shared_mem, stream, r.params.data(), nullptr);
}

at::Tensor run(const Launch& launch, const at::Tensor& a, const at::Tensor& b,
               const c10::optional<at::Tensor>& bias, double alpha) {
    Recipe& r = *launch.recipe;
    const int device = a.get_device();
    c10::DeviceGuard guard(a.device());
    at::Tensor out = at::empty({r.rows, r.cols}, a.options().dtype(r.out_dtype));
    const uint64_t values[7] = {
        address(r.swap ? b : a), address(r.swap ? a : b), address(out),
        bias.has_value() && bias->defined() ? address(*bias) : 0, 0, launch.partials, launch.counters};
    void* stream = launch.stream;
    std::lock_guard<std::mutex> hold(r.lock);
    uint8_t* base = reinterpret_cast<uint8_t*>(r.params[0]);
    for (Write& w : r.writes) {
        uint8_t* slot = base + w.offset;
        if (w.value == ALPHA) {
            const float value = static_cast<float>(alpha);
            std::memcpy(slot, &value, sizeof value);
        } else if (w.kind == MAP) {
            const uint64_t target = values[w.value];
            if (w.last != target) {
                check(driver().replace_address(slot, reinterpret_cast<void*>(target)), "cuTensorMapReplaceAddress");
                w.last = target;
            }
        } else {
            std::memcpy(slot, &values[w.value], sizeof(uint64_t));
        }
    }
    CUresult status = launch_on(r, stream);
    if (status == CUDA_ERROR_INVALID_CONTEXT) {
        make_primary_context_current(device);
        status = launch_on(r, stream);
    }
    if (status != CUDA_SUCCESS) {
        const std::string what = "cuLaunchKernel of " + r.name;
        check(status, what.c_str());
    }
    return out;
}

// --- what goes back to Python: a first call of a key, and a backward that must itself be differentiable ---

py::object* python_launch = nullptr;    // deepgemm.fast.python_launch(a, b, alpha): the Python path
py::object* python_backward = nullptr;  // deepgemm.torch_ops.cpp_backward(...): torch_ops.backward's values
py::object* python_op = nullptr;        // deepgemm.torch_ops.cpp_op_kernel(...): the op's kernel in Python

// alpha * a @ b without bias or activation, in the inputs' dtype: here where the plan is registered, else
// through Python (which builds the plan, and registers it for the calls after this one).
at::Tensor product_or_python(const at::Tensor& a, const at::Tensor& b, double alpha) {
    Key key;
    Launch launch;
    if (key_of(a, b, c10::nullopt, 0, -1, key) && prepare(key, a, launch)) {
        ++hits;
        return run(launch, a, b, c10::nullopt, alpha);
    }
    ++misses;
    py::gil_scoped_acquire gil;
    return (*python_launch)(a, b, alpha).cast<at::Tensor>();
}

// alpha * left @ right; where `transpose`, computed as (right^T @ left^T)^T so that the gradient comes in its
// input's layout (deepgemm.torch_ops.product).
at::Tensor product(const at::Tensor& left, const at::Tensor& right, double alpha, bool transpose) {
    if (transpose) return product_or_python(right.t(), left.t(), alpha).t();
    return product_or_python(left, right, alpha);
}

bool transposed(const at::Tensor& x) {  // deepgemm.torch_ops.transposed
    return x.dim() == 2 && x.size(0) > 1 && x.size(1) > 1 && x.stride(0) == 1 && x.stride(1) == x.size(0);
}

constexpr int64_t ACT_NONE = 0, ACT_RELU = 1;  // deepgemm.epilogue.ACTIVATIONS

struct Gemm : public torch::autograd::Function<Gemm> {
    static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b,
                              const c10::optional<at::Tensor>& bias, double alpha, int64_t act, int64_t launch) {
        at::Tensor y = run(*reinterpret_cast<const Launch*>(launch), a, b, bias, alpha);
        const bool need_a = a.requires_grad(), need_b = b.requires_grad();
        ctx->save_for_backward({need_b ? a : at::Tensor(), need_a ? b : at::Tensor(),
                                act == ACT_RELU ? y : at::Tensor()});
        ctx->saved_data["alpha"] = alpha;
        ctx->saved_data["act"] = act;
        ctx->saved_data["kernel_dtype"] = static_cast<int64_t>(a.scalar_type());
        ctx->saved_data["transposed_a"] = need_a && transposed(a);
        ctx->saved_data["transposed_b"] = need_b && transposed(b);
        const bool has_bias = bias.has_value() && bias->defined();
        ctx->saved_data["bias_dtype"] = has_bias ? static_cast<int64_t>(bias->scalar_type()) : int64_t{-1};
        return y;
    }

    static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                   torch::autograd::variable_list grads) {
        const auto saved = ctx->get_saved_variables();
        const at::Tensor &a = saved[0], &b = saved[1], &y = saved[2];
        const double alpha = ctx->saved_data["alpha"].toDouble();
        const int64_t act = ctx->saved_data["act"].toInt();
        const int64_t bias_dtype = ctx->saved_data["bias_dtype"].toInt();
        const bool has_bias = bias_dtype >= 0;
        const bool need_a = ctx->needs_input_grad(0), need_b = ctx->needs_input_grad(1);
        const bool need_bias = has_bias && ctx->needs_input_grad(2);
        const bool transposed_a = ctx->saved_data["transposed_a"].toBool();
        const bool transposed_b = ctx->saved_data["transposed_b"].toBool();
        const auto kernel_dtype = static_cast<at::ScalarType>(ctx->saved_data["kernel_dtype"].toInt());
        at::Tensor da, db, dbias;
        if (torch::autograd::GradMode::is_enabled()) {  // create_graph: the Python backward records its own
            py::gil_scoped_acquire gil;
            auto found = (*python_backward)(grads[0], a, b, y, alpha, act, need_a, need_b, need_bias, transposed_a,
                                            transposed_b, bias_dtype).cast<py::tuple>();
            const auto tensor = [](py::handle x) { return x.is_none() ? at::Tensor() : x.cast<at::Tensor>(); };
            da = tensor(found[0]);
            db = tensor(found[1]);
            dbias = tensor(found[2]);
        } else {
            const at::Tensor dz = act == ACT_RELU ? at::threshold_backward(grads[0], y, 0) : grads[0];
            const at::Tensor dz_in = dz.scalar_type() == kernel_dtype ? dz : dz.to(kernel_dtype);
            if (need_a) da = product(dz_in, b.t(), alpha, transposed_a);
            if (need_b) db = product(a.t(), dz_in, alpha, transposed_b);
            if (need_bias) dbias = at::sum(dz, {0}, false, static_cast<at::ScalarType>(bias_dtype));
        }
        return {da, db, dbias, at::Tensor(), at::Tensor(), at::Tensor()};
    }
};

// --- the functions deepgemm.fast calls ------------------------------------------------------------------

// deepgemm.gemm's eager call, where its plan is registered: the result, else None. Where autograd would
// record the call (grad mode on, an input that requires grad), the result carries a Gemm node; a result that
// would need a gradient this file does not compute (an activation whose derivative needs z) is None: the
// Python path records it.
c10::optional<at::Tensor> call(const at::Tensor& a, const at::Tensor& b, const c10::optional<at::Tensor>& bias,
                               double alpha, int64_t act, int64_t out_code) {
    Key key;
    if (!key_of(a, b, bias, act, out_code, key)) return c10::nullopt;
    const bool grad = torch::autograd::GradMode::is_enabled() &&
                      (a.requires_grad() || b.requires_grad() || (bias.has_value() && bias->requires_grad()));
    if (grad && act != ACT_NONE && act != ACT_RELU) return c10::nullopt;
    Launch launch;
    if (!prepare(key, a, launch)) {
        ++misses;
        return c10::nullopt;
    }
    ++hits;
    if (!grad) return run(launch, a, b, bias, alpha);
    return Gemm::apply(a, b, bias, alpha, act, reinterpret_cast<int64_t>(&launch));
}

// A plan of the Python path, for the calls whose tensors give the same key as these. `writes` is
// (value, kind, offset) per parameter a call writes; `parameters` the buffer's bytes, `offsets` each
// parameter's place in it.
bool register_plan(const at::Tensor& a, const at::Tensor& b, const c10::optional<at::Tensor>& bias, int64_t act,
                   int64_t out_code, int64_t function, int64_t grid, int64_t block, int64_t shared_mem,
                   bool programmatic, bool swap, int64_t rows, int64_t cols, int64_t out_dtype,
                   int64_t partials_words, int64_t counters_words, std::string name,
                   const std::string& parameters, const std::vector<int64_t>& offsets,
                   const std::vector<std::array<int64_t, 3>>& writes) {
    Key key;
    TORCH_CHECK(key_of(a, b, bias, act, out_code, key), "register_plan: not a call this path runs");
    TORCH_CHECK(!offsets.empty(), "register_plan: a kernel without parameters");
    auto r = std::make_shared<Recipe>();
    r->function = reinterpret_cast<void*>(function);
    r->grid = static_cast<unsigned>(grid);
    r->block = static_cast<unsigned>(block);
    r->shared_mem = static_cast<unsigned>(shared_mem);
    r->programmatic = programmatic;
    r->swap = swap;
    r->rows = rows;
    r->cols = cols;
    r->out_dtype = static_cast<at::ScalarType>(out_dtype);
    r->partials_words = partials_words;
    r->counters_words = counters_words;
    r->name = std::move(name);
    r->storage.assign(parameters.size() / 8 + 16, 0);  // room to align the start to 64 bytes
    uint8_t* base = reinterpret_cast<uint8_t*>(r->storage.data());
    base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
    std::memcpy(base, parameters.data(), parameters.size());
    for (int64_t offset : offsets) {
        TORCH_CHECK(offset >= 0 && static_cast<size_t>(offset) < parameters.size(), "register_plan: offset");
        r->params.push_back(base + offset);
    }
    TORCH_CHECK(offsets[0] == 0, "register_plan: the first parameter starts the buffer");
    for (const auto& w : writes) {
        TORCH_CHECK(w[0] >= A && w[0] <= COUNTERS && w[1] >= MAP && w[1] <= F32, "register_plan: a write");
        r->writes.push_back({static_cast<Value>(w[0]), static_cast<Kind>(w[1]), static_cast<size_t>(w[2])});
    }
    r->attribute.id = PROGRAMMATIC_STREAM_SERIALIZATION;
    r->attribute.value = 1;
    r->config = {{r->grid, 1, 1}, {r->block, 1, 1}, r->shared_mem, nullptr, &r->attribute, 1};
    std::lock_guard<std::mutex> hold(recipes_lock);
    if (recipes.size() >= MAX_RECIPES && !recipes.count(key)) return false;
    recipes[key] = std::move(r);
    return true;
}

// The scratch deepgemm.plan made (or regrew) for split-K launches on `stream` of `device`.
void set_scratch(int64_t device, int64_t stream, int64_t partials, int64_t partials_words, int64_t counters,
                 int64_t counters_words) {
    std::lock_guard<std::mutex> hold(scratch_lock);
    scratches[{device, static_cast<uint64_t>(stream)}] = {static_cast<uint64_t>(partials),
                                                          static_cast<uint64_t>(counters), partials_words,
                                                          counters_words};
}

void set_python_paths(py::object launch, py::object backward, py::object op) {
    python_launch = new py::object(std::move(launch));  // kept for the process: the autograd thread calls them
    python_backward = new py::object(std::move(backward));
    python_op = new py::object(std::move(op));
}

// --- torch.ops.deepgemm.gemm's CUDA kernel (what torch.compile's graphs call) --------------------------------

int64_t activation_code(const c10::optional<c10::string_view>& activation) {  // deepgemm.fast.ACT_CODES
    if (!activation.has_value()) return 0;
    static const std::pair<c10::string_view, int64_t> codes[] = {
        {"none", 0}, {"relu", 1}, {"gelu_tanh", 2}, {"gelu_erf", 3}, {"gelu", 3}, {"silu", 4}};
    for (const auto& [name, code] : codes)
        if (*activation == name) return code;
    return -1;
}

// The op below autograd: from C++ where the call's plan is registered here, else the op's Python kernel
// (torch_ops._gemm_kernel, which builds the plan, or names what is wrong). Registered for CUDA tensors; the
// Python kernel serves the rest (CompositeExplicitAutograd), so CUDA's falls back to it.
at::Tensor gemm_op_cuda(const at::Tensor& a, const at::Tensor& b, const c10::optional<at::Tensor>& bias,
                        double alpha, c10::optional<c10::string_view> activation,
                        c10::optional<at::ScalarType> out_dtype, c10::optional<c10::string_view> config) {
    const int64_t act = activation_code(activation);
    const int64_t out_code = out_dtype.has_value() ? static_cast<int64_t>(*out_dtype) : -1;
    Key key;
    Launch launch;
    if (!config.has_value() && act >= 0 && key_of(a, b, bias, act, out_code, key) && prepare(key, a, launch)) {
        ++hits;
        return run(launch, a, b, bias, alpha);
    }
    ++misses;
    py::gil_scoped_acquire gil;
    const auto text = [](const c10::optional<c10::string_view>& x) -> py::object {
        return x.has_value() ? py::object(py::str(x->data(), x->size())) : py::object(py::none());
    };
    return (*python_op)(a, b, bias, alpha, text(activation), out_code, text(config)).cast<at::Tensor>();
}

py::dict stats() {
    py::dict found;
    found["hits"] = hits.load();
    found["misses"] = misses.load();
    std::lock_guard<std::mutex> hold(recipes_lock);
    found["plans"] = recipes.size();
    return found;
}

void clear() {
    std::lock_guard<std::mutex> hold(recipes_lock);
    recipes.clear();
    hits = 0;
    misses = 0;
}

}  // namespace

TORCH_LIBRARY_IMPL(deepgemm, CUDA, m) { m.impl("gemm", TORCH_FN(gemm_op_cuda)); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("call", &call);
    m.def("register_plan", &register_plan);
    m.def("set_python_paths", &set_python_paths);
    m.def("set_scratch", &set_scratch);
    m.def("stats", &stats);
    m.def("clear", &clear);
}
