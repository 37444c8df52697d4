// The op table itself: every op is declared once with a kernel for each built backend, kernels resolve per
// device at enqueue (a missing one raises there, naming the op and the device), and attributes are typed.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "dygrad/ops/dispatch.h"
#include "dygrad/runtime/cpu_isa.h"
#include "dygrad/runtime/device_plugins.h"
#include "dygrad/runtime/devices.h"
#include "dygrad/runtime/op_attrs.h"
#include "harness.h"

namespace dg::test {
namespace {

// A CUDA "device" whose memory is host memory: lets a test make tensors of a device that has no backend.
struct HostMemoryAsCuda final : Allocator {
  MemoryBlock allocate(size_t nbytes, MemoryCategory, bool) override { return {std::malloc(nbytes ? nbytes : 1), nbytes}; }
  void free(MemoryBlock block, size_t, MemoryCategory, uint64_t) override { std::free(block.ptr); }
  void retag(const MemoryBlock&, size_t, MemoryCategory, MemoryCategory) override {}
};
Device fake_cuda() {
  static HostMemoryAsCuda allocator;
  register_allocator(Device::Type::CUDA, &allocator);
  return Device{Device::Type::CUDA, 0};
}

struct ProbeAttrs {
  static constexpr const char* kName = "ProbeAttrs";
  int64_t value = 0;
  DG_ATTRS_FIELDS(value);
};
void probe_kernel(Task& task) { task.outputs[0].data<int64_t>()[0] = task.attrs.get<ProbeAttrs>().value; }
const OpDef op_test_attrs_probe("test_attrs_probe", attrs_type<ProbeAttrs>());
DG_REGISTER_KERNEL(test_attrs_probe, Device::Type::CPU, probe_kernel);
// A second device's kernel for the same op (the test device, which otherwise runs the CPU's): the stream of the
// operands' device runs the kernel of that device.
void probe_kernel_second_device(Task& task) { task.outputs[0].data<int64_t>()[0] = 1000 + task.attrs.get<ProbeAttrs>().value; }
DG_REGISTER_KERNEL(test_attrs_probe, Device::Type::Test, probe_kernel_second_device);
// Declared with alias_each_output: its Task must list output 0 as input 0.
void accumulate_kernel(Task& task) { task.outputs[0].data<int64_t>()[0] += 1; }
const OpDef op_test_inplace("test_inplace", nullptr, {.alias_of = alias_each_output});
DG_REGISTER_KERNEL(test_inplace, Device::Type::CPU, accumulate_kernel);
// No kernel on any device.
const OpDef op_test_no_kernel("test_no_kernel", nullptr);
// No outputs and no declared side effect: nothing would keep such a Task.
void no_output_kernel(Task&) {}
const OpDef op_test_no_output("test_no_output", nullptr);
DG_REGISTER_KERNEL(test_no_output, Device::Type::CPU, no_output_kernel);
// Kernels of two ISA levels for one op (the AVX-512 plugin's and the library's): the higher level wins whichever
// registers first, and whether the OpDef exists yet or not.
void isa_kernel_baseline(Task&) {}
void isa_kernel_avx512(Task&) {}
[[maybe_unused]] const bool isa_high_first =
    (register_kernel("test_isa_high_first", Device::Type::CPU, isa_kernel_avx512, kKernelIsaAvx512),
     register_kernel("test_isa_high_first", Device::Type::CPU, isa_kernel_baseline, kKernelIsaBaseline), true);
const OpDef op_test_isa_high_first("test_isa_high_first", nullptr);
const OpDef op_test_isa_low_first("test_isa_low_first", nullptr);
[[maybe_unused]] const bool isa_low_first =
    (register_kernel("test_isa_low_first", Device::Type::CPU, isa_kernel_baseline, kKernelIsaBaseline),
     register_kernel("test_isa_low_first", Device::Type::CPU, isa_kernel_avx512, kKernelIsaAvx512), true);

}  // namespace

TEST(OpTable, EveryOpIsDeclaredOnceAndHasACpuKernel) {
  std::set<std::string> names;
  for (const OpDef* op : all_ops()) {
    EXPECT_TRUE(names.insert(op->name).second) << op->name << " is declared twice";
    if (op != &op_test_no_kernel) {
      EXPECT_NE(op->kernel(Device::Type::CPU), nullptr) << op->name;
    }
  }
  EXPECT_GT(names.size(), size_t{90});
  EXPECT_TRUE(backend_built(Device::Type::CPU));
  EXPECT_EQ(backend_built(Device::Type::CUDA), cuda_plugin_status() == "loaded") << cuda_plugin_status();
}

TEST(OpTable, EveryRegisteredKernelMatchesAnOp) {
  for (const std::string& problem : kernel_registry_problems()) ADD_FAILURE() << problem;
}

TEST(OpTable, TheKernelOfTheHighestIsaLevelWinsWhateverTheOrder) {
  for (const OpDef* op : {&op_test_isa_high_first, &op_test_isa_low_first}) {
    EXPECT_EQ(op->kernel(Device::Type::CPU), &isa_kernel_avx512) << op->name;
    EXPECT_EQ(op->kernel_isa(Device::Type::CPU), kKernelIsaAvx512) << op->name;
  }
}

TEST(OpTable, EveryCpuKernelComesFromTheIsaTheLibraryChose) {
  // With a plugin loaded every CPU backend kernel is that plugin's; with the baseline kernels, none is.
  // (The test's own ops, the communication Tasks, whose kernels live with the process groups in
  // distributed/comm.cpp, and dygrad.jit's replay and segment Tasks, whose kernels run other kernels (jit/graph.cpp),
  // are not the backend's.)
  const std::string isa = cpu_kernel_isa();
  const int want = isa == "avx512" ? kKernelIsaAvx512 : isa == "avx2" ? kKernelIsaAvx2 : kKernelIsaBaseline;
  for (const OpDef* op : all_ops()) {
    if (std::strncmp(op->name, "test_", 5) == 0 || std::strncmp(op->name, "comm_", 5) == 0 ||
        std::strncmp(op->name, "jit_", 4) == 0 ||
        !op->kernel(Device::Type::CPU))
      continue;
    EXPECT_EQ(op->kernel_isa(Device::Type::CPU), want) << op->name << " (kernels: " << cpu_kernel_isa() << ", "
                                                       << cpu_kernel_isa_note() << ")";
  }
}

TEST(OpTable, MissingKernelRaisesAtTheCallNamingOpAndDevice) {
  // matmul: an op without a CUDA kernel whether or not the CUDA plugin is built (docs/cuda.md).
  Tensor a = Tensor::empty(Shape{2, 2}, DType::Float32, fake_cuda());
  Tensor b = Tensor::empty(Shape{2, 2}, DType::Float32, fake_cuda());
  try {
    (void)matmul(a, b);  // the op allocates its output on the CPU: refused as a mix of devices, or as no kernel
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[matmul]"), std::string::npos) << e.what();
  }
  try {
    Tensor out = Tensor::empty(Shape{2, 2}, DType::Float32, fake_cuda());
    enqueue(*find_op("matmul"), {a, b}, {out});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::NotImplemented);
    const char* want = backend_built(Device::Type::CUDA)
                           ? "[matmul] has no kernel for device cuda:0 (the cuda backend does not implement it)"
                           : "[matmul] no kernel for device cuda:0: dygrad was built without the cuda backend";
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
  Tensor out = Tensor::empty(Shape{1}, DType::Int64);
  try {
    enqueue(op_test_no_kernel, {}, {out});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::NotImplemented);
    EXPECT_NE(std::string(e.what()).find("[test_no_kernel] has no kernel for device cpu"), std::string::npos) << e.what();
  }
}

TEST(OpTable, NoAllocatorForABackendThatIsNotBuilt) {
  register_allocator(Device::Type::CUDA, nullptr);  // as in a build without the CUDA backend
  try {
    (void)Tensor::empty(Shape{1}, DType::Float32, Device{Device::Type::CUDA, 0});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::NotImplemented);
    EXPECT_NE(std::string(e.what()).find("[alloc] no allocator for device cuda:0"), std::string::npos) << e.what();
  }
}

TEST(OpTable, TheKernelOfTheOperandsDeviceRuns) {
  enable_devices(Device::Type::Test, 1);
  const Device test0{Device::Type::Test, 0};
  Tensor on_cpu = Tensor::empty(Shape{1}, DType::Int64), on_second = Tensor::empty(Shape{1}, DType::Int64, test0);
  enqueue(op_test_attrs_probe, {}, {on_cpu}, ProbeAttrs{7});
  enqueue(op_test_attrs_probe, {}, {on_second}, ProbeAttrs{7});
  EXPECT_EQ(on_cpu.to_vector<int64_t>()[0], 7);
  EXPECT_EQ(on_second.to_vector<int64_t>()[0], 1007);  // read through a copy to the host
  // Operands on two devices are refused before anything runs.
  EXPECT_THROW(enqueue(op_test_attrs_probe, {on_cpu}, {on_second}, ProbeAttrs{1}), Error);
}

TEST(OpTable, AttributesAreReadBackByTheirType) {
  Tensor out = Tensor::empty(Shape{1}, DType::Int64);
  enqueue(op_test_attrs_probe, {}, {out}, ProbeAttrs{42});
  EXPECT_EQ(out.item<int64_t>(), 42);
  // An enqueue with another attribute type is refused at the call.
  EXPECT_THROW(enqueue(op_test_attrs_probe, {}, {out}, DimAttrs{1}), Error);
  EXPECT_THROW(enqueue(op_test_attrs_probe, {}, {out}), Error);
  // Reading an Attrs as the wrong type raises instead of reinterpreting bytes.
  const Attrs attrs = ReduceAttrs{Dims{0, 2}};
  EXPECT_EQ(attrs.get<ReduceAttrs>().dims.size(), size_t{2});
  EXPECT_THROW((void)attrs.get<DimAttrs>(), Error);
  // Copies own their Dims (no shared heap buffer).
  Attrs copy = attrs;
  copy.get<ReduceAttrs>().dims.push_back(5);
  EXPECT_EQ(attrs.get<ReduceAttrs>().dims.size(), size_t{2});
  EXPECT_EQ(copy.get<ReduceAttrs>().dims.size(), size_t{3});
}

// Every attribute struct of the table is a value: default-constructed, it equals itself and a copy, hashes as the
// copy does, prints its name and each declared field, and its visitor reaches every field of the declaration.
TEST(OpTable, EveryOpsAttributesAreValues) {
  std::set<std::string> seen;
  for (const OpDef* op : all_ops()) {
    const AttrsType* type = op->attrs_type;
    if (!type || !seen.insert(type->name).second) continue;
    SCOPED_TRACE(std::string(op->name) + ": " + type->name);
    ASSERT_TRUE(type->fields && *type->fields);
    ASSERT_TRUE(type->equal && type->hash && type->print && type->visit && type->make_default);
    alignas(std::max_align_t) unsigned char a[Attrs::kCapacity], b[Attrs::kCapacity];
    type->make_default(a);
    type->make_default(b);
    EXPECT_TRUE(type->equal(a, b));
    EXPECT_EQ(type->hash(a), type->hash(b));
    std::string text;
    type->print(a, text);
    EXPECT_EQ(text.rfind(std::string(type->name) + "{", 0), size_t{0}) << text;
    std::string_view list = type->fields;
    size_t declared = 0;
    while (!list.empty()) {
      const std::string_view name = attrs_detail::next_name(list);
      const bool shown = text.find(std::string(name) + "=") != std::string::npos ||  // a leaf, or a nested struct's
                         text.find(std::string(name) + ".") != std::string::npos;    // fields (rng.seed=...)
      EXPECT_TRUE(shown) << name << " missing from " << text;
      ++declared;
    }
    size_t visited = 0;
    type->visit(a, &visited, [](void* c, const AttrField&) { ++*static_cast<size_t*>(c); });
    EXPECT_GE(visited, declared);
    if (type->destroy) {
      type->destroy(a);
      type->destroy(b);
    }
  }
  EXPECT_GT(seen.size(), size_t{25});
}

// The RNG trait: an op consumes RNG counters (kOpRandom) exactly when its attributes carry an RngCounter, which
// Attrs::rng() reaches without knowing the struct (a replay re-reserves counters through it).
TEST(OpTable, RandomOpsAndOnlyThemCarryAnRngCounter) {
  size_t random_ops = 0;
  for (const OpDef* op : all_ops()) {
    SCOPED_TRACE(op->name);
    const bool carries = op->attrs_type && op->attrs_type->rng;
    EXPECT_EQ(carries, (op->flags & kOpRandom) != 0);
    random_ops += carries;
  }
  EXPECT_GE(random_ops, size_t{6});  // rand, randn, randint, bernoulli_mask, bernoulli, multinomial
  Attrs attrs = MultinomialAttrs{RngCounter{7, 3}, 2, true};
  ASSERT_NE(attrs.rng(), nullptr);
  EXPECT_EQ(attrs.rng()->seed, 7u);
  attrs.rng()->offset = 11;
  EXPECT_EQ(attrs.get<MultinomialAttrs>().rng.offset, 11u);
  EXPECT_EQ(attrs.get<MultinomialAttrs>().num_samples, 2);
  EXPECT_EQ(Attrs(DimAttrs{1}).rng(), nullptr);
  EXPECT_EQ(Attrs().rng(), nullptr);
}

TEST(OpTable, AttributeEqualityHashingAndPrinting) {
  // Scalars compare by kind and bits: alpha 2 (an int) is not alpha 2.0, and -0.0 is not 0.0; a nan equals itself.
  EXPECT_EQ(Attrs(AddAttrs{2}), Attrs(AddAttrs{2}));
  EXPECT_NE(Attrs(AddAttrs{2}), Attrs(AddAttrs{2.0}));
  EXPECT_NE(Attrs(AddAttrs{0.0}), Attrs(AddAttrs{-0.0}));
  EXPECT_EQ(Attrs(AddAttrs{std::nan("")}), Attrs(AddAttrs{std::nan("")}));
  EXPECT_EQ(Attrs(AddAttrs{2}).hash(), Attrs(AddAttrs{2}).hash());
  EXPECT_NE(Attrs(AddAttrs{2}).hash(), Attrs(AddAttrs{3}).hash());
  // Dims by value; doubles by bits; every field takes part
  EXPECT_EQ(Attrs(ReduceAttrs{Dims{0, 2}}), Attrs(ReduceAttrs{Dims{0, 2}}));
  EXPECT_NE(Attrs(ReduceAttrs{Dims{0, 2}}), Attrs(ReduceAttrs{Dims{0, 1}}));
  EXPECT_NE(Attrs(ReduceAttrs{Dims{0, 2}}).hash(), Attrs(ReduceAttrs{Dims{0, 1}}).hash());
  RotaryAttentionAttrs attention;
  RotaryAttentionAttrs other = attention;
  EXPECT_EQ(Attrs(attention), Attrs(other));
  other.rotate_half = true;
  EXPECT_NE(Attrs(attention), Attrs(other));
  other = attention;
  other.scale = 0.125;
  EXPECT_NE(Attrs(attention), Attrs(other));
  // Two structs with equal bytes are different attributes; no attributes equal no attributes
  EXPECT_NE(Attrs(DimAttrs{1}), Attrs(EmbeddingBackwardAttrs{1}));
  EXPECT_EQ(Attrs(), Attrs());
  EXPECT_NE(Attrs(), Attrs(DimAttrs{0}));
  // Printing: enums by name, nested structs flattened, floats exactly
  EXPECT_EQ(Attrs(NllLossAttrs{-100, LossReduction::Sum, true}).to_string(),
            "NllLossAttrs{ignore_index=-100, reduction=sum, weighted=true}");
  EXPECT_EQ(Attrs(RandintAttrs{RngCounter{7, 3}, 0, 10}).to_string(),
            "RandintAttrs{rng.seed=7, rng.offset=3, low=0, high=10}");
  EXPECT_EQ(Attrs(ReduceAttrs{Dims{0, 2}}).to_string(), "ReduceAttrs{dims=[0, 2]}");
  EXPECT_EQ(Attrs(GradNormAttrs{0.1}).to_string(), "GradNormAttrs{norm_type=0.10000000000000001}");
  EXPECT_EQ(Attrs().to_string(), "{}");
  // The visitor: kinds and values of each leaf
  struct Seen {
    std::vector<std::string> names;
    std::vector<AttrField::Kind> kinds;
  } seen;
  Attrs(AttentionAttrs{0.125, true, AttentionMask::Additive}).visit(&seen, [](void* c, const AttrField& f) {
    auto& s = *static_cast<Seen*>(c);
    s.names.emplace_back(f.name);
    s.kinds.push_back(f.kind);
    if (f.name == "scale") {
      EXPECT_EQ(f.f, 0.125);
    }
    if (f.name == "mask") {
      EXPECT_STREQ(f.text, "additive");
    }
  });
  EXPECT_EQ(seen.names, (std::vector<std::string>{"scale", "is_causal", "mask"}));
  EXPECT_EQ(seen.kinds, (std::vector<AttrField::Kind>{AttrField::Kind::Float, AttrField::Kind::Bool,
                                                       AttrField::Kind::Enum}));
}

TEST(OpTable, InplaceOpsMustUpdateTheirInputs) {
  Tensor acc = zeros(Shape{1}, {DType::Int64});
  enqueue(op_test_inplace, {acc}, {acc});
  EXPECT_EQ(acc.item<int64_t>(), 1);
  Tensor other = zeros(Shape{1}, {DType::Int64});
  EXPECT_THROW(enqueue(op_test_inplace, {other}, {acc}), Error);
  EXPECT_THROW(enqueue(op_test_inplace, {}, {acc}), Error);
  // The table's own in-place ops: scatter_add_ and index_put_ accumulate into input 0.
  for (const OpDef* op : all_ops())
    if (op->alias_of) {
      EXPECT_NE(std::string(op->name), "add") << "elementwise in-place forms are not flagged";
    }
}

// The traits a graph builder reads besides the flags: host reads (from the attributes where they depend on them),
// side effects (a Task without outputs must declare one), aliases.
TEST(OpTable, HostReadSideEffectAndAliasTraits) {
  EXPECT_TRUE(find_op("nonzero")->reads_host(Attrs()));
  const OpDef* repeat = find_op("repeat_interleave");
  ASSERT_NE(repeat, nullptr);
  EXPECT_TRUE(repeat->reads_host(RepeatInterleaveAttrs{6, true}));
  EXPECT_FALSE(repeat->reads_host(RepeatInterleaveAttrs{6, false}));
  EXPECT_FALSE(find_op("add")->reads_host(AddAttrs{}));
  for (const char* name : {"comm_start", "comm_wait"}) EXPECT_TRUE(find_op(name)->flags & kOpSideEffect) << name;
  Tensor a = zeros(Shape{2});
  EXPECT_THROW(enqueue(op_test_no_output, {a}, {}), Error);
  const OpDef* scatter_add = find_op("scatter_add");
  EXPECT_EQ(scatter_add->output_alias(0, 1), 0);
  EXPECT_EQ(find_op("add")->output_alias(0, 1), -1);
}

}  // namespace dg::test
