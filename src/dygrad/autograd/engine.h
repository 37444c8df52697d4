// The backward engine: runs the graph below the roots in dependency order on the host (each backward
// formula enqueues dygrad ops, so the device work stays asynchronous), accumulates into leaves' .grad,
// and frees the graph unless retain_graph. See docs/autograd.md.
#pragma once
#include <span>
#include <vector>

#include "dygrad/core/tensor.h"

namespace dg {

// tensor.backward() for several roots; an undefined gradient means ones for a one-element root.
void backward(std::span<const Tensor> roots, std::span<const Tensor> grad_roots, bool retain_graph = false,
              bool create_graph = false);

// torch.autograd.grad: the gradients of `outputs` with respect to `inputs`, without touching .grad.
std::vector<Tensor> grad(std::span<const Tensor> outputs, std::span<const Tensor> inputs,
                         std::span<const Tensor> grad_outputs = {}, bool retain_graph = false,
                         bool create_graph = false, bool allow_unused = false);

}  // namespace dg
