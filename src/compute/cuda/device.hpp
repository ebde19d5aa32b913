// CUDA devices: how many this process sees, which one a rank takes, and a
// one-line description for the device map a run prints at start-up.
#pragma once
#include <string>

namespace trident {

// Devices visible to this process; 0 when there are none or no usable driver
// (then `why`, if given, says what CUDA reported). Never throws.
int cuda_device_count(std::string* why = nullptr);

// The device for the rank with this node-local index: local_rank % count.
// That is right both when each rank sees only its own GPU (one visible
// device) and when every rank sees all of the node's GPUs. Throws
// RuntimeFailure naming the rank and host when no device is visible.
int pick_cuda_device(int local_rank, int rank, const std::string& host);

// "NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB, PCI 0000:18:00.0"
std::string cuda_device_summary(int device);
// Bus id of a device, to tell whether two ranks share one GPU.
std::string cuda_device_bus_id(int device);

}  // namespace trident
