#include "hccl_group.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <mutex>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace mcore_hccl {

namespace {

constexpr int64_t kDefaultConnectTimeoutS = 120;  // HCCL's default for HCCL_CONNECT_TIMEOUT
constexpr int64_t kMinConnectTimeoutS = 120;      // HCCL_CONNECT_TIMEOUT's documented range
constexpr int64_t kMaxConnectTimeoutS = 7200;
constexpr int64_t kConnectGraceS = 20;  // HCCL waits HCCL_CONNECT_TIMEOUT + 20 s
constexpr uint32_t kDefaultBufferMb = 200;  // HCCL_BUFFSIZE's default

using Clock = std::chrono::steady_clock;

Status fail(int32_t code, std::string message) { return Status{code, std::move(message)}; }

const HcclApi *api_or(Status *st, const std::string &what) {
  std::string err;
  const HcclApi *api = HcclApi::get(&err);
  if (api == nullptr) *st = fail(MCORE_HCCL_LIBRARY_LOAD, what + ": " + err);
  return api;
}

// The device for a new communicator: `requested` (the C API's spec) when given, else the thread's
// current one when set, else MCORE_HCCL_DEVICE, else LOCAL_RANK, else 0 (then set on this thread).
Status choose_device(const HcclApi *api, int32_t requested, const std::string &group, int32_t *out) {
  int32_t cur = -1;
  if (requested < 0 && api->GetDevice(&cur) == ACL_SUCCESS && cur >= 0) {
    *out = cur;
    return {};
  }
  int32_t dev = requested;
  const char *why = "the group spec";
  const char *explicit_dev = std::getenv("MCORE_HCCL_DEVICE");
  if (dev < 0 && explicit_dev != nullptr && *explicit_dev != '\0') {
    char *end = nullptr;
    long v = std::strtol(explicit_dev, &end, 10);
    if (*end != '\0' || v < 0 || v >= INT32_MAX)
      return fail(MCORE_HCCL_INVALID_ARGUMENT,
                  std::string("MCORE_HCCL_DEVICE=") + explicit_dev + " is not a device number");
    dev = static_cast<int32_t>(v);
    why = "MCORE_HCCL_DEVICE";
  }
  if (dev < 0) {
    const char *lr = std::getenv("LOCAL_RANK");
    char *end = nullptr;
    long v = (lr != nullptr && *lr != '\0') ? std::strtol(lr, &end, 10) : -1;
    if (lr != nullptr && end != nullptr && *end == '\0' && v >= 0 && v < INT32_MAX) {
      dev = static_cast<int32_t>(v);
      why = "LOCAL_RANK";
    } else {
      dev = 0;
      why = "the default (no current device, no LOCAL_RANK)";
    }
  }
  aclError rc = api->SetDevice(dev);
  if (rc != ACL_SUCCESS)
    return fail(MCORE_HCCL_BACKEND, "group " + group + ": aclrtSetDevice(" + std::to_string(dev) + ") from " + why +
                                        " failed with ACL error " + std::to_string(rc));
  debug("group " + group + ": device " + std::to_string(dev) + " set from " + why);
  *out = dev;
  return {};
}

// Make the communicator's device current on this thread (destroy and abort may run anywhere).
Status enter_device(const HcclApi *api, const Comm *c) {
  int32_t cur = -1;
  if (api->GetDevice(&cur) == ACL_SUCCESS && cur == c->device) return {};
  aclError rc = api->SetDevice(c->device);
  if (rc != ACL_SUCCESS)
    return fail(MCORE_HCCL_BACKEND, "group " + c->name + ": aclrtSetDevice(" + std::to_string(c->device) +
                                        ") failed with ACL error " + std::to_string(rc));
  return {};
}

int32_t sync_timeout_ms(uint64_t timeout_ms) {
  if (timeout_ms == 0 || timeout_ms > static_cast<uint64_t>(INT32_MAX)) return INT32_MAX;
  return static_cast<int32_t>(timeout_ms);
}

int32_t init_status(HcclResult rc) {
  switch (rc) {
    case HCCL_E_TIMEOUT:
      return MCORE_HCCL_TIMEOUT;
    case HCCL_E_TCP_CONNECT:
    case HCCL_E_ROCE_CONNECT:
    case HCCL_E_NETWORK:
    case HCCL_E_REMOTE:
      return MCORE_HCCL_PEER_FAILED;
    default:
      return MCORE_HCCL_BACKEND;
  }
}

bool env_u32(const char *name, uint32_t *out) {
  const char *v = std::getenv(name);
  if (v == nullptr || *v == '\0') return false;
  char *end = nullptr;
  unsigned long x = std::strtoul(v, &end, 10);
  if (*end != '\0' || x > UINT32_MAX) return false;
  *out = static_cast<uint32_t>(x);
  return true;
}

// A whole number in [lo, hi] from an option's text; an error naming the group, key and value.
Status option_number(const std::string &group, const std::string &key, const std::string &value, int64_t lo,
                     int64_t hi, int64_t *out) {
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || errno != 0 || *end != '\0' || v < lo || v > hi)
    return fail(MCORE_HCCL_INVALID_ARGUMENT, "group " + group + ": option " + key + "=" + value +
                                                 " is not a whole number in " + std::to_string(lo) + ".." +
                                                 std::to_string(hi));
  *out = v;
  return {};
}

// Copy text into a fixed char field, NUL-terminated; an error when it does not fit.
Status option_text(const std::string &group, const std::string &key, const std::string &value, char *field,
                   size_t cap) {
  if (value.empty() || value.size() >= cap)
    return fail(MCORE_HCCL_INVALID_ARGUMENT, "group " + group + ": option " + key + " must be 1 to " +
                                                 std::to_string(cap - 1) + " bytes, got " +
                                                 std::to_string(value.size()));
  std::memset(field, 0, cap);
  std::memcpy(field, value.data(), value.size());
  return {};
}

// Apply the group's per-kind options (torch_npu's hccl_config keys) to the config. A key another
// backend reads (an NCCL field of the same per-kind file) is skipped; an HCCL key the library's
// config capability does not cover is an error naming the capability.
Status apply_options(const HcclApi *api, const std::string &name, const Options &options, HcclCommConfig *config) {
  const uint32_t cap = api->capability();
  auto needs = [&](const std::string &key, uint32_t c, const char *cap_name) -> Status {
    if (cap > c) return {};
    return fail(MCORE_HCCL_UNSUPPORTED, "group " + name + ": option " + key + " needs a CANN whose "
                "HcclGetCommConfigCapability() includes " + cap_name + " (" + std::to_string(c) + "); " + api->path +
                " reports " + std::to_string(cap));
  };
  for (const auto &kv : options) {
    const std::string &key = kv.first, &value = kv.second;
    int64_t v = 0;
    Status st;
    if (key == "hccl_buffer_size") {
      if (!(st = option_number(name, key, value, 1, UINT32_MAX - 1, &v)).ok()) return st;
      config->hcclBufferSize = static_cast<uint32_t>(v);
    } else if (key == "group_name") {
      if (!(st = needs(key, CAP_COMM_NAME, "HCCL_COMM_CONFIG_COMM_NAME")).ok()) return st;
      if (!(st = option_text(name, key, value, config->hcclUdi, sizeof config->hcclUdi)).ok()) return st;
    } else if (key == "hccl_op_expansion_mode" || key == "qos_traffic_class" || key == "qos_service_level") {
      // The traffic class and service level follow the expansion mode in the struct and came with it.
      if (!(st = needs(key, CAP_OP_EXPANSION_MODE, "HCCL_COMM_CONFIG_OP_EXPANSION_MODE")).ok()) return st;
      if (!(st = option_number(name, key, value, 0, UINT32_MAX - 1, &v)).ok()) return st;
      uint32_t *field = key == "hccl_op_expansion_mode" ? &config->hcclOpExpansionMode
                        : key == "qos_traffic_class"    ? &config->hcclRdmaTrafficClass
                                                        : &config->hcclRdmaServiceLevel;
      *field = static_cast<uint32_t>(v);
    } else if (key == "hccl_exec_timeout") {
      if (!(st = needs(key, CAP_EXEC_TIMEOUT, "HCCL_COMM_CONFIG_EXEC_TIMEOUT")).ok()) return st;
      if (!(st = option_number(name, key, value, 0, INT32_MAX - 1, &v)).ok()) return st;
      config->hcclExecTimeOut = static_cast<int32_t>(v);
    } else if (key == "hccl_algo") {
      if (!(st = needs(key, CAP_ALGO, "HCCL_COMM_CONFIG_ALGO")).ok()) return st;
      if (!(st = option_text(name, key, value, config->hcclAlgo, sizeof config->hcclAlgo)).ok()) return st;
    } else if (key == "hccl_sdma_qos") {
      // hcclQos follows hcclBufferName in the struct.
      if (!(st = needs(key, CAP_BUFFER_NAME, "HCCL_COMM_CONFIG_BUFFER_NAME")).ok()) return st;
      if (!(st = option_number(name, key, value, 0, UINT32_MAX - 1, &v)).ok()) return st;
      config->hcclQos = static_cast<uint32_t>(v);
    } else {
      debug("group " + name + ": option " + key + " is not an HCCL option (another backend's): skipped");
      continue;
    }
    debug("group " + name + ": option " + key + "=" + value);
  }
  return {};
}

// The config the library understands: its version and size, explicit values where it does not
// understand "not set", the group's options, and an error naming the capability when a request
// cannot be honoured.
Status build_config(const HcclApi *api, const std::string &name, uint32_t buffer_mb, uint32_t deterministic,
                    const Options &options, HcclCommConfig *config) {
  config_init(config);
  const uint32_t cap = api->capability();
  // "Not set" (0xffffffff) and deterministic 2 came with the releases that also added the
  // execution-timeout option; earlier ones read 0xffffffff as a value and refuse it.
  const bool knows_not_set = cap > CAP_EXEC_TIMEOUT;
  if (deterministic != kNotSet && deterministic > 2)
    return fail(MCORE_HCCL_INVALID_ARGUMENT, "group " + name + ": deterministic " + std::to_string(deterministic) +
                                                 " is not one of 0, 1, 2");
  if (deterministic == 2 && !knows_not_set)
    return fail(MCORE_HCCL_UNSUPPORTED,
                "group " + name + ": deterministic 2 (strict) needs a CANN whose HcclGetCommConfigCapability() "
                "includes HCCL_COMM_CONFIG_EXEC_TIMEOUT (8); " + api->path + " reports " + std::to_string(cap) +
                    (api->GetCommConfigCapability ? "" : " (it has no HcclGetCommConfigCapability)"));
  if (buffer_mb != 0) config->hcclBufferSize = buffer_mb;
  if (deterministic != kNotSet) config->hcclDeterministic = deterministic;
  if (!knows_not_set) {
    // Send what HCCL would have chosen from its environment.
    if (config->hcclBufferSize == kNotSet && !env_u32("HCCL_BUFFSIZE", &config->hcclBufferSize))
      config->hcclBufferSize = kDefaultBufferMb;
    if (config->hcclDeterministic == kNotSet) {
      const char *d = std::getenv("HCCL_DETERMINISTIC");
      config->hcclDeterministic = (d != nullptr && strcasecmp(d, "true") == 0) ? 1 : 0;
    }
    config->hcclRdmaTrafficClass = 0;
    config->hcclRdmaServiceLevel = 0;
  }
  Status st = apply_options(api, name, options, config);
  if (!st.ok()) return st;
  if (cap > CAP_COMM_NAME) {
    std::strncpy(config->hcclCommName, name.c_str(), kCommNameBytes - 1);
  } else {
    // The first config version: info header, buffer size, deterministic.
    ConfigInfo info{kConfigV1Bytes, kConfigMagic, 1, 0};
    std::memcpy(config->reserved, &info, sizeof(info));
    debug("group " + name + ": " + api->path + " predates HCCL_COMM_CONFIG_COMM_NAME; config version 1 (" +
          std::to_string(kConfigV1Bytes) + " bytes), no communicator name");
  }
  debug("group " + name + ": config version " + std::to_string(config_info(config).version) + ", " +
        std::to_string(config_info(config).size) + " bytes, capability " + std::to_string(cap) + ", buffer " +
        std::to_string(config->hcclBufferSize) + ", deterministic " + std::to_string(config->hcclDeterministic));
  return {};
}

// A new Comm around an HCCL communicator: its stream, on its device.
Status finish_comm(const HcclApi *api, HcclComm h, int32_t device, const std::string &name, uint32_t rank,
                   uint32_t size, uint64_t timeout_ms, Comm **out) {
  auto *c = new Comm();
  c->handle = h;
  c->device = device;
  c->name = name;
  c->rank = rank;
  c->size = size;
  c->timeout_ms = timeout_ms;
  aclError rc = api->CreateStream(&c->stream);
  if (rc != ACL_SUCCESS) {
    c->stream = nullptr;
    Status st = fail(MCORE_HCCL_BACKEND, "group " + name + ": aclrtCreateStream failed with ACL error " +
                                             std::to_string(rc));
    hccl_destroy(c, false);
    return st;
  }
  *out = c;
  return {};
}

// Wait until every member announced itself under <name>/hccl_arrived/<rank>: a peer that never
// comes is named here, within the group's bound, instead of inside HCCL's uninterruptible init.
Status wait_for_members(const mcore_hccl_group_spec &spec, const mcore_hccl_store &store, const std::string &name,
                        Clock::time_point deadline) {
  const std::string mine = name + "/hccl_arrived/" + std::to_string(spec.rank);
  const uint8_t one = 1;
  int32_t s = store.set(store.user_data, mine.c_str(), &one, 1);
  if (s != MCORE_HCCL_OK) return fail(s, "group " + name + ": announcing rank " + std::to_string(spec.rank) + " failed");
  std::vector<uint32_t> missing;
  int32_t first = MCORE_HCCL_OK;
  for (uint32_t r = 0; r < spec.size; ++r) {
    if (r == spec.rank) continue;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    const std::string key = name + "/hccl_arrived/" + std::to_string(r);
    uint8_t buf = 0;
    size_t len = 0;
    s = store.get(store.user_data, key.c_str(), &buf, 1, &len, static_cast<uint64_t>(std::max<int64_t>(left, 1)));
    if (s != MCORE_HCCL_OK) {
      missing.push_back(r);
      if (first == MCORE_HCCL_OK) first = s;
    }
  }
  if (missing.empty()) return {};
  std::string list;
  for (uint32_t r : missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
  return fail(first == MCORE_HCCL_OK ? MCORE_HCCL_TIMEOUT : first,
              "group " + name + ": group rank(s) " + list + " of " + std::to_string(spec.size) +
                  " did not arrive for HcclCommInitRootInfoConfig within " + std::to_string(spec.timeout_ms) + " ms");
}

}  // namespace

Status parse_options(const char *text, const std::string &group, Options *out) {
  out->clear();
  if (text == nullptr) return {};
  std::string all(text);
  size_t at = 0;
  while (at < all.size()) {
    size_t nl = all.find('\n', at);
    std::string line = all.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    at = nl == std::string::npos ? all.size() : nl + 1;
    if (line.empty()) continue;
    size_t eq = line.find('=');
    if (eq == std::string::npos || eq == 0)
      return fail(MCORE_HCCL_INVALID_ARGUMENT, "group " + group + ": option line '" + line.substr(0, 64) +
                                                   "' is not key=value");
    out->emplace_back(line.substr(0, eq), line.substr(eq + 1));
  }
  return {};
}

Status connect_timeout_s(int64_t *out) {
  const char *v = std::getenv("HCCL_CONNECT_TIMEOUT");
  if (v == nullptr || *v == '\0') {
    *out = kDefaultConnectTimeoutS;
    return {};
  }
  char *end = nullptr;
  errno = 0;
  long long s = std::strtoll(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || s <= 0)
    return fail(MCORE_HCCL_INVALID_ARGUMENT,
                std::string("HCCL_CONNECT_TIMEOUT=") + v + " is not a positive whole number of seconds");
  if (s < kMinConnectTimeoutS || s > kMaxConnectTimeoutS)
    return fail(MCORE_HCCL_INVALID_ARGUMENT, std::string("HCCL_CONNECT_TIMEOUT=") + v +
                                                 " is outside HCCL's documented range of 120..7200 seconds");
  *out = s;
  return {};
}

std::string root_info_key(const std::string &name) { return name + "/hccl_root_info"; }

namespace {

// A rank table (HCCL's version 1.0 JSON: servers by host, each with its devices and their ranks)
// built through the store: every member publishes "<host>\t<device>\t<device ip>" under
// <name>/hccl_rank_table/<rank> and reads the others' within the group's bound, so a member that
// never comes is named here. The text is the same on every member (it lists ranks in order).
Status exchange_rank_table(const mcore_hccl_group_spec &spec, const mcore_hccl_store &store, const std::string &name,
                           int32_t device, Clock::time_point deadline, std::string *json) {
  const char *dev_ip = std::getenv("MCORE_HCCL_DEVICE_IP");  // the NPU's own address (hccn_tool), if known
  const std::string host = spec.host_addr != nullptr && *spec.host_addr != '\0' ? spec.host_addr : "127.0.0.1";
  const std::string mine = host + "\t" + std::to_string(device) + "\t" + (dev_ip != nullptr ? dev_ip : "");
  const std::string prefix = name + "/hccl_rank_table/";
  int32_t s = store.set(store.user_data, (prefix + std::to_string(spec.rank)).c_str(),
                        reinterpret_cast<const uint8_t *>(mine.data()), mine.size());
  if (s != MCORE_HCCL_OK) return fail(s, "group " + name + ": publishing this rank's rank-table entry failed");
  std::vector<std::string> entries(spec.size);
  std::vector<uint32_t> missing;
  int32_t first = MCORE_HCCL_OK;
  for (uint32_t r = 0; r < spec.size; ++r) {
    if (r == spec.rank) {
      entries[r] = mine;
      continue;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    char buf[512];
    size_t len = 0;
    s = store.get(store.user_data, (prefix + std::to_string(r)).c_str(), reinterpret_cast<uint8_t *>(buf), sizeof buf,
                  &len, static_cast<uint64_t>(std::max<int64_t>(left, 1)));
    if (s != MCORE_HCCL_OK || len > sizeof buf) {
      missing.push_back(r);
      if (first == MCORE_HCCL_OK) first = s == MCORE_HCCL_OK ? MCORE_HCCL_BACKEND : s;
      continue;
    }
    entries[r].assign(buf, len);
  }
  if (!missing.empty()) {
    std::string list;
    for (uint32_t r : missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
    return fail(first, "group " + name + ": group rank(s) " + list + " of " + std::to_string(spec.size) +
                           " gave no rank-table entry within " + std::to_string(spec.timeout_ms) + " ms");
  }
  // Servers in order of their first rank; devices in rank order.
  std::vector<std::string> hosts;
  std::vector<std::string> devices;  // per host, the JSON objects
  for (uint32_t r = 0; r < spec.size; ++r) {
    const std::string &e = entries[r];
    size_t t1 = e.find('\t'), t2 = t1 == std::string::npos ? t1 : e.find('\t', t1 + 1);
    if (t2 == std::string::npos)
      return fail(MCORE_HCCL_BACKEND, "group " + name + ": rank " + std::to_string(r) + "'s rank-table entry is malformed");
    std::string h = e.substr(0, t1), d = e.substr(t1 + 1, t2 - t1 - 1), ip = e.substr(t2 + 1);
    for (const std::string &field : {h, d, ip})
      if (field.find_first_of("\"\\") != std::string::npos || field.size() > 128)
        return fail(MCORE_HCCL_BACKEND, "group " + name + ": rank " + std::to_string(r) + "'s rank-table entry is malformed");
    size_t i = std::find(hosts.begin(), hosts.end(), h) - hosts.begin();
    if (i == hosts.size()) {
      hosts.push_back(h);
      devices.emplace_back();
    }
    devices[i] += std::string(devices[i].empty() ? "" : ",") + "{\"device_id\":\"" + d + "\"," +
                  (ip.empty() ? "" : "\"device_ip\":\"" + ip + "\",") + "\"rank_id\":\"" + std::to_string(r) + "\"}";
  }
  std::string servers;
  for (size_t i = 0; i < hosts.size(); ++i)
    servers += std::string(i ? "," : "") + "{\"server_id\":\"" + hosts[i] + "\",\"device\":[" + devices[i] + "]}";
  *json = "{\"version\":\"1.0\",\"server_count\":\"" + std::to_string(hosts.size()) + "\",\"server_list\":[" + servers +
          "],\"status\":\"completed\"}";
  return {};
}

}  // namespace

Status hccl_create_group(const mcore_hccl_group_spec &spec, const mcore_hccl_store &store, Comm **out) {
  return hccl_create_group(spec, store, false, out);
}

Status hccl_create_group(const mcore_hccl_group_spec &spec, const mcore_hccl_store &store, bool cluster_info,
                         Comm **out) {
  const auto start = Clock::now();
  std::string name = spec.name != nullptr ? spec.name : "";
  if (name.empty()) return fail(MCORE_HCCL_INVALID_ARGUMENT, "group spec has no name");
  if (spec.size == 0 || spec.rank >= spec.size)
    return fail(MCORE_HCCL_INVALID_ARGUMENT, "group " + name + ": rank " + std::to_string(spec.rank) +
                                                 " is outside 0.." + std::to_string(spec.size));
  if (store.set == nullptr || store.get == nullptr)
    return fail(MCORE_HCCL_INVALID_ARGUMENT, "group " + name + ": store callbacks set/get must not be NULL");
  int64_t connect_s = 0;
  Status st = connect_timeout_s(&connect_s);
  if (!st.ok()) return st;
  if (spec.timeout_ms != 0 && static_cast<uint64_t>(connect_s + kConnectGraceS) * 1000 > spec.timeout_ms) {
    std::string line = "group " + name + ": HCCL waits up to HCCL_CONNECT_TIMEOUT + 20 = " +
                       std::to_string(connect_s + kConnectGraceS) + " s for its peers, longer than the group's " +
                       std::to_string(spec.timeout_ms) +
                       " ms; members are awaited through the store first, within the group's bound, but a connection "
                       "HCCL cannot make once all arrived ends only at HCCL's timeout (HCCL_CONNECT_TIMEOUT, 120..7200 s)";
    static std::once_flag once;
    bool first = false;
    std::call_once(once, [&] { first = true; });
    if (first) warn(line);
    else debug(line);
  }
  const HcclApi *api = api_or(&st, "group " + name);
  if (api == nullptr) return st;
  Options options;
  st = parse_options(spec_options(spec), name, &options);
  if (!st.ok()) return st;
  HcclCommConfig config;
  st = build_config(api, name, spec.buffer_size_mb, spec.deterministic, options, &config);
  if (!st.ok()) return st;
  int32_t device = 0;
  st = choose_device(api, spec.device, name, &device);
  if (!st.ok()) return st;
  const auto deadline = start + std::chrono::milliseconds(spec.timeout_ms == 0 ? INT32_MAX : spec.timeout_ms);

  if (cluster_info && api->CommInitClusterInfoMemConfig != nullptr) {
    std::string table;
    st = exchange_rank_table(spec, store, name, device, deadline, &table);
    if (!st.ok()) return st;
    debug("group " + name + ": HcclCommInitClusterInfoMemConfig from a rank table of " + std::to_string(spec.size) +
          " ranks built through the store");
    HcclComm comm = nullptr;
    HcclResult rc = api->CommInitClusterInfoMemConfig(table.c_str(), spec.rank, &config, &comm);
    if (rc != HCCL_SUCCESS || comm == nullptr)
      return fail(rc == HCCL_SUCCESS ? MCORE_HCCL_BACKEND : init_status(rc),
                  "group " + name + " (rank " + std::to_string(spec.rank) + " of " + std::to_string(spec.size) +
                      "): HcclCommInitClusterInfoMemConfig failed: " + api->describe(rc));
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return finish_comm(api, comm, device, name, spec.rank, spec.size,
                       spec.timeout_ms == 0 ? 0 : static_cast<uint64_t>(std::max<int64_t>(left, 1000)), out);
  }

  HcclRootInfo root{};
  const std::string key = root_info_key(name);
  if (spec.rank == 0) {
    const char *if_ip = std::getenv("HCCL_IF_IP");
    const char *ifname = std::getenv("HCCL_SOCKET_IFNAME");
    if ((if_ip == nullptr || *if_ip == '\0') && (ifname == nullptr || *ifname == '\0') && spec.host_addr != nullptr &&
        *spec.host_addr != '\0') {
      // HCCL reads HCCL_IF_IP when it builds the root info: bind where peers reach this host.
      setenv("HCCL_IF_IP", spec.host_addr, 0);
      debug("group " + name + ": HCCL_IF_IP=" + spec.host_addr + " (the address peers reach this host at)");
    }
    HcclResult rc = api->GetRootInfo(&root);
    if (rc != HCCL_SUCCESS) return fail(MCORE_HCCL_BACKEND, "group " + name + ": HcclGetRootInfo failed: " + api->describe(rc));
    int32_t s = store.set(store.user_data, key.c_str(), reinterpret_cast<const uint8_t *>(root.internal), kRootInfoBytes);
    if (s != MCORE_HCCL_OK)
      return fail(s, "group " + name + ": publishing the root info under " + key + " failed (status " + std::to_string(s) + ")");
  } else {
    size_t len = 0;
    int32_t s = store.get(store.user_data, key.c_str(), reinterpret_cast<uint8_t *>(root.internal), kRootInfoBytes, &len,
                          spec.timeout_ms);
    if (s != MCORE_HCCL_OK)
      return fail(s, "group " + name + ": waiting " + std::to_string(spec.timeout_ms) + " ms for the root info under " +
                         key + " from group rank 0 failed (status " + std::to_string(s) + ")");
    if (len != kRootInfoBytes)
      return fail(MCORE_HCCL_BACKEND, "group " + name + ": root info under " + key + " is " + std::to_string(len) +
                                          " bytes, expected " + std::to_string(kRootInfoBytes));
  }
  if (spec.size > 1) {
    st = wait_for_members(spec, store, name, deadline);
    if (!st.ok()) return st;
  }

  HcclComm comm = nullptr;
  HcclResult rc = api->CommInitRootInfoConfig(spec.size, &root, spec.rank, &config, &comm);
  if (rc != HCCL_SUCCESS) {
    std::string msg = "group " + name + " (rank " + std::to_string(spec.rank) + " of " + std::to_string(spec.size) +
                      "): HcclCommInitRootInfoConfig failed: " + api->describe(rc);
    if (rc == HCCL_E_TIMEOUT) msg += "; peers did not connect within HCCL_CONNECT_TIMEOUT=" + std::to_string(connect_s) + " s";
    if (rc == HCCL_E_PARA || rc == HCCL_E_MEMORY)
      msg += " (config version " + std::to_string(config_info(&config).version) + ", " +
             std::to_string(config_info(&config).size) + " bytes, capability " + std::to_string(api->capability()) + ")";
    return fail(init_status(rc), msg);
  }
  if (comm == nullptr)
    return fail(MCORE_HCCL_BACKEND, "group " + name + ": HcclCommInitRootInfoConfig returned no communicator");
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return finish_comm(api, comm, device, name, spec.rank, spec.size,
                     spec.timeout_ms == 0 ? 0 : static_cast<uint64_t>(std::max<int64_t>(left, 1000)), out);
}

Status hccl_create_subgroup(Comm *parent, const std::string &name, const uint32_t *parent_ranks, uint32_t n,
                            uint32_t sub_rank, uint64_t sub_comm_id, const Options &options, Comm **out) {
  if (parent == nullptr || parent_ranks == nullptr || n == 0 || sub_rank >= n)
    return fail(MCORE_HCCL_INVALID_ARGUMENT, "group " + name + ": sub-communicator needs a parent, ranks and sub_rank < " +
                                                 std::to_string(n));
  if (!std::is_sorted(parent_ranks, parent_ranks + n))
    return fail(MCORE_HCCL_INVALID_ARGUMENT, "group " + name + ": parent ranks must be ascending");
  Status st;
  const HcclApi *api = api_or(&st, "group " + name);
  if (api == nullptr) return st;
  if (api->CreateSubCommConfig == nullptr)
    return fail(MCORE_HCCL_UNSUPPORTED, "group " + name + ": " + api->path +
                                            " has no HcclCreateSubCommConfig; create the group from root info instead");
  HcclCommConfig config;
  st = build_config(api, name, 0, kNotSet, options, &config);
  if (!st.ok()) return st;
  st = enter_device(api, parent);
  if (!st.ok()) return st;
  std::vector<uint32_t> ranks(parent_ranks, parent_ranks + n);
  HcclComm comm = nullptr;
  HcclComm ph = parent->handle;
  HcclResult rc = api->CreateSubCommConfig(&ph, n, ranks.data(), sub_comm_id, sub_rank, &config, &comm);
  if (rc != HCCL_SUCCESS || comm == nullptr)
    return fail(rc == HCCL_SUCCESS ? MCORE_HCCL_BACKEND : init_status(rc),
                "group " + name + ": HcclCreateSubCommConfig failed: " + api->describe(rc));
  return finish_comm(api, comm, parent->device, name, sub_rank, n, parent->timeout_ms, out);
}

namespace {

Status sync_stream(const HcclApi *api, Comm *c, const char *what) {
  aclError rc = api->SynchronizeStreamWithTimeout(c->stream, sync_timeout_ms(c->timeout_ms));
  if (rc == ACL_SUCCESS) return {};
  std::string msg = "group " + c->name + ": " + what + " did not complete: aclrtSynchronizeStreamWithTimeout(" +
                    std::to_string(sync_timeout_ms(c->timeout_ms)) + " ms) returned ACL error " + std::to_string(rc);
  HcclResult async = HCCL_SUCCESS;
  if (api->GetCommAsyncError != nullptr && api->GetCommAsyncError(c->handle, &async) == HCCL_SUCCESS &&
      async != HCCL_SUCCESS)
    msg += "; the communicator's asynchronous error: " + api->describe(async);
  if (rc == ACL_ERROR_RT_STREAM_SYNC_TIMEOUT) return fail(MCORE_HCCL_TIMEOUT, msg);
  return fail(async == HCCL_SUCCESS ? MCORE_HCCL_BACKEND : init_status(async), msg);
}

Status ensure_buffer(const HcclApi *api, Comm *c, size_t bytes) {
  if (c->buf != nullptr && c->buf_bytes >= bytes) return {};
  if (c->buf != nullptr) api->Free(c->buf);
  c->buf = nullptr;
  c->buf_bytes = 0;
  void *p = nullptr;
  aclError rc = api->Malloc(&p, std::max<size_t>(bytes, 64), ACL_MEM_MALLOC_HUGE_FIRST);
  if (rc != ACL_SUCCESS || p == nullptr)
    return fail(MCORE_HCCL_BACKEND, "group " + c->name + ": aclrtMalloc(" + std::to_string(bytes) +
                                        ") failed with ACL error " + std::to_string(rc));
  c->buf = p;
  c->buf_bytes = std::max<size_t>(bytes, 64);
  return {};
}

}  // namespace

Status hccl_allreduce_sum_i64(Comm *c, int64_t *inout, size_t count) {
  if (c == nullptr || (inout == nullptr && count > 0))
    return fail(MCORE_HCCL_INVALID_ARGUMENT, "all-reduce needs a communicator and a buffer");
  if (count == 0) return {};
  Status st;
  const HcclApi *api = api_or(&st, "group " + c->name);
  if (api == nullptr) return st;
  st = enter_device(api, c);
  if (!st.ok()) return st;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const bool i32 = c->int32_only;
    std::vector<int32_t> narrow;
    const void *host = inout;
    size_t bytes = count * sizeof(int64_t);
    if (i32) {
      const int64_t limit = INT32_MAX / static_cast<int64_t>(std::max<uint32_t>(c->size, 1));
      narrow.resize(count);
      for (size_t i = 0; i < count; ++i) {
        if (inout[i] > limit || inout[i] < -limit)
          return fail(MCORE_HCCL_UNSUPPORTED, "group " + c->name + ": " + api->path +
                                                  " sums no int64 here and value " + std::to_string(inout[i]) +
                                                  " could overflow an int32 sum over " + std::to_string(c->size) +
                                                  " ranks");
        narrow[i] = static_cast<int32_t>(inout[i]);
      }
      host = narrow.data();
      bytes = count * sizeof(int32_t);
    }
    st = ensure_buffer(api, c, bytes);
    if (!st.ok()) return st;
    aclError arc = api->Memcpy(c->buf, c->buf_bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE);
    if (arc != ACL_SUCCESS)
      return fail(MCORE_HCCL_BACKEND, "group " + c->name + ": aclrtMemcpy to the device failed with ACL error " +
                                          std::to_string(arc));
    HcclResult rc = api->AllReduce(c->buf, c->buf, count, i32 ? HCCL_DATA_TYPE_INT32 : HCCL_DATA_TYPE_INT64,
                                   HCCL_REDUCE_SUM, c->handle, c->stream);
    if (rc == HCCL_E_NOT_SUPPORT && !i32) {
      debug("group " + c->name + ": HcclAllReduce has no int64 here (" + api->describe(rc) + "); summing int32");
      c->int32_only = true;
      continue;
    }
    if (rc != HCCL_SUCCESS)
      return fail(init_status(rc), "group " + c->name + ": HcclAllReduce failed: " + api->describe(rc));
    st = sync_stream(api, c, "HcclAllReduce");
    if (!st.ok()) return st;
    void *dst = i32 ? static_cast<void *>(narrow.data()) : static_cast<void *>(inout);
    arc = api->Memcpy(dst, bytes, c->buf, bytes, ACL_MEMCPY_DEVICE_TO_HOST);
    if (arc != ACL_SUCCESS)
      return fail(MCORE_HCCL_BACKEND, "group " + c->name + ": aclrtMemcpy from the device failed with ACL error " +
                                          std::to_string(arc));
    if (i32)
      for (size_t i = 0; i < count; ++i) inout[i] = narrow[i];
    return {};
  }
  return fail(MCORE_HCCL_BACKEND, "group " + c->name + ": HcclAllReduce refused int32 and int64");
}

Status hccl_barrier(Comm *c) {
  if (c == nullptr) return fail(MCORE_HCCL_INVALID_ARGUMENT, "barrier needs a communicator");
  Status st;
  const HcclApi *api = api_or(&st, "group " + c->name);
  if (api == nullptr) return st;
  st = enter_device(api, c);
  if (!st.ok()) return st;
  HcclResult rc = api->Barrier(c->handle, c->stream);
  if (rc != HCCL_SUCCESS) return fail(init_status(rc), "group " + c->name + ": HcclBarrier failed: " + api->describe(rc));
  return sync_stream(api, c, "HcclBarrier");
}

Status hccl_destroy(Comm *c, bool abort) {
  if (c == nullptr) return {};
  Status st;
  const HcclApi *api = api_or(&st, "group " + c->name);
  if (api == nullptr) return st;
  st = enter_device(api, c);
  if (!st.ok()) return st;
  const uint64_t bound_ms = c->timeout_ms == 0 ? 60000 : std::min<uint64_t>(c->timeout_ms, 600000);
  if (abort && api->DeviceTaskAbort != nullptr) {
    aclError rc = api->DeviceTaskAbort(c->device, static_cast<uint32_t>(std::min<uint64_t>(bound_ms, 10000)));
    debug("group " + c->name + ": aclrtDeviceTaskAbort(" + std::to_string(c->device) + ") returned " +
          std::to_string(rc));
  }
  if (c->handle != nullptr) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(bound_ms);
    auto pause = std::chrono::milliseconds(2);
    int tries = 0;
    for (;;) {
      HcclResult rc = api->CommDestroy(c->handle);
      ++tries;
      if (rc == HCCL_SUCCESS) break;
      if (rc == HCCL_E_AGAIN && Clock::now() + pause < deadline) {
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::milliseconds(100));
        continue;
      }
      // HCCL still holds the communicator: keep our stream and buffer alive with it.
      return fail(rc == HCCL_E_AGAIN ? MCORE_HCCL_TIMEOUT : MCORE_HCCL_BACKEND,
                  "group " + c->name + ": HcclCommDestroy failed after " + std::to_string(tries) +
                      " tries: " + api->describe(rc));
    }
    if (tries > 1) debug("group " + c->name + ": HcclCommDestroy succeeded after " + std::to_string(tries) + " tries");
    c->handle = nullptr;
  }
  if (c->stream != nullptr) api->DestroyStream(c->stream);
  if (c->buf != nullptr) api->Free(c->buf);
  delete c;
  return {};
}

}  // namespace mcore_hccl
