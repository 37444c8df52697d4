// The public C++ API of dygrad: include this one header.
#pragma once
#include "dygrad/autograd/engine.h"
#include "dygrad/autograd/node.h"
#include "dygrad/core/dtype.h"
#include "dygrad/core/tensor.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/factory.h"
#include "dygrad/ops/reduce.h"
#include "dygrad/ops/shape.h"
#include "dygrad/runtime/allocator.h"
#include "dygrad/runtime/context.h"
#include "dygrad/runtime/error.h"
#include "dygrad/runtime/stream.h"
