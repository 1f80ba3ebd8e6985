// The host side of the CUDA ring, on the CPU: the ring schedule both rings share (every chunk
// reduced by every replica once and then handed round), the peer-access table from a made-up
// matrix, and a DeviceRing that cannot be built here saying why.
#include <set>
#include <string>
#include <vector>

#include "kernels/gpu.h"
#include "tests/test_util.h"
#include "train/replicas/device_ring.h"
#include "train/replicas/peer_access.h"
#include "train/replicas/ring.h"

using namespace cutrain;

TEST_CASE("ring schedule: r receives what r-1 sends; reduce-scatter leaves r owning r+1") {
  for (int R = 1; R <= 6; R++)
    for (int r = 0; r < R; r++) {
      std::set<int> reduced, gathered;
      for (int t = 0; t < 2 * (R - 1); t++) {
        const int c = ring_recv_chunk(R, r, t);
        REQUIRE(c >= 0);
        REQUIRE(c < R);
        REQUIRE(c == ring_send_chunk(R, (r + R - 1) % R, t));
        (t < R - 1 ? reduced : gathered).insert(c);
        // what r sends at step t+1 is what it received at step t (the chunk it just made)
        if (t + 1 < 2 * (R - 1)) REQUIRE(ring_send_chunk(R, r, t + 1) == c);
      }
      if (R == 1) continue;
      REQUIRE(int(reduced.size()) == R - 1);                      // each chunk but r's own
      REQUIRE(reduced.count(r) == 0);
      REQUIRE(ring_recv_chunk(R, r, R - 2) == (r + 1) % R);       // the last reduce: r owns r+1
      REQUIRE(int(gathered.size()) == R - 1);                     // every chunk but r+1
      REQUIRE(gathered.count((r + 1) % R) == 0);
    }
}

TEST_CASE("peer matrix: the table, direct links, unknown devices") {
  PeerMatrix m;
  m.devices = {0, 1, 3};
  m.access = {{true, true, false}, {true, true, false}, {false, true, true}};
  REQUIRE(m.direct(0, 1));
  REQUIRE(m.direct(3, 3));
  REQUIRE(!m.direct(1, 3));  // 3 reads 1, but 1 cannot read 3: staged
  REQUIRE(!m.direct(0, 3));
  REQUIRE_ERROR(m.direct(0, 2), "device 2 is not in the peer matrix");
  std::string s = format_peer_matrix(m);
  REQUIRE(s ==
          "peer access (row reads column's memory):\n"
          "              gpu0    gpu1    gpu3\n"
          "  gpu0        self     yes      no\n"
          "  gpu1         yes    self      no\n"
          "  gpu3          no     yes    self\n");
  m.gb_per_s = {{1480.26, 45.06, 11.5}, {44.9, 1479.8, 11.4}, {11.5, 11.6, 1500}};
  s = format_peer_matrix(m);
  REQUIRE(s.find("copy bandwidth, GB/s (row -> column; diagonal: within one device):\n"
                 "              gpu0    gpu1    gpu3\n"
                 "  gpu0      1480.3    45.1    11.5\n") != std::string::npos);
  PeerMatrix one;  // --devices 0,0: one device
  one.devices = {0};
  one.access = {{true}};
  REQUIRE(format_peer_matrix(one) ==
          "peer access (row reads column's memory):\n"
          "              gpu0\n"
          "  gpu0        self\n");
}

TEST_CASE("device ring: without a usable GPU it refuses, saying why") {
  if (gpu_usable()) return;  // tests/train/replicas/device_ring_gpu_test.cpp covers that case
  REQUIRE_ERROR(DeviceRing({0, 0}), "DeviceRing: ");
  REQUIRE_ERROR(enable_peer_access({0}), "peer access: ");
  REQUIRE(std::string(DeviceRing::path_name(DeviceRing::Path::staged)) == "staged");
}
