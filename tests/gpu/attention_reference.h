// attention_reference.h: multi-head attention forward and backward in
// float64 with a given dropout keep mask, the reference of the GPU tests
// whose mask is not the CPU backend's (cuDNN's own draw, the Hopper kernels'
// attention_keep8). Inputs [B, L, heads, D] (heads interleaved); entry b keeps
// its first len[b] keys (right padding), and an entry with none attends
// uniformly to all L keys (every score 0) with the gradients of a softmax of
// constant scores, as the CPU backend does; keep is
// [B, heads, L, L] (1 kept, 0 dropped) or empty for no dropout, kept values
// scaled by 1/(1-p). lse is the natural log of Σ_j exp(scale·q_i·k_j).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace anatomy::test {

struct AttentionReference {
  std::vector<double> ctx, lse, dq, dk, dv;
};

inline AttentionReference attention_reference(int64_t B, int64_t L, int64_t H, int64_t D, float p,
                                              const std::vector<double>& q, const std::vector<double>& k,
                                              const std::vector<double>& v, const std::vector<double>& dout,
                                              const std::vector<int64_t>& len, const std::vector<float>& keep,
                                              double scale) {
  const int64_t row = H * D;
  const size_t n = static_cast<size_t>(B * L * row);
  AttentionReference r{std::vector<double>(n), std::vector<double>(static_cast<size_t>(B * H * L)),
                       std::vector<double>(n), std::vector<double>(n), std::vector<double>(n)};
  const double inv_keep = p > 0.0f ? 1.0 / (1.0 - p) : 1.0;
  std::vector<double> P(static_cast<size_t>(L * L)), dP(static_cast<size_t>(L * L)), drop(static_cast<size_t>(L * L));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const bool none = len[static_cast<size_t>(b)] == 0;
      const int64_t n_keys = none ? L : len[static_cast<size_t>(b)];
      const double s_scale = none ? 0.0 : scale;  // an entry without keys: constant scores
      auto at = [&](int64_t t, int64_t d) { return static_cast<size_t>((b * L + t) * row + h * D + d); };
      for (int64_t i = 0; i < L; ++i) {
        double m = -INFINITY;
        for (int64_t j = 0; j < n_keys; ++j) {
          double s = 0.0;
          for (int64_t d = 0; d < D; ++d) s += q[at(i, d)] * k[at(j, d)];
          P[static_cast<size_t>(i * L + j)] = s * s_scale;
          m = std::max(m, s * s_scale);
        }
        double sum = 0.0;
        for (int64_t j = 0; j < n_keys; ++j) sum += std::exp(P[static_cast<size_t>(i * L + j)] - m);
        r.lse[static_cast<size_t>((b * H + h) * L + i)] = m + std::log(sum);
        for (int64_t j = 0; j < n_keys; ++j) {
          const size_t ij = static_cast<size_t>(i * L + j);
          P[ij] = std::exp(P[ij] - m) / sum;
          const double kept = keep.empty() ? 1.0 : keep[static_cast<size_t>(((b * H + h) * L + i) * L + j)];
          drop[ij] = kept * inv_keep;
        }
        for (int64_t d = 0; d < D; ++d) {
          double o = 0.0;
          for (int64_t j = 0; j < n_keys; ++j)
            o += P[static_cast<size_t>(i * L + j)] * drop[static_cast<size_t>(i * L + j)] * v[at(j, d)];
          r.ctx[at(i, d)] = o;
        }
      }
      // Backward.
      for (int64_t i = 0; i < L; ++i) {
        double rowsum = 0.0;  // Σ_j P_ij dP_ij = dO_i · O_i
        for (int64_t j = 0; j < n_keys; ++j) {
          double g = 0.0;
          for (int64_t d = 0; d < D; ++d) g += dout[at(i, d)] * v[at(j, d)];
          const size_t ij = static_cast<size_t>(i * L + j);
          dP[ij] = g * drop[ij];
          rowsum += P[ij] * dP[ij];
        }
        for (int64_t j = 0; j < n_keys; ++j) {
          const size_t ij = static_cast<size_t>(i * L + j);
          // An entry without keys: its probabilities are a softmax of constant
          // scores, whose gradient still flows to q and k through scale·q·k.
          const double dS = P[ij] * (dP[ij] - rowsum) * scale;
          for (int64_t d = 0; d < D; ++d) {
            r.dq[at(i, d)] += dS * k[at(j, d)];
            r.dk[at(j, d)] += dS * q[at(i, d)];
            r.dv[at(j, d)] += P[ij] * drop[ij] * dout[at(i, d)];
          }
        }
      }
    }
  return r;
}

}  // namespace anatomy::test
