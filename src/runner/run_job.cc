#include "runner/run_job.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include <chrono>
#include <filesystem>
#include <functional>
#include <iostream>

#include "base/files.h"
#include "contract/container_contract.h"
#include "core/allocation_codec.h"
#include "core/fit.h"
#include "core/node_state.h"
#include "core/policy.h"
#include "core/policy_placer.h"
#include "host/paths.h"
#include "runner/job_watch.h"
#include "runner/mps_job.h"

namespace tessera::runner {
namespace {

namespace fs = std::filesystem;

constexpr const char* kLocalNode = "local";
constexpr const char* kJobContainer = "job";

core::PodAllocation AllocationOf(const LedgerEntry& e) {
  core::PodAllocation a;
  a.node = kLocalNode;
  a.containers.push_back(e.slices);
  return a;
}

// The node as the ledger's live jobs leave it.
Result<core::NodeState> LocalNodeState(const std::vector<core::Gpu>& gpus,
                                       const std::vector<LedgerEntry>& entries) {
  core::NodeState node(kLocalNode, gpus);
  for (const auto& e : entries) {
    // A GPU vanished or shrank since that job started: its slice cannot be
    // accounted, so placing anything would risk overcommit.
    TESSERA_RETURN_IF_ERROR_WRAP(node.Apply(AllocationOf(e)),
                                 "job " + e.job_id + " holds a slice this machine can no longer account");
  }
  return node;
}

std::string Joined(const std::vector<std::string>& words, const std::string& sep) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : sep) + w;
  return out;
}

// Why one GPU cannot take the job's slice, in `tessera run`'s terms (its
// flags, jobs and slices) rather than the pod/container wording the core
// engine uses for Kubernetes.
std::string WhyNot(const core::GpuState& gpu, int index, const core::GpuCheck& check,
                   const SliceRequest& request) {
  const std::string head = gpu.gpu.uuid + " (#" + std::to_string(index) + ", " + gpu.gpu.model + "): ";
  switch (check.reason) {
    case core::GpuReason::kFits:
      return head + "fits";
    case core::GpuReason::kUnhealthy:
      return head + "unhealthy";
    case core::GpuReason::kHeldByUnplacedPod:  // a cluster's case; tessera run never marks a GPU held
      return head + "held whole by " + gpu.gpu.held_by;
    case core::GpuReason::kUuidNotAllowed:
      return head + "not among the GPUs the job may use";
    case core::GpuReason::kTypeNotAllowed:
      return head + "model does not match --gpu-type " + Joined(request.gpu_types, " or ");
    case core::GpuReason::kHeldExclusively:
      return head + "held by another job alone (--gpucores 100)";
    case core::GpuReason::kNeedsExclusive:
      return head + "in use by " + std::to_string(check.free) +
             " other slice(s); --gpucores 100 needs the GPU to itself";
    case core::GpuReason::kNoFreeSlot:
      return head + "all " + std::to_string(check.asked) + " of its slice slots are in use";
    case core::GpuReason::kInsufficientMemory:
      return head + "not enough memory: " + std::to_string(check.asked) + " MiB asked, " +
             std::to_string(check.free) + " MiB free";
    case core::GpuReason::kInsufficientCores:
      return head + "not enough compute: " + std::to_string(check.asked) + "% asked, " +
             std::to_string(check.free) + "% free";
    case core::GpuReason::kUsedBySameContainer:
      return head + "already holds another slice of this job";
    case core::GpuReason::kInMigMode:
      return head + "in MIG mode: it offers MIG instances, not slices";
    case core::GpuReason::kReplicasOnly:  // sharing modes are a cluster's; tessera run's GPUs are vgpu
    case core::GpuReason::kModeMismatch:
    case core::GpuReason::kNeedsWholeGpu:
      return head + "in " + core::SharingModeName(gpu.gpu.mode) + " mode, which takes no such slice";
  }
  return head + std::string(core::ReasonName(check.reason));
}

// The refusal of a request that does not fit: which GPU lacks what.
std::string RefusalMessage(const core::NodeState& node, const core::FitResult& fit,
                           const SliceRequest& request) {
  if (fit.node_reason != core::NodeReason::kNotEnoughGpus) {
    return "the slice does not fit on this machine: " + fit.message;  // not reached: no host resources asked
  }
  const int total = static_cast<int>(node.gpus().size());
  if (total == 0) return "the slice does not fit on this machine: it has no GPU";
  std::string out;
  if (request.gpus == 1) {
    out = "the slice does not fit on this machine:";
  } else {
    const int usable = total - static_cast<int>(fit.rejections.size());
    out = "the job's " + std::to_string(request.gpus) + " slices do not fit on this machine: they need " +
          std::to_string(request.gpus) + " different GPUs, ";
    out += fit.rejections.empty()
               ? "and it has " + std::to_string(total)
               : "and " + std::to_string(usable) + " of its " + std::to_string(total) + " can take one:";
  }
  for (const auto& r : fit.rejections) {
    out += "\n  " + WhyNot(node.gpus().at(static_cast<size_t>(r.gpu)), r.gpu, r.check, request);
  }
  return out;
}

}  // namespace

Result<Reservation> ReserveSlice(SliceLedger& ledger, const std::vector<core::Gpu>& gpus,
                                 const SliceRequest& request, const std::vector<std::string>& command) {
  TESSERA_RETURN_IF_ERROR(Validate(request));
  TESSERA_ASSIGN_OR_RETURN(const std::string policy_name, CorePolicyName(request));
  TESSERA_ASSIGN_OR_RETURN(const std::unique_ptr<core::Policy> policy, core::MakePolicy(policy_name));
  const core::PodRequest pod = ToPodRequest(request);

  Reservation out;
  auto reserve = [&](std::vector<LedgerEntry>& entries) -> Status {
    TESSERA_ASSIGN_OR_RETURN(core::NodeState node, LocalNodeState(gpus, entries));
    core::Placer placer({std::move(node)});
    auto decision = placer.Choose(pod, *policy);
    if (!decision) {
      out.refusal = RefusalMessage(placer.node(0), core::FitNode(placer.node(0), pod), request);
      return Status::Ok();  // nothing added: the write leaves the ledger as it was
    }
    TESSERA_ASSIGN_OR_RETURN(const core::PodAllocation allocation, placer.Commit(*decision, pod));
    LedgerEntry e = NewEntry(command);
    e.slices = allocation.containers.at(0);
    e.slices.container = kJobContainer;
    e.region_path = ledger.dir() + "/jobs/" + e.job_id + "/" + host::kRegionFileName;
    e.core_policy = request.core_policy;
    entries.push_back(e);
    out.slice = ReservedSlice{e, AllocationOf(e)};
    return Status::Ok();
  };
  TESSERA_RETURN_IF_ERROR(ledger.Update(reserve));
  return out;
}

Result<JobSpec> BuildJobSpec(const ReservedSlice& slice, const InstallPaths& paths, const LocalGpus& local,
                             const std::vector<std::string>& command) {
  if (!fs::exists(paths.libvgpu)) {
    return Error{"the interception library " + paths.libvgpu +
                 " is missing; build tessera first (make) or set TESSERA_LIBVGPU"};
  }
  TESSERA_ASSIGN_OR_RETURN(const std::string encoded, core::EncodeAllocation(slice.allocation));
  JobSpec spec;
  spec.argv = command;
  spec.set_env = local.job_env;
  spec.set_env[contract::kAllocationEnv] = encoded;
  spec.set_env[contract::kContainerNameEnv] = kJobContainer;
  spec.set_env[contract::kSharedCacheEnv] = slice.entry.region_path;
  spec.set_env[contract::kJobIdEnv] = slice.entry.job_id;
  // The limits libvgpu believes over the environment and the region, both of
  // which the job can change (docs/security.md): a read-only file beside the
  // region, named by TESSERA_LIMITS. The job's user owns it, as it owns the
  // ledger; what stops that user is the machine's business, not tessera's.
  const std::string limits =
      (fs::path(slice.entry.region_path).parent_path() / contract::kLimitsFileName).string();
  if (auto written = files::ReplaceAtomically(limits, encoded); !written.ok())
    return written.error().Wrap("the job's limits file");
  ::chmod(limits.c_str(), 0444);
  spec.set_env[contract::kLimitsEnv] = limits;
  // Always set, so a GPU_CORE_UTILIZATION_POLICY inherited from the caller's
  // environment cannot silently change what --core-policy promised.
  spec.set_env[contract::kCorePolicyEnv] =
      slice.entry.core_policy.empty() ? std::string(contract::kCorePolicyDefault) : slice.entry.core_policy;
  spec.prepend_path_env = local.job_path_env;
  spec.prepend_path_env["LD_PRELOAD"] = paths.libvgpu;
  return spec;
}

Status CheckMigFlags(const SliceRequest& slice) {
  const char* flag = slice.memory_mib > 0 || slice.memory_percent ? "--gpumem"
                     : slice.cores > 0                            ? "--gpucores"
                     : slice.gpus != 1                            ? "--gpus"
                     : !slice.gpu_types.empty()                   ? "--gpu-type"
                                                                  : nullptr;
  if (flag == nullptr) return Status::Ok();
  return Error{std::string("--mig cannot be combined with ") + flag +
               ": a MIG instance's memory and compute are fixed by its profile and isolated by the GPU "
               "itself, so there is no slice to size: choose the profile "
               "that fits"};
}

namespace {

// MIG through NVML, opened when first needed (most runs never need it).
class LazyMig {
 public:
  explicit LazyMig(const LocalGpus& local) : local_(local) {}
  Result<host::MigDriver*> driver() {
    if (!opened_) {
      auto opened = OpenLocalMig(local_);
      if (!opened.ok()) return opened.error();
      opened_ = std::move(opened).value();
    }
    return opened_->driver.get();
  }

 private:
  const LocalGpus& local_;
  std::optional<LocalMig> opened_;
};

// Destroys what crashed `tessera run --mig` jobs left; failures only warn:
// the instance stays recorded and is tried again next time.
void CleanOrphans(SliceLedger& ledger, LazyMig& mig, bool quiet) {
  auto entries = ledger.List();
  if (!entries.ok() || std::none_of(entries->begin(), entries->end(), IsOrphaned)) return;
  auto driver = mig.driver();
  if (!driver.ok()) {
    std::cerr << "tessera run: cannot remove the MIG instances of ended jobs: " << driver.error().message
              << "\n";
    return;
  }
  auto notes = CleanOrphanedInstances(ledger, **driver);
  if (!notes.ok()) {
    std::cerr << "tessera run: cannot remove the MIG instances of ended jobs: " << notes.error().message
              << "\n";
    return;
  }
  for (const auto& n : *notes) {
    if (!quiet || n.rfind("removed", 0) != 0) std::cerr << "tessera run: " << n << "\n";
  }
}

// GPUs in MIG mode offer MIG instances, not slices: marks them so that the
// core engine refuses them with that reason.
void MarkMigModeGpus(std::vector<core::Gpu>& gpus, LazyMig& mig) {
  if (std::none_of(gpus.begin(), gpus.end(), [](const core::Gpu& g) { return g.mig_capable; })) return;
  auto driver = mig.driver();
  if (!driver.ok()) return;  // no MIG API: no GPU can be in MIG mode
  auto listed = (*driver)->List();
  if (!listed.ok()) return;
  for (const auto& state : *listed) {
    for (auto& g : gpus) {
      if (g.uuid == state.uuid && (state.mig_enabled || !state.instances.empty())) {
        g.mode = core::SharingMode::kMigStatic;
      }
    }
  }
}

// Runs the job to its end, then `release`s what it held and ends the way the
// job did; `started` runs once it was started (or failed to). Returns 1 when
// the job cannot be started.
int SuperviseAndExit(const JobSpec& spec, const std::function<void()>& release,
                     const std::function<void()>& started = nullptr) {
  auto pid = StartJob(spec);
  if (started) started();
  if (!pid.ok()) {
    std::cerr << "tessera run: " << pid.error().message << "\n";
    release();
    return 1;
  }
  JobExit exit = WaitForJob(*pid);
  release();
  ExitLike(exit);
}

constexpr int kBlockedDuringSetup[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

int RunInMigInstance(const RunOptions& options, const LocalGpus& local, SliceLedger& ledger, LazyMig& mig) {
  auto driver = mig.driver();
  if (!driver.ok()) {
    std::cerr << "tessera run: --mig: " << driver.error().message << "\n";
    return kExitDoesNotFit;
  }
  MigRequest request = *options.mig;
  request.simulated = local.simulated;
  // A signal while the instance is being made is held until it exists (or
  // failed), so that it never leaves an instance behind.
  sigset_t setup, previous;
  sigemptyset(&setup);
  for (int sig : kBlockedDuringSetup) sigaddset(&setup, sig);
  ::sigprocmask(SIG_BLOCK, &setup, &previous);
  auto unblock = [&] { ::sigprocmask(SIG_SETMASK, &previous, nullptr); };

  auto reservation = ReserveMigInstance(ledger, **driver, request, options.command);
  if (!reservation.ok() || !reservation->entry) {
    unblock();
    std::cerr << "tessera run: " << (reservation.ok() ? reservation->refusal : reservation.error().message)
              << "\n";
    return reservation.ok() ? kExitDoesNotFit : 1;
  }
  auto entry = CreateMigInstance(ledger, **driver, *reservation->entry);
  if (!entry.ok()) {
    unblock();
    std::cerr << "tessera run: " << entry.error().message << "\n";
    return 1;
  }
  auto release = [&] {
    if (auto st = ReleaseMigInstance(ledger, **driver, *entry); !st.ok()) {
      std::cerr << "tessera run: " << st.error().message
                << "; the next `tessera run` removes it once nothing uses it\n";
    }
  };
  sigset_t pending;
  sigemptyset(&pending);
  ::sigpending(&pending);
  for (int sig : kBlockedDuringSetup) {
    if (sigismember(&pending, sig)) {  // asked to stop before the job started
      release();
      ExitLike(JobExit{128 + sig, sig, false});
    }
  }
  const MigInstanceRecord& m = *entry->mig;
  if (!options.quiet) {
    std::cerr << "tessera run: " << entry->job_id << " in MIG " << m.profile << " " << m.mig_uuid
              << " on GPU " << m.gpu_index << " (" << m.parent_uuid << ", slice " << m.start << ", "
              << m.memory_mib << " MiB, " << m.sm_count << " SMs)\n";
  }
  // The job starts with the mask this process had; this process unblocks once
  // the job's forwarding handlers are in place.
  JobSpec spec = BuildMigJobSpec(*entry, local, options.command);
  spec.signal_mask = previous;
  return SuperviseAndExit(spec, release, unblock);
}

}  // namespace

int RunAndExit(const RunOptions& options) {
  if (options.command.empty()) {
    std::cerr << "tessera run: no command given; usage: tessera run [options] -- CMD [ARGS...]\n";
    return kExitDoesNotFit;
  }
  if (options.mig && options.mps) {
    std::cerr << "tessera run: --mig and --mps cannot be combined: MPS on MIG devices is not supported\n";
    return kExitDoesNotFit;
  }
  Status flags = options.mig ? CheckMigFlags(options.slice) : Validate(options.slice);
  if (flags.ok() && options.mps) flags = CheckMpsFlags(options.slice);
  if (auto st = flags; !st.ok()) {
    std::cerr << "tessera run: " << st.error().message << "\n";
    return kExitDoesNotFit;
  }
  const InstallPaths paths = DiscoverInstallPaths();
  auto local = OpenLocalGpus({options.sim_spec}, paths);
  if (!local.ok()) {
    std::cerr << "tessera run: " << local.error().message << "\n";
    return 1;
  }
  if (!local->note.empty() && !options.quiet) std::cerr << local->note << "\n";

  SliceLedger ledger(options.ledger_dir.empty() ? host::DefaultRunStateDir() : options.ledger_dir);
  LazyMig mig(*local);
  CleanOrphans(ledger, mig, options.quiet);
  if (options.mig) return RunInMigInstance(options, *local, ledger, mig);
  MarkMigModeGpus(local->gpus, mig);

  auto reservation = ReserveSlice(ledger, local->gpus, options.slice, options.command);
  if (!reservation.ok()) {
    std::cerr << "tessera run: " << reservation.error().message << "\n";
    return 1;
  }
  if (!reservation->slice) {
    std::cerr << "tessera run: " << reservation->refusal << "\n";
    return kExitDoesNotFit;
  }
  const ReservedSlice* slice = &*reservation->slice;
  std::unique_ptr<RunningJobWatch> watch;  // the enforcement of last resort (job_watch.h)
  auto release = [&] {
    if (watch) watch->watch->Stop();
    (void)ledger.Remove(slice->entry.job_id);
    std::error_code ec;
    fs::remove_all(fs::path(slice->entry.region_path).parent_path(), ec);
  };
  std::error_code ec;
  fs::create_directories(fs::path(slice->entry.region_path).parent_path(), ec);
  if (ec) {
    std::cerr << "tessera run: cannot create the job's region directory: " << ec.message() << "\n";
    release();
    return 1;
  }
  auto spec = options.mps ? PrepareMpsJob(*slice, paths, *local, options.command, options.quiet)
                          : BuildJobSpec(*slice, paths, *local, options.command);
  if (!spec.ok()) {
    std::cerr << "tessera run: " << spec.error().message << "\n";
    release();
    return 1;
  }
  if (!options.quiet && !options.mps) {
    std::cerr << "tessera run: " << slice->entry.job_id << " on";
    for (const auto& d : slice->entry.slices.devices) {
      std::cerr << " " << d.uuid << " (" << d.memory_mib << " MiB, ";
      if (d.cores == 0 || d.cores == 100) {
        std::cerr << (d.cores == 0 ? "no compute limit)" : "the GPU's compute alone)");
      } else {
        std::cerr << d.cores << "% compute, --core-policy " << slice->entry.core_policy << ")";
      }
    }
    std::cerr << "\n";
  }
  if (!options.mps) watch = StartJobWatch(*slice, *local);
  return SuperviseAndExit(*spec, release);
}

}  // namespace tessera::runner
