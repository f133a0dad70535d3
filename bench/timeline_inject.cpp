// A CUPTI tracer loaded into any CUDA program through CUDA_INJECTION64_PATH:
// it records every kernel, memcpy and memset on the GPU's timeline (start and
// end in ns, name) and writes those that lie between the program's
// cudaProfilerStart and cudaProfilerStop as CSV to $MXDP_TIMELINE (default
// timeline.csv) when the program exits. Recording runs from the program's
// start: turned on only at cudaProfilerStart, CUPTI's own set-up stalled the
// window's first copy by 4-5 ms, a gap that was not the program's. scripts/step_timeline.py runs a benchmark's
// profile mode under it and says where the GPU was idle within the step,
// which Nsight Compute (kernels one at a time) cannot tell.
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Event {
  uint64_t start, end;
  std::string what;
};

std::mutex mu;
std::vector<Event> events;
uint64_t window_start = 0, window_end = ~uint64_t(0);  // CUPTI timestamps of cudaProfilerStart / Stop
bool failed = false;
constexpr size_t kBufferBytes = 8u << 20;

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  std::fprintf(stderr, "timeline: %s failed: %s\n", what, msg ? msg : "?");
  failed = true;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        events.push_back({k->start, k->end, k->name ? k->name : "?"});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
        events.push_back({m->start, m->end, "memcpy " + std::to_string(m->bytes) + " B kind " +
                                                std::to_string(int(m->copyKind))});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
        events.push_back({m->start, m->end, "memset " + std::to_string(m->bytes) + " B"});
        break;
      }
      default: break;
    }
  }
  std::free(buffer);
}

const CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                     CUPTI_ACTIVITY_KIND_MEMSET};

void CUPTIAPI on_api(void*, CUpti_CallbackDomain domain, CUpti_CallbackId id, const void* data) {
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API) return;
  const auto* info = static_cast<const CUpti_CallbackData*>(data);
  uint64_t now = 0;
  if (id == CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000 && info->callbackSite == CUPTI_API_EXIT) {
    check(cuptiGetTimestamp(&now), "cuptiGetTimestamp");
    window_start = now;
  } else if (id == CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000 && info->callbackSite == CUPTI_API_ENTER) {
    check(cuptiGetTimestamp(&now), "cuptiGetTimestamp");  // the program synchronized before stopping
    window_end = now;
  }
}

void write_out() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  const char* env = std::getenv("MXDP_TIMELINE");
  const std::string path = env && *env ? env : "timeline.csv";
  std::lock_guard<std::mutex> lock(mu);
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "timeline: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    return;
  }
  bool ok = std::fprintf(f, "start_ns,end_ns,name\n") > 0;
  size_t n = 0;
  for (const Event& e : events) {
    if (e.start < window_start || e.end > window_end) continue;
    ++n;
    std::string name = e.what;
    for (char& c : name)
      if (c == '"') c = '\'';
    ok &= std::fprintf(f, "%llu,%llu,\"%s\"\n", (unsigned long long)e.start, (unsigned long long)e.end,
                       name.c_str()) > 0;
  }
  ok &= std::fclose(f) == 0;
  if (!ok || failed) std::fprintf(stderr, "timeline: %s is incomplete\n", path.c_str());
  else std::fprintf(stderr, "timeline: %zu events in %s\n", n, path.c_str());
}

}  // namespace

// Called by the CUDA driver when it loads this library (CUDA_INJECTION64_PATH).
extern "C" int InitializeInjection(void) {
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
  CUpti_SubscriberHandle sub;
  check(cuptiSubscribe(&sub, on_api, nullptr), "cuptiSubscribe");
  check(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000),
        "cuptiEnableCallback");
  check(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000),
        "cuptiEnableCallback");
  for (CUpti_ActivityKind k : kKinds) check(cuptiActivityEnable(k), "cuptiActivityEnable");
  std::atexit(write_out);
  return 1;
}
