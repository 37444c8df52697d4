// The selective recompute sink (autograd/recompute_sink.h).
#include "dygrad/autograd/recompute_sink.h"

#include "dygrad/core/error.h"
#include "dygrad/ops/dispatch.h"

namespace dg {

bool RecomputeSink::fresh_outputs(const OpCall& call) {
  if (call.op.alias_of || call.outputs.empty()) return false;
  for (const Tensor& o : call.outputs) {
    if (!o.defined() || o.is_view() || o.storage_offset() != 0 || o.impl()->storage->use_count() != 1) return false;
    for (const Tensor& i : call.inputs)
      if (i.defined() && i.shares_storage(o)) return false;
  }
  return true;
}

bool RecomputeSink::on_op(const OpCall& call) {
  if (!fresh_outputs(call)) return false;
  std::vector<Tensor> cached;
  switch (policy_(call, cached)) {
    case Decision::Run: return false;
    case Decision::Skip: return true;
    case Decision::Adopt: break;
  }
  const char* name = call.op.name;
  DG_CHECK(cached.size() == call.outputs.size(), Runtime, "[", name, "] the op observer gave ", cached.size(),
           " tensors for ", call.outputs.size(), " outputs");
  for (size_t i = 0; i < cached.size(); ++i) {
    const Tensor& o = call.outputs[i];
    DG_CHECK(same_shape(cached[i].shape(), o.shape()) && cached[i].dtype() == o.dtype() &&
                 cached[i].device() == o.device(), Runtime, "[", name, "] a cached output of shape ",
             cached[i].shape(), " does not match the output of shape ", o.shape());
  }
  for (size_t i = 0; i < cached.size(); ++i) {
    TensorImpl* dst = call.outputs[i].impl();
    const TensorImpl* src = cached[i].impl();
    dst->storage = src->storage;
    dst->offset = src->offset;
    dst->strides = src->strides;
  }
  return true;
}

}  // namespace dg
