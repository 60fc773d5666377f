// Determinism: every op gives identical bits when called twice with the same inputs and thread
// count; ops other than oneDNN's (GEMM, convolution) give the same bits for 1 and 2 threads,
// because their reductions run in an order that does not depend on the thread count. Sizes are
// above the parallel threshold so the threaded paths run.
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "tests/kernels/kernel_test_util.h"

using namespace pt;
using namespace pt::test;

namespace {

using Outputs = std::map<std::string, std::vector<float>>;

constexpr int64_t kRows = 300, kCols = 257, kN = kRows * kCols;

// Runs every op once on fixed inputs; returns each op's outputs by name.
Outputs run_every_op(CpuBackend& be) {
  Outputs out;
  const size_t n = static_cast<size_t>(kN);
  const auto X = random_floats(n, 1, -3.f, 3.f), Y = random_floats(n, 2),
             C = random_floats(kCols, 3);
  Floats x(be, X), y(be, Y), col(be, C), o(be, n, 0.f), o2(be, n, 0.f);

  be.gemm(false, true, kRows, 211, kCols, 1.f, x.get(), kCols, y.get(), kCols, 0.f, o.get(), 211);
  out["gemm"] = o.read();

  be.add(x.get(), y.get(), o.get(), kN);
  out["add"] = o.read();
  Floats acc(be, Y);
  be.axpy(0.3f, x.get(), acc.get(), kN);
  be.scale(1.7f, acc.get(), kN);
  be.add_bias(acc.get(), col.get(), kRows, kCols);
  out["axpy/scale/add_bias"] = acc.read();
  Floats sums(be, C);
  be.sum_rows_accumulate(x.get(), sums.get(), kRows, kCols);
  out["sum_rows_accumulate"] = sums.read();

  for (Activation f :
       {Activation::relu, Activation::gelu_erf, Activation::gelu_tanh, Activation::tanh}) {
    be.activation_forward(f, x.get(), o.get(), kN);
    be.activation_backward(f, x.get(), o.get(), y.get(), o2.get(), kN);
    out["activation " + std::to_string(static_cast<int>(f))] = o.read();
    out["activation backward " + std::to_string(static_cast<int>(f))] = o2.read();
  }
  be.dropout_forward(x.get(), o.get(), kN, 0.1f, 99);
  out["dropout"] = o.read();

  Floats mean(be, kRows, 0.f), rstd(be, kRows, 0.f), beta(be, C), dg(be, C), db(be, C);
  be.layernorm_forward(x.get(), col.get(), beta.get(), o.get(), mean.get(), rstd.get(), kRows,
                       kCols, 1e-5f);
  out["layernorm"] = o.read();
  be.layernorm_backward_input(y.get(), x.get(), col.get(), mean.get(), rstd.get(), o2.get(), kRows,
                              kCols);
  out["layernorm backward_input"] = o2.read();
  be.layernorm_backward_weight(y.get(), x.get(), mean.get(), rstd.get(), dg.get(), db.get(), kRows,
                               kCols);
  out["layernorm dgamma"] = dg.read();
  out["layernorm dbeta"] = db.read();

  Ints labels(be, random_ints(kRows, 4, kCols));
  const double loss = be.softmax_xent_forward(x.get(), labels.get(), o.get(), kRows, kCols);
  out["softmax"] = o.read();
  be.softmax_xent_backward(o.get(), labels.get(), o2.get(), kRows, kCols, 0.5f);
  out["softmax backward"] = o2.read();
  const double mse = be.mse_forward(x.get(), y.get(), kN);
  const double ss = be.sum_squares(x.get(), kN);
  out["host values"] = {static_cast<float>(loss),
                        static_cast<float>(loss - static_cast<float>(loss)),
                        static_cast<float>(mse),
                        static_cast<float>(mse - static_cast<float>(mse)),
                        static_cast<float>(ss),
                        static_cast<float>(ss - static_cast<float>(ss)),
                        static_cast<float>(be.count_correct(x.get(), labels.get(), kRows, kCols))};

  const Conv2dShape cs{4, 8, 17, 17, 16, 3, 3, 2, 2, 1, 1, 9, 9};
  const auto CX = random_floats(4 * 8 * 17 * 17, 5), CW = random_floats(16 * 8 * 9, 6),
             CD = random_floats(4 * 16 * 81, 7);
  Floats cx(be, CX), cw(be, CW), cdy(be, CD), cy(be, CD.size(), 0.f), cdx(be, CX.size(), 0.f),
      cdw(be, CW.size(), 0.f), cdb(be, 16, 0.f), cb(be, 16, 0.5f);
  be.conv2d_forward(cs, cx.get(), cw.get(), cb.get(), cy.get());
  be.conv2d_backward_input(cs, cdy.get(), cw.get(), cdx.get());
  be.conv2d_backward_weight(cs, cdy.get(), cx.get(), cdw.get(), cdb.get());
  out["conv forward"] = cy.read();
  out["conv backward_input"] = cdx.read();
  out["conv backward_weight"] = cdw.read();
  out["conv dbias"] = cdb.read();

  const Pool2dShape ps{4, 8, 17, 17, 3, 3, 2, 2, 1, 1, 9, 9};
  Ints arg(be, CD.size() / 2, 0);
  be.maxpool2d_forward(ps, cx.get(), cy.get(), arg.get());
  be.maxpool2d_backward(ps, cy.get(), arg.get(), cdx.get());
  out["maxpool"] = cy.read();
  out["maxpool backward"] = cdx.read();
  be.avgpool2d_forward(ps, cx.get(), cy.get());
  be.avgpool2d_backward(ps, cy.get(), cdx.get());
  out["avgpool"] = cy.read();
  out["avgpool backward"] = cdx.read();

  Ints ids(be, random_ints(kRows, 8, 50));
  Floats table(be, random_floats(50 * kCols, 9)), dtable(be, 50 * kCols, 0.f);
  be.embedding_forward(ids.get(), table.get(), o.get(), kRows, kCols, 50);
  be.embedding_backward_weight(ids.get(), y.get(), dtable.get(), kRows, kCols);
  out["embedding"] = o.read();
  out["embedding backward"] = dtable.read();

  SgdParams sp;
  sp.momentum = 0.9f;
  sp.nesterov = true;
  sp.weight_decay = 0.01f;
  Floats param(be, X), buf(be, n, 0.f), m(be, n, 0.f), v(be, n, 0.f);
  be.sgd_update(param.get(), y.get(), param.get(), buf.get(), kN, sp);
  AdamWParams ap;
  be.adamw_update(param.get(), y.get(), param.get(), m.get(), v.get(), kN, ap);
  out["optimizers"] = param.read();
  return out;
}

void check_same(const Outputs& a, const Outputs& b, bool include_onednn) {
  for (const auto& item : a) {
    const auto& name = std::get<0>(item);
    const auto& values = std::get<1>(item);
    if (!include_onednn && (name == "gemm" || name.rfind("conv", 0) == 0)) continue;
    CAPTURE(name);
    CHECK(same_bits(values, b.at(name)));
  }
}

}  // namespace

TEST_CASE("every op is bit-identical when repeated, and (except oneDNN's) across thread counts") {
  CpuBackend one(0, 1), two(1, 2);
  one.bind_current_thread();
  const Outputs a1 = run_every_op(one), a2 = run_every_op(one);
  check_same(a1, a2, true);
  two.bind_current_thread();
  const Outputs b1 = run_every_op(two), b2 = run_every_op(two);
  check_same(b1, b2, true);
  check_same(a1, b1, false);
  // oneDNN may split its sums differently with 2 threads: close, not necessarily identical.
  for (const char* name :
       {"gemm", "conv forward", "conv backward_input", "conv backward_weight", "conv dbias"}) {
    CAPTURE(name);
    check_close(b1.at(name), to_double(a1.at(name)), 1e-4, 1e-4, name);
  }
  one.bind_current_thread();
}
