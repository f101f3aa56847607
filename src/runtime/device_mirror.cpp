#include "runtime/device_mirror.hpp"

#include <algorithm>
#include <span>
#include <vector>

#include "tilefmha/error.hpp"

namespace tilefmha::runtime {
namespace {

int64_t view_bytes(const TensorView& view) {
  return view.extent() * dtype_size(view.dtype);
}

// The tensors the problem's family writes: O and LSE of a forward; the gradients, D and the dQ
// accumulator of a backward (which reads O and LSE).
std::vector<TensorView Problem::*> output_members(const Problem& problem) {
  if (!problem.is_backward()) return {&Problem::o, &Problem::lse};
  return {};
}

std::vector<TensorView Backward::*> backward_outputs() {
  return {&Backward::dq,    &Backward::dk, &Backward::dv,
          &Backward::dbias, &Backward::d,  &Backward::dq_acc};
}

bool is_output(const Problem& problem, const TensorView& view) {
  for (TensorView Problem::*member : output_members(problem))
    if (&view == &(problem.*member)) return true;
  return false;
}

// Every output view of the problem (backward ones included), in a fixed order.
std::vector<const TensorView*> outputs(const Problem& problem) {
  std::vector<const TensorView*> views;
  for (TensorView Problem::*member : output_members(problem)) views.push_back(&(problem.*member));
  if (problem.is_backward())
    for (TensorView Backward::*member : backward_outputs()) views.push_back(&(problem.bwd.*member));
  return views;
}

}  // namespace

TensorView DeviceMirror::mirror(const TensorView& host, bool poison) {
  if (host.empty()) return host;
  if (host.space != MemorySpace::host)
    throw Error(ErrorKind::invalid_argument, "DeviceMirror expects host views");
  const int64_t bytes = view_bytes(host);
  auto buffer = std::make_unique<jit::DeviceBuffer>(std::max<int64_t>(bytes, 1));
  if (poison) {
    buffer->fill_bytes(kPoisonByte);
  } else if (bytes > 0) {
    buffer->copy_from_host(std::span(static_cast<const std::byte*>(host.data), bytes));
  }
  TensorView device = host;
  device.data = reinterpret_cast<void*>(buffer->address());
  device.space = MemorySpace::device;
  buffers_.push_back(std::move(buffer));
  return device;
}

DeviceMirror::DeviceMirror(const Problem& host) : device_(host) {
  for (TensorView Problem::*member :
       {&Problem::q, &Problem::k, &Problem::v, &Problem::o, &Problem::lse, &Problem::bias,
        &Problem::alibi_slopes, &Problem::sink_logits})
    device_.*member = mirror(host.*member, is_output(host, host.*member));
  for (TensorView AppendKv::*member :
       {&AppendKv::k_new, &AppendKv::v_new, &AppendKv::rope_cos, &AppendKv::rope_sin})
    device_.append.*member = mirror(host.append.*member, false);
  for (TensorView Fp8Scales::*member :
       {&Fp8Scales::q_block, &Fp8Scales::k_block, &Fp8Scales::v_block, &Fp8Scales::k_page,
        &Fp8Scales::v_page})
    device_.fp8.*member = mirror(host.fp8.*member, false);
  // Backward tensors are mirrored only for a backward problem; a forward ignores them, so its
  // device copy drops them (host views left in it would mix memory spaces).
  if (host.is_backward()) {
    device_.bwd.d_o = mirror(host.bwd.d_o, false);
    for (TensorView Backward::*member : backward_outputs())
      device_.bwd.*member = mirror(host.bwd.*member, true);
  } else {
    device_.bwd = Backward{};
  }
}

jit::DeviceBuffer* DeviceMirror::find_buffer(const void* device_data) const {
  for (const auto& buffer : buffers_)
    if (reinterpret_cast<const void*>(buffer->address()) == device_data) return buffer.get();
  return nullptr;
}

void DeviceMirror::copy_outputs_to(const Problem& host) const {
  const std::vector<const TensorView*> targets = outputs(host);
  const std::vector<const TensorView*> sources = outputs(device_);
  for (size_t n = 0; n < targets.size() && n < sources.size(); ++n) {
    const TensorView& target = *targets[n];
    if (target.empty()) continue;
    if (const jit::DeviceBuffer* buffer = find_buffer(sources[n]->data))
      buffer->copy_to_host(std::span(static_cast<std::byte*>(target.data), view_bytes(target)));
  }
}

void DeviceMirror::poison_outputs() const {
  for (const TensorView* view : outputs(device_))
    if (jit::DeviceBuffer* buffer = find_buffer(view->data)) buffer->fill_bytes(kPoisonByte);
}

DeviceMirror::HostBytes DeviceMirror::download(const TensorView& device_view) const {
  const jit::DeviceBuffer* buffer = find_buffer(device_view.data);
  if (buffer == nullptr)
    throw Error(ErrorKind::invalid_argument,
                "DeviceMirror::download: the view is not one of this mirror's tensors");
  HostBytes host{std::vector<std::byte>(static_cast<size_t>(buffer->bytes())), device_view};
  buffer->copy_to_host(host.bytes);
  host.view.data = host.bytes.data();
  host.view.space = MemorySpace::host;
  return host;
}

}  // namespace tilefmha::runtime
