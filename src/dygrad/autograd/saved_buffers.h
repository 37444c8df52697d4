// A backward formula writing a gradient into the memory of a tensor its node saved, when nothing can read that
// memory after the node (docs/recompute.md, "Backward temporaries at the peak"). The SwiGLU backward does so:
// at a LLaMA step's peak (the last block's MLP backward) it would otherwise hold w1's and w3's outputs and the
// two same-sized gradients it writes at once.
#pragma once
#include "dygrad/core/tensor.h"

namespace dg {

// Whether the engine releases the saved tensors of the node whose backward runs on this thread right after it
// (a backward without retain_graph or create_graph). Set by the engine around each node's formula.
bool saved_released_after_backward();
void set_saved_released_after_backward(bool on);

// For the backward formula of a node that saved `t`: a new tensor over t's memory (t's shape, dtype and strides),
// to write a gradient of t's shape and dtype into, when nothing else can read that memory after this node: its
// saved tensors are released after it (above); the TensorImpl is referenced only by the caller's copy from
// Node::saved and, when the node's slot holds it `directly` (Node::holds_saved: no pack hook applied and not
// rematerialized, autograd/node.h), the node's slot (an
// edge to a leaf, a Python object, a pack hook's record or a second node saving it would add one; queued Tasks'
// references do not count, core/ref.h); no other tensor (a view) shares its storage, except through queued Tasks;
// it is contiguous and not shared with the host (NumPy).
// Otherwise an undefined tensor: the formula allocates as before. A Task that writes it is enqueued after every
// Task that read it (one in-order stream), so those reads see the old values.
Tensor reuse_saved_buffer(const Tensor& t, bool directly);

}  // namespace dg
