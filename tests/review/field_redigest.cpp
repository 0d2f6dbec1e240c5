// Review 2026-12-02 (field): the checkpoint digests a rank would have written had its collective
// #K of N identical all_reduce(float32, 64, sum) been issued with count 65 (a silent divergence
// long retired by the size cap). Prints "cp ORDINAL DIGEST" per checkpoint and "ret R DIGEST"
// (the digest after collective R) so field_review.sh can rewrite a real capped trace.
//   review_field_redigest N K R
#include <cstdio>
#include <cstdlib>

#include "op_digest.h"

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  using namespace lockstep;
  long n = std::atol(argv[1]), k = std::atol(argv[2]), r = std::atol(argv[3]);
  auto sig = [](long count) {
    return digest::signature_hash(vocab::Op::AllReduce, vocab::Dtype::Float32, count, -1, -1, vocab::RedOp::Sum,
                                  nullptr, 0);
  };
  uint64_t d = digest::kEmpty;
  for (long i = 1; i <= n; ++i) {
    d = digest::chain(d, sig(i == k ? 65 : 64));
    if (digest::is_checkpoint(i, digest::kDefaultInterval)) std::printf("cp %ld %lld\n", i, (long long)d);
    if (i == r) std::printf("ret %ld %lld\n", i, (long long)d);
  }
  return 0;
}
