#include "model/device.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <sys/resource.h>
#include <torch/headeronly/version.h>

#include <string>

#include "model/threads.h"
#include "util/error.h"

namespace brl::model {

std::vector<CudaDevice> cuda_devices() {
  std::vector<CudaDevice> out;
  // hasCUDA: libtorch's CUDA half loaded and a driver answered; device_count() may still be 0.
  if (!at::hasCUDA()) return out;
  int n = c10::cuda::device_count();
  for (int i = 0; i < n; ++i) {
    const cudaDeviceProp* p = at::cuda::getDeviceProperties(i);
    out.push_back({i, p->name, p->major, p->minor, static_cast<int64_t>(p->totalGlobalMem)});
  }
  return out;
}

bool cuda_available() { return at::hasCUDA() && c10::cuda::device_count() > 0; }

c10::Device resolve_device(const std::string& name) {
  if (name == "auto") return cuda_available() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  if (name == "cpu") return c10::Device(c10::kCPU);
  int index = -1;
  if (name == "cuda") index = 0;
  else if (name.rfind("cuda:", 0) == 0 && name.size() > 5 && name.size() < 9 &&
           name.find_first_not_of("0123456789", 5) == std::string::npos)
    index = std::stoi(name.substr(5));
  if (index < 0) throw UserError("device '" + name + "' is not a device name", "use auto, cpu, cuda or cuda:N");
  const int n = cuda_available() ? c10::cuda::device_count() : 0;
  if (index >= n)
    throw UserError(
        "device '" + name + "' is not here: " +
            (n == 0 ? "no CUDA GPU is visible (" + describe_compute() + ")" : std::to_string(n) + " CUDA GPU(s)"),
        "use --device cpu (or auto), or run on a machine with that GPU");
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

c10::ScalarType resolve_dtype(const std::string& name, const c10::Device& device) {
  if (name == "auto") return device.is_cuda() ? c10::kBFloat16 : c10::kFloat;
  if (name == "float32" || name == "f32") return c10::kFloat;
  if (name == "bfloat16" || name == "bf16") return c10::kBFloat16;
  throw UserError("dtype '" + name + "' is not a weight dtype", "use auto, float32 or bfloat16");
}

std::string device_label(const c10::Device& device) {
  if (!device.is_cuda()) return "cpu (" + std::to_string(at::get_num_threads()) + " threads)";
  const int i = device.has_index() ? device.index() : 0;
  return "cuda:" + std::to_string(i) + " " + at::cuda::getDeviceProperties(i)->name;
}

int64_t device_memory_bytes(const c10::Device& device) {
  if (!device.is_cuda()) return 0;
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  return stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
}

int64_t device_free_memory_bytes(const c10::Device& device) {
  if (!device.is_cuda()) return 0;
  c10::cuda::CUDAGuard guard(device.index());
  size_t free = 0, total = 0;
  C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  const auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  return static_cast<int64_t>(free) + stats.reserved_bytes[all].current - stats.allocated_bytes[all].current;
}

int64_t peak_memory_bytes(const c10::Device& device) {
  if (device.is_cuda()) {
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  }
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;  // Linux: kilobytes
}

void reset_peak_memory(const c10::Device& device) {
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
}

bool is_out_of_memory(const c10::Error& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e)) return true;
  const std::string& m = e.msg();
  return m.find("DefaultCPUAllocator: can't allocate memory") != std::string::npos ||
         m.find("DefaultCPUAllocator: not enough memory") != std::string::npos;
}

void release_cached_memory(const c10::Device& device) {
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
}

std::string describe_compute() {
  std::string s = "libtorch " + std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
                  std::to_string(TORCH_VERSION_PATCH);
  // CUDA_VERSION (cuda.h, via CUDAContext.h): the toolkit this file was compiled against.
  s += " (CUDA " + std::to_string(CUDA_VERSION / 1000) + "." + std::to_string(CUDA_VERSION % 1000 / 10) + " build)";
  s += "; cpu: " + std::to_string(at::get_num_threads()) + " threads, OpenMP wait policy " + omp_wait_policy() +
       ", malloc " + malloc_in_use();
  auto gpus = cuda_devices();
  if (gpus.empty()) s += "; cuda: no device";
  for (auto& g : gpus)
    s += "; cuda:" + std::to_string(g.index) + " " + g.name + " (sm_" + std::to_string(g.major) +
         std::to_string(g.minor) + ", " + std::to_string(g.total_memory >> 30) + " GiB)";
  return s;
}

}  // namespace brl::model
