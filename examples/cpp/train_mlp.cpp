// Trains a two-layer MLP classifier on a synthetic two-spirals problem through dygrad's C++ API alone:
// tensors, ops, autograd and an SGD-with-momentum update written with in-place ops under NoGradGuard.
//
//   ./build/examples/cpp/train_mlp [steps]
//
// Shapes: X [N, 2] points, Y [N] class ids in {0, 1}; W1 [H, 2], W2 [2, H] (torch's Linear layout).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "dygrad/dygrad.h"

using namespace dg;

namespace {
struct Dataset {
  Tensor x, y;
};

// Two interleaved spirals, deterministic.
Dataset make_spirals(int64_t n_per_class) {
  std::vector<float> points;
  std::vector<int64_t> labels;
  for (int c = 0; c < 2; ++c)
    for (int64_t i = 0; i < n_per_class; ++i) {
      double r = 0.2 + 0.8 * double(i) / double(n_per_class);
      double t = 3.0 * r * M_PI + c * M_PI + 0.05 * std::sin(7.0 * double(i));
      points.push_back(float(r * std::cos(t)));
      points.push_back(float(r * std::sin(t)));
      labels.push_back(c);
    }
  const int64_t n = 2 * n_per_class;
  return {from_vector<float>(points, std::vector<int64_t>{n, 2}), from_vector<int64_t>(labels, std::vector<int64_t>{n})};
}

Tensor parameter(std::vector<int64_t> shape, double scale) {
  Tensor p = mul(randn(shape), scale);
  p = detach(p);
  p.set_requires_grad(true);
  return p;
}
}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 300;
  manual_seed(0);
  Dataset data = make_spirals(256);
  const int64_t hidden = 64;
  std::vector<Tensor> params = {parameter({hidden, 2}, 1.0), zeros(std::vector<int64_t>{hidden}, {DType::Float32, true}),
                                parameter({2, hidden}, 1.0 / std::sqrt(double(hidden))),
                                zeros(std::vector<int64_t>{2}, {DType::Float32, true})};
  std::vector<Tensor> velocity;
  for (const Tensor& p : params) velocity.push_back(zeros_like(p));
  const double lr = 0.2, momentum = 0.9;

  double first_loss = 0, loss_value = 0;
  for (int step = 0; step < steps; ++step) {
    Tensor h = relu(linear(data.x, params[0], params[1]));  // [N, H]
    Tensor logits = linear(h, params[2], params[3]);       // [N, 2]
    Tensor loss = cross_entropy(logits, data.y);
    for (Tensor& p : params) p.set_grad(Tensor());
    loss.backward();
    {
      NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {
        mul_(velocity[i], momentum);
        add_(velocity[i], params[i].grad());
        sub_(params[i], velocity[i], lr);
      }
    }
    if (step % 50 == 0 || step == steps - 1) {
      loss_value = loss.item<double>();  // a sync point: the only one per logged step
      if (step == 0) first_loss = loss_value;
      Tensor predicted = argmax(logits, 1);
      double accuracy = mean(to(eq(predicted, data.y), DType::Float32)).item<double>();
      std::printf("step %4d  loss %.4f  accuracy %.3f\n", step, loss_value, accuracy);
    }
  }
  std::printf("loss %.4f -> %.4f\n", first_loss, loss_value);
  return loss_value < first_loss ? 0 : 1;
}
