#include "vmm/devices/virtio/rng/rng.h"

#include <sys/random.h>

#include <vector>

namespace cordon::vmm::virtio {

void Rng::notify(int queue) {
  if (queue != 0 || ctx_.mem == nullptr) return;
  std::vector<uint8_t> buf;
  serve_queue(ctx_, 0, [&](const Chain& c) -> uint32_t {
    uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(c.writable_bytes, kMaxRequestBytes));
    buf.resize(n);
    size_t got = 0;
    while (got < n) {
      ssize_t r = ::getrandom(buf.data() + got, n - got, 0);
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    uint32_t written = static_cast<uint32_t>(c.write(*ctx_.mem, 0, buf.data(), got));
    bytes_served_ += written;
    return written;
  });
}

}  // namespace cordon::vmm::virtio
