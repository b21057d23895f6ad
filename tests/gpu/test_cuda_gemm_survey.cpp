// A measurement, not a test (DISABLED_, run with --gtest_also_run_disabled_tests):
// for every matrix product of a bert-large training step in bf16, the time of
// cuBLASLt's first heuristic choice against the fastest of its first 16
// candidates. It tells whether timing the candidates pays and by how much.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "device_buffer.h"

namespace {

#define SURVEY_CHECK(x) ASSERT_EQ((x), 0) << #x

struct Case {
  const char* name;
  cublasOperation_t op_a, op_b;
  int64_t m, n, k;
  bool f32_out;  // float32 output accumulated with β = 1 (weight gradients)
  int batch;     // strided batch count (1 = a single product)
};

double time_algo(cublasLtHandle_t lt, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                 cublasLtMatrixLayout_t lc, const cublasLtMatmulAlgo_t* algo, const void* A, const void* B, void* C,
                 float beta, void* ws, size_t ws_bytes, cudaStream_t s) {
  const float alpha = 1.0f;
  for (int i = 0; i < 3; ++i)
    if (cublasLtMatmul(lt, op, &alpha, A, la, B, lb, &beta, C, lc, C, lc, algo, ws, ws_bytes, s) != 0) return -1.0;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const int iters = 20;
  cudaEventRecord(e0, s);
  for (int i = 0; i < iters; ++i) cublasLtMatmul(lt, op, &alpha, A, la, B, lb, &beta, C, lc, C, lc, algo, ws, ws_bytes, s);
  cudaEventRecord(e1, s);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ms / iters;
}

TEST(CudaGemmSurvey, DISABLED_HeuristicAgainstFastestCandidate) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no CUDA device";
  const char* batch_env = std::getenv("SURVEY_BATCH");
  const int64_t T = (batch_env ? std::atoi(batch_env) : 32) * 512, H = 1024, F = 4096;
  // Column-major m, n, k as the backend calls them: forward yᵀ = w·xᵀ (op T, N),
  // input gradient dxᵀ = wᵀ·dyᵀ (N, N), weight gradient dwᵀ += xᵀ·dy (N, T).
  const std::vector<Case> cases = {
      {"qkv forward (3 batched)", CUBLAS_OP_T, CUBLAS_OP_N, H, T, H, false, 3},
      {"attn-out forward", CUBLAS_OP_T, CUBLAS_OP_N, H, T, H, false, 1},
      {"ffn-up forward", CUBLAS_OP_T, CUBLAS_OP_N, F, T, H, false, 1},
      {"ffn-down forward", CUBLAS_OP_T, CUBLAS_OP_N, H, T, F, false, 1},
      {"qkv dx (x3, 1024x1024)", CUBLAS_OP_N, CUBLAS_OP_N, H, T, H, false, 1},
      {"ffn-up dx", CUBLAS_OP_N, CUBLAS_OP_N, H, T, F, false, 1},
      {"ffn-down dx", CUBLAS_OP_N, CUBLAS_OP_N, F, T, H, false, 1},
      {"qkv dw (3 batched)", CUBLAS_OP_N, CUBLAS_OP_T, H, H, T, true, 3},
      {"attn-out dw", CUBLAS_OP_N, CUBLAS_OP_T, H, H, T, true, 1},
      {"ffn-up dw", CUBLAS_OP_N, CUBLAS_OP_T, H, F, T, true, 1},
      {"ffn-down dw", CUBLAS_OP_N, CUBLAS_OP_T, F, H, T, true, 1},
  };
  cublasLtHandle_t lt;
  SURVEY_CHECK(cublasLtCreate(&lt));
  cudaStream_t s;
  cudaStreamCreate(&s);
  const size_t ws_bytes = size_t{32} << 20;
  anatomy::test::DeviceBuffer workspace(ws_bytes), A(size_t(3) * T * F * 2), B(size_t(3) * T * F * 2), C(size_t(3) * T * F * 4);
  // Random-ish bf16 data so the tensor cores see realistic bit patterns.
  {
    std::vector<__nv_bfloat16> host(size_t(3) * T * F);
    uint32_t x = 12345;
    for (auto& v : host) {
      x = x * 1664525u + 1013904223u;
      v = __float2bfloat16((static_cast<float>(x >> 8) / 16777216.0f - 0.5f) * 0.1f);
    }
    A.upload(host);
    B.upload(host);
    cudaMemset(C.as<void>(), 0, size_t(3) * T * F * 4);
  }
  double total_first = 0, total_best = 0;
  std::printf("%-26s %5s %5s %6s | %9s %9s | %9s %9s %4s %s\n", "product", "m", "n", "k", "first ms", "TFLOP/s",
              "best ms", "TFLOP/s", "idx", "of");
  for (const Case& c : cases) {
    const cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    cublasLtMatmulDesc_t op;
    SURVEY_CHECK(cublasLtMatmulDescCreate(&op, compute, CUDA_R_32F));
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &c.op_a, sizeof(c.op_a));
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &c.op_b, sizeof(c.op_b));
    cublasLtMatrixLayout_t la, lb, lc;
    const int64_t ar = c.op_a == CUBLAS_OP_N ? c.m : c.k, ac = c.op_a == CUBLAS_OP_N ? c.k : c.m;
    const int64_t br = c.op_b == CUBLAS_OP_N ? c.k : c.n, bc = c.op_b == CUBLAS_OP_N ? c.n : c.k;
    SURVEY_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, ar, ac, ar));
    SURVEY_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, br, bc, br));
    SURVEY_CHECK(cublasLtMatrixLayoutCreate(&lc, c.f32_out ? CUDA_R_32F : CUDA_R_16BF, c.m, c.n, c.m));
    if (c.batch > 1) {
      const int32_t count = c.batch;
      const int64_t sa = c.f32_out ? 0 : ar * ac, sb = c.f32_out ? br * bc : 0, sc = c.m * c.n;
      const std::pair<cublasLtMatrixLayout_t, int64_t> ls[] = {{la, sa}, {lb, sb}, {lc, sc}};
      for (const auto& [l, st] : ls) {
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count));
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st, sizeof(st));
      }
    }
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    const uint64_t wsb = ws_bytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb));
    cublasLtMatmulHeuristicResult_t results[16];
    int found = 0;
    SURVEY_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 16, results, &found));
    ASSERT_GT(found, 0) << c.name;
    const float beta = c.f32_out ? 1.0f : 0.0f;
    double first = -1, best = 1e30;
    int best_idx = -1;
    for (int i = 0; i < found; ++i) {
      const double ms = time_algo(lt, op, la, lb, lc, &results[i].algo, A.as<void>(), B.as<void>(), C.as<void>(), beta, workspace.as<void>(),
                                  ws_bytes, s);
      if (i == 0) first = ms;
      if (ms > 0 && ms < best) best = ms, best_idx = i;
    }
    const double flop = 2.0 * c.m * c.n * c.k * c.batch;
    std::printf("%-26s %5ld %5ld %6ld | %9.4f %9.1f | %9.4f %9.1f %4d %d\n", c.name, static_cast<long>(c.m),
                static_cast<long>(c.n), static_cast<long>(c.k), first, flop / first / 1e9, best, flop / best / 1e9,
                best_idx, found);
    // Per layer: qkv dx runs three times, the rest once; 24 layers.
    const int reps = std::string(c.name).rfind("qkv dx", 0) == 0 ? 3 : 1;
    total_first += 24 * reps * first;
    total_best += 24 * reps * best;
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(op);
  }
  std::printf("24 layers: heuristic's first choice %.2f ms, fastest candidates %.2f ms a step\n", total_first,
              total_best);
  cudaStreamDestroy(s);
  cublasLtDestroy(lt);
}

}  // namespace
