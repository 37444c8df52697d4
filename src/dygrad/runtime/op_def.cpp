// The op registry, kernel registration and the default cost model.
#include "dygrad/runtime/op_def.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "dygrad/core/error.h"

namespace dg {

namespace {
// Built at static initialisation (one thread), read-only afterwards. Heap-allocated and never freed, so
// OpDefs and registrations in any translation unit may use them whatever the initialisation order.
std::vector<OpDef*>& registry() {
  static auto* ops = new std::vector<OpDef*>();
  return *ops;
}
struct KernelRegistration {
  const char* op_name;
  Device::Type type;
  Kernel kernel;
  int isa;  // kKernelIsaBaseline or a higher level (docs/ops.md, "One binary for every CPU")
};
std::vector<KernelRegistration>& registrations() {
  static auto* r = new std::vector<KernelRegistration>();
  return *r;
}
std::vector<std::string>& problems() {
  static auto* p = new std::vector<std::string>();
  return *p;
}
bool backends[kNumDeviceTypes] = {};
thread_local CallSite tls_call_site{};

// The kernel of the highest ISA level registered wins, whatever the order of registration; two kernels of one
// level for one (op, device) are a mistake.
void attach(OpDef& op, Device::Type type, Kernel kernel, int isa, Kernel& slot, uint8_t& slot_isa) {
  if (slot && isa < slot_isa) return;
  if (slot && isa == slot_isa && slot != kernel)
    problems().push_back(std::string(op.name) + ": a second " + device_type_name(type) + " kernel was registered");
  slot = kernel;
  slot_isa = static_cast<uint8_t>(isa);
}
}  // namespace

const char* fusion_class_name(FusionClass f) {
  switch (f) {
    case FusionClass::Elementwise: return "elementwise";
    case FusionClass::Reduction: return "reduction";
    case FusionClass::Matmul: return "matmul";
    case FusionClass::Opaque: return "opaque";
  }
  return "?";
}

const char* op_flag_name(OpFlag flag) {
  switch (flag) {
    case kOpDataDependentShape: return "data_dependent_shape";
    case kOpRandom: return "random";
    case kOpSideEffect: return "side_effect";
    case kOpCrossDevice: return "cross_device";
    case kOpAnyDType: return "any_dtype";
    case kOpNeverInline: return "never_inline";
  }
  return "?";
}

bool host_read_always(const Attrs&) { return true; }
int alias_each_output(size_t output, size_t) { return static_cast<int>(output); }

void attach_registered_kernels(OpDef& op) {
  for (const KernelRegistration& r : registrations())
    if (std::strcmp(r.op_name, op.name) == 0)
      attach(op, r.type, r.kernel, r.isa, op.kernels_[static_cast<int>(r.type)], op.kernel_isa_[static_cast<int>(r.type)]);
}

OpDef::OpDef(const char* name_, const AttrsType* attrs_type_, OpTraits traits)
    : name(name_), attrs_type(attrs_type_), fusion(traits.fusion), backward(traits.backward), cost(traits.cost),
      flags(traits.flags), scratch(traits.scratch), rematerialize(traits.rematerialize), host_read(traits.host_read),
      alias_of(traits.alias_of), filled_input(traits.filled_input) {
  for (const OpDef* op : registry())
    if (std::strcmp(op->name, name) == 0) problems().push_back(std::string(name) + ": declared twice");
  registry().push_back(this);
  attach_registered_kernels(*this);
}

const std::vector<const OpDef*>& all_ops() {
  return reinterpret_cast<const std::vector<const OpDef*>&>(registry());
}

const OpDef* find_op(const char* name) {
  for (const OpDef* op : registry())
    if (std::strcmp(op->name, name) == 0) return op;
  return nullptr;
}

void register_kernel(const char* op_name, Device::Type type, Kernel kernel, int isa) {
  registrations().push_back({op_name, type, kernel, isa});
  for (OpDef* op : registry())
    if (std::strcmp(op->name, op_name) == 0)
      attach(*op, type, kernel, isa, op->kernels_[static_cast<int>(type)], op->kernel_isa_[static_cast<int>(type)]);
}

std::vector<std::string> kernel_registry_problems() {
  std::vector<std::string> out = problems();
  for (const KernelRegistration& r : registrations())
    if (!find_op(r.op_name))
      out.push_back(std::string(r.op_name) + ": a " + device_type_name(r.type) + " kernel is registered for an op "
                    "that is not in the table");
  return out;
}

void register_backend(Device::Type type) { backends[static_cast<int>(type)] = true; }
bool backend_built(Device::Type type) { return backends[static_cast<int>(type)]; }

namespace {
std::mutex info_mutex;
std::map<std::string, std::string>& info_table() {
  static auto* table = new std::map<std::string, std::string>();
  return *table;
}
}  // namespace
void set_backend_info(Device::Type type, const char* key, std::string value) {
  std::lock_guard<std::mutex> lock(info_mutex);
  info_table()[std::string(device_type_name(type)) + "." + key] = std::move(value);
}
std::string backend_info(Device::Type type, const char* key) {
  std::lock_guard<std::mutex> lock(info_mutex);
  auto it = info_table().find(std::string(device_type_name(type)) + "." + key);
  return it == info_table().end() ? std::string() : it->second;
}

void raise_devices_differ(const OpDef& op, Device a, Device b) {
  fail(ErrorKind::Runtime, "[", op.name, "] expected all tensors to be on the same device, but found ", a.str(),
       " and ", b.str());
}

void raise_no_kernel(const OpDef& op, Device device) {
  if (!backend_built(device.type))
    fail(ErrorKind::NotImplemented, "[", op.name, "] no kernel for device ", device.str(), ": dygrad was built "
         "without the ", device_type_name(device.type), " backend");
  fail(ErrorKind::NotImplemented, "[", op.name, "] has no kernel for device ", device.str(), " (the ",
       device_type_name(device.type), " backend does not implement it)");
}

CallSite current_call_site() { return tls_call_site; }
CallSiteScope::CallSiteScope(CallSite site) : saved_(tls_call_site) { tls_call_site = site; }
CallSiteScope::~CallSiteScope() { tls_call_site = saved_; }

OpCost Task::cost() const {
  if (op && op->cost) return op->cost(*this);
  OpCost c;
  for (const Tensor& t : inputs) c.bytes += double(t.numel()) * double(t.itemsize());
  for (const Tensor& t : outputs) {
    c.bytes += double(t.numel()) * double(t.itemsize());
    c.flops += double(t.numel());
  }
  return c;
}

namespace attrs_detail {
std::string field_text(const AttrField& field) {
  switch (field.kind) {
    case AttrField::Kind::Bool: return field.b ? "true" : "false";
    case AttrField::Kind::Int: return std::to_string(field.i);
    case AttrField::Kind::Float: {
      char buffer[32];
      std::snprintf(buffer, sizeof(buffer), "%.17g", field.f);
      return buffer;
    }
    case AttrField::Kind::Scalar: return field.scalar.to_string();
    case AttrField::Kind::Ints: {
      std::string text = "[";
      for (size_t k = 0; k < field.ints.size(); ++k) text += (k ? ", " : "") + std::to_string(field.ints[k]);
      return text + "]";
    }
    case AttrField::Kind::Enum: return field.text ? field.text : std::to_string(field.i);
    case AttrField::Kind::Opaque: {
      char buffer[48];
      std::snprintf(buffer, sizeof(buffer), "%s@%p", field.text ? field.text : "object", field.opaque);
      return buffer;
    }
  }
  return "?";
}

void print_attrs(const AttrsType& type, const void* p, std::string& out) {
  struct Context {
    std::string* out;
    bool first = true;
  } context{&out};
  out += type.name;
  out += '{';
  type.visit(p, &context, [](void* c, const AttrField& field) {
    Context& ctx = *static_cast<Context*>(c);
    if (!ctx.first) *ctx.out += ", ";
    ctx.first = false;
    ctx.out->append(field.name);
    *ctx.out += '=';
    *ctx.out += field_text(field);
  });
  out += '}';
}
}  // namespace attrs_detail

bool Attrs::operator==(const Attrs& other) const {
  if (!type_ || !other.type_) return type_ == other.type_;
  if (type_ != other.type_ && std::strcmp(type_->name, other.type_->name) != 0) return false;
  return type_->equal(buffer_, other.buffer_);
}

std::string Attrs::to_string() const {
  std::string out;
  if (type_) type_->print(buffer_, out);
  else out = "{}";
  return out;
}

void Attrs::check_same_type(const AttrsType* requested) const {
  if (type_ && requested && std::strcmp(type_->name, requested->name) == 0) return;
  fail(ErrorKind::Runtime, "internal error: attributes read as ", requested ? requested->name : "none",
       " but the Task carries ", type_ ? type_->name : "none");
}

}  // namespace dg
