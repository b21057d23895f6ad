// test_cuda_first_query_attention.cpp: the CUDA backend's attention of the
// first query (first_query_attention.cu) against the CPU backend's, which the
// CPU tests check against row 0 of the whole attention and finite differences:
// float32, bf16 and fp16, head sizes 256, 160, 64, 48, 32 and 16, lengths up to 512, with
// dropout (the same reference mask on both) and without, a padded batch entry
// and one whose keys are all masked. The CPU computes from the same (rounded)
// inputs in float32; the GPU's 16-bit outputs are rounded once, so they may
// differ by one rounding (u relative), plus float32 sums taken in another
// order (1e-5 of the largest value).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "anatomy/kernels/backend.h"
#include "anatomy/kernels/cuda/cuda_backend.h"
#include "backend_test_util.h"

namespace anatomy {
namespace {

using test::download;
using test::expect_near;
using test::random_vector;
using test::rounded;
using test::upload;

Tensor cpu_tensor(Backend& b, Shape shape, const std::vector<float>& values, const char* name) {
  Tensor t = Tensor::empty(b.ledger(), std::move(shape), DType::F32, Category::Temporary, name);
  b.copy_from_host(t, values.data());
  return t;
}

TEST(CudaBackendAttention, FirstQueryMatchesTheCpuBackend) {
  SKIP_WITHOUT_GPU();
  auto gpu = cuda::make_cuda_backend(0);
  auto cpu = make_cpu_backend(1);
  struct Case {
    DType t;
    int64_t B, L, heads, D;
    float p;
  };
  for (const Case c : {Case{DType::F32, 3, 70, 2, 64, 0.1f}, Case{DType::F32, 3, 33, 3, 32, 0.0f},
                       Case{DType::BF16, 3, 512, 16, 64, 0.1f}, Case{DType::F16, 3, 130, 4, 32, 0.1f},
                       Case{DType::BF16, 3, 24, 2, 16, 0.0f},
                       // the widest head the kernels take (one group of 256 threads per
                       // column sum), and head sizes that do not divide 256 (one thread a column)
                       Case{DType::BF16, 3, 100, 2, 256, 0.1f}, Case{DType::F32, 3, 77, 3, 48, 0.1f},
                       Case{DType::F16, 3, 40, 1, 160, 0.0f}}) {
    const int64_t H = c.heads * c.D, n = c.B * c.L * H;
    const std::string what = std::string(dtype_name(c.t)) + " L " + std::to_string(c.L) + " D " + std::to_string(c.D);
    const auto q0 = rounded(c.t, random_vector(c.B * H, 61)), k = rounded(c.t, random_vector(n, 62)),
               v = rounded(c.t, random_vector(n, 63)), dctx0 = rounded(c.t, random_vector(c.B * H, 64));
    // Entry 0 keeps every key, entry 1 the first L - 7, entry 2 none (uniform attention).
    std::vector<int64_t> mask(static_cast<size_t>(c.B * c.L), 1);
    for (int64_t j = c.L - 7; j < c.L; ++j) mask[static_cast<size_t>(c.L + j)] = 0;
    for (int64_t j = 0; j < c.L; ++j) mask[static_cast<size_t>(2 * c.L + j)] = 0;
    const DropoutSpec dropout{c.p, 17, 4};
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.D));

    Tensor gq = upload(*gpu, {c.B, 1, H}, q0, c.t, "q0"), gk = upload(*gpu, {c.B, c.L, H}, k, c.t, "k"),
           gv = upload(*gpu, {c.B, c.L, H}, v, c.t, "v"), gd = upload(*gpu, {c.B, 1, H}, dctx0, c.t, "dctx0");
    Tensor gmask = Tensor::empty(gpu->ledger(), {c.B, c.L}, DType::I64, Category::Temporary, "mask");
    gpu->copy_from_host(gmask, mask.data());
    Tensor gp = upload(*gpu, {c.B, c.heads, c.L}, std::vector<float>(c.B * c.heads * c.L, NAN), DType::F32, "probs");
    Tensor gctx = upload(*gpu, {c.B, 1, H}, std::vector<float>(c.B * H, NAN), c.t, "ctx0");
    Tensor gdq = upload(*gpu, {c.B, 1, H}, std::vector<float>(c.B * H, NAN), c.t, "dq0");
    Tensor gdk = upload(*gpu, {c.B, c.L, H}, std::vector<float>(n, NAN), c.t, "dk");
    Tensor gdv = upload(*gpu, {c.B, c.L, H}, std::vector<float>(n, NAN), c.t, "dv");
    gpu->attention_first_query_forward(gq, gk, gv, gmask, c.heads, scale, dropout, gp, gctx);
    gpu->attention_first_query_backward(gd, gq, gk, gv, gp, c.heads, scale, dropout, gdq, gdk, gdv);

    Tensor cq = cpu_tensor(*cpu, {c.B, 1, H}, q0, "q0"), ck = cpu_tensor(*cpu, {c.B, c.L, H}, k, "k"),
           cv = cpu_tensor(*cpu, {c.B, c.L, H}, v, "v"), cd = cpu_tensor(*cpu, {c.B, 1, H}, dctx0, "dctx0");
    Tensor cmask = Tensor::empty(cpu->ledger(), {c.B, c.L}, DType::I64, Category::Temporary, "mask");
    cpu->copy_from_host(cmask, mask.data());
    Tensor cp = cpu_tensor(*cpu, {c.B, c.heads, c.L}, std::vector<float>(c.B * c.heads * c.L), "probs");
    Tensor cctx = cpu_tensor(*cpu, {c.B, 1, H}, std::vector<float>(c.B * H), "ctx0");
    Tensor cdq = cpu_tensor(*cpu, {c.B, 1, H}, std::vector<float>(c.B * H), "dq0");
    Tensor cdk = cpu_tensor(*cpu, {c.B, c.L, H}, std::vector<float>(n), "dk");
    Tensor cdv = cpu_tensor(*cpu, {c.B, c.L, H}, std::vector<float>(n), "dv");
    cpu->attention_first_query_forward(cq, ck, cv, cmask, c.heads, scale, dropout, cp, cctx);
    cpu->attention_first_query_backward(cd, cq, ck, cv, cp, c.heads, scale, dropout, cdq, cdk, cdv);

    const double u = c.t == DType::F32 ? 0.0 : test::unit_roundoff(c.t);
    expect_near(download(*gpu, gp), download(*cpu, cp), 1e-5, 1e-6, what + " probs");
    expect_near(download(*gpu, gctx), download(*cpu, cctx), u, 1e-5, what + " ctx0");
    expect_near(download(*gpu, gdq), download(*cpu, cdq), u, 1e-5, what + " dq0");
    expect_near(download(*gpu, gdk), download(*cpu, cdk), u, 1e-5, what + " dk");
    expect_near(download(*gpu, gdv), download(*cpu, cdv), u, 1e-5, what + " dv");
  }
}

}  // namespace
}  // namespace anatomy
