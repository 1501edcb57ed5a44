// The one libtorch call the `tch` build needs that `tch` 0.22 does not wrap: the gradients of
// some inputs given the gradients of some outputs (`torch::autograd::grad` with
// `grad_outputs`). tch's `run_backward` always seeds its roots with ones, so a backward with a
// given output gradient had to differentiate the scalar `sum(output * g)` instead: an extra
// product, a sum, a seed and the product's backward over every output, each a kernel on a GPU.
// See torch_vjp.rs.
#include <torch/csrc/autograd/autograd.h>

#include "torch_error.h"

#include <vector>

extern "C" int pipeline_torch_vjp(at::Tensor *const *outputs, at::Tensor *const *grads,
                                  int n_outputs, at::Tensor *const *inputs, int n_inputs,
                                  at::Tensor **results, char *error, size_t error_len) {
  try {
    torch::autograd::variable_list outs, gs, ins;
    for (int i = 0; i < n_outputs; ++i) {
      outs.push_back(*outputs[i]);
      gs.push_back(*grads[i]);
    }
    for (int i = 0; i < n_inputs; ++i) {
      ins.push_back(*inputs[i]);
    }
    // No graph kept (each op's graph is walked once), none built, unused inputs allowed (an
    // input that does not reach the output gets an undefined tensor, as run_backward gives).
    auto vl = torch::autograd::grad(outs, ins, gs, /*retain_graph=*/false,
                                    /*create_graph=*/false, /*allow_unused=*/true);
    for (int i = 0; i < n_inputs; ++i) {
      results[i] = new at::Tensor(vl[i]);
    }
    return 0;
  } catch (const std::exception &e) {
    return pipeline_report_error(e, error, error_len);
  }
}
