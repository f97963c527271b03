#include "vmm/devices/virtio/rng/rng.h"

#include <sys/random.h>

#include <vector>

namespace cordon::vmm::virtio {

void Rng::notify(int queue) {
  if (queue != 0 || ctx_.mem == nullptr) return;
  Queue& q = (*ctx_.queues)[0];
  bool used = false;
  std::vector<uint8_t> buf;
  while (true) {
    auto chain = q.pop(*ctx_.mem);
    if (!chain) {
      ctx_.needs_reset();
      return;
    }
    if (!chain->has_value()) break;
    const Chain& c = **chain;
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
    if (!q.add_used(*ctx_.mem, c.head, written)) {
      ctx_.needs_reset();
      return;
    }
    used = true;
  }
  if (used && q.needs_interrupt(*ctx_.mem)) ctx_.signal_used();
}

}  // namespace cordon::vmm::virtio
