// The slow-node judge's CPU per judgement (rendezvous/slow_nodes.h): N nodes
// with full windows of varied figures, one of them CPU-starved; prints the
// mean time of a judgement (one a --slow-node-window/3 interval) and what it
// named.
//   ninja -C build -j2 bench_slow_nodes_judge && build/bench/bench_slow_nodes_judge
#include <chrono>
#include <cstdio>
#include <string>

#include "rendezvous/slow_nodes.h"

int main() {
  using trainlet::rendezvous::SlowNodeJudge;
  for (int nodes : {100, 1000, 10000}) {
    SlowNodeJudge judge({0.10, absl::Seconds(30)});
    absl::Time now = absl::FromUnixSeconds(1'800'000'000);
    uint64_t x = 1;
    const int rounds = 20;
    double total_ms = 0;
    size_t named = 0;
    for (int r = 1; r <= rounds; ++r) {
      now += absl::Seconds(10);
      for (int i = 0; i < nodes; ++i) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        trainlet::v1::SlowSignals s;
        s.set_seq(r);
        s.set_interval_ms(10000);
        s.set_workers(8);
        s.set_cpu_waited_permille(i == 7 ? 400 : static_cast<int>((x >> 33) % 60));
        s.set_tcp_delivery_rate(1'000'000'000 + static_cast<int64_t>((x >> 20) % 200'000'000));
        s.set_tcp_rtt_us(100 + static_cast<int64_t>((x >> 40) % 100));
        s.set_step(r * 10);
        s.set_step_time_us(200'000 + static_cast<int64_t>((x >> 30) % 10'000));
        judge.Add("node-" + std::to_string(i), s, now);
      }
      const auto start = std::chrono::steady_clock::now();
      named += judge.Judge(now).size();
      total_ms +=
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
    }
    std::printf("%6d nodes: %.3f ms a judgement (mean of %d), %zu named\n", nodes,
                total_ms / rounds, rounds, named);
  }
  return 0;
}
