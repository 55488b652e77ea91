// `tessera run`: run a command on an enforced GPU slice of this machine.
#include <memory>
#include <string>
#include <vector>

#include "cli/command_registry.h"
#include "runner/run_job.h"

namespace tessera::cli {
namespace {

struct RunFlags {
  runner::RunOptions options;
  std::string gpumem;
  std::string sim;
  std::string mig;
  int gpu = 0;
  CLI::Option* gpu_option = nullptr;
  std::vector<std::string> command;
};

const CommandRegistration kRun{
    {"run", 10, [](CLI::App& root) {
       auto flags = std::make_shared<RunFlags>();
       auto* cmd = root.add_subcommand(
           "run", "Run a command on a GPU slice of this machine (memory + compute enforced by libvgpu.so)");
       cmd->footer(
           "\nThe slice is placed with tessera's placement engine against the slices other `tessera run` "
           "jobs\n"
           "hold (a node-local ledger; a dead job's slice is freed), and enforced inside the job by "
           "libvgpu.so\n"
           "(LD_PRELOAD). Without an NVIDIA driver, or with --sim, the job runs on tessera's simulated GPU.\n"
           "\n"
           "Compute: --gpucores 30 is a share of the GPU's time, measured as device time the job's kernels\n"
           "use. Under the default --core-policy the job is held to it only while other processes use the\n"
           "GPU: alone on its GPU it may take idle time, up to the whole GPU; --core-policy force holds it\n"
           "to 30 % even then (what a benchmark of a slice wants), disable lifts the limit.\n"
           "\n"
           "Examples:\n"
           "  tessera run --gpumem 4000 --gpucores 30 -- python train.py\n"
           "  tessera run --gpumem 4000 --gpucores 30 --core-policy force -- ./benchmark\n"
           "  tessera run --gpus 2 --gpumem 50% --gpu-type A100 -- ./multi_gpu_job\n"
           "  tessera run --sim 2xH100-80GB --gpumem 8Gi -- ./my_cuda_program\n"
           "  tessera run --mig 1g.10gb -- python infer.py\n"
           "  tessera run --mps --gpumem 8Gi --gpucores 30 -- python infer.py\n"
           "\n"
           "MIG: --mig PROFILE (1g.10gb, 3g.40gb, ... as nvidia-smi names them) runs the command in a MIG\n"
           "instance created for it on a GPU in MIG mode (--gpu N to choose the GPU), beside the instances\n"
           "already there, and destroyed when it ends. The command sees only that device\n"
           "(CUDA_VISIBLE_DEVICES = NVIDIA_VISIBLE_DEVICES = its MIG UUID); the GPU isolates its memory and\n"
           "compute, so --gpumem, --gpucores, --gpus and --gpu-type do not apply. MIG mode is not turned\n"
           "on for you: `sudo nvidia-smi -i N -mig 1` (A100/A30: then reset the GPU), or on the simulated\n"
           "GPU `tessera sim mig --gpu N on`. An instance a killed `tessera run` left is removed by the\n"
           "next `tessera run`.\n"
           "\n"
           "MPS: --mps runs the command as an MPS client of its GPU instead of under libvgpu: --gpucores is\n"
           "its active thread percentage (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE; 0 = 100), --gpumem its pinned\n"
           "memory limit (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT; default the whole GPU). The slice is placed and\n"
           "recorded like any other; the GPU's MPS control daemon is started if none runs and left for the\n"
           "next client (simulated GPU: `tessera sim mps status|stop --gpu N`). One GPU, no --core-policy.\n"
           "\n"
           "Exit status: the command's own. When the command is killed by signal N, `tessera run` ends\n"
           "by the same signal N (as `timeout` does), so a shell reports 128+N and Python's returncode is "
           "-N.\n"
           "2 when the request is malformed or does not fit (the message says which GPU lacks what);\n"
           "127 when the command is not found, 126 when it cannot be executed; 1 for any other setup "
           "failure.");
       cmd->add_option("--gpus", flags->options.slice.gpus, "Number of GPUs (each slice on a different GPU)")
           ->default_val(1);
       cmd->add_option("--gpumem", flags->gpumem,
                       "Device memory per GPU: MiB (3000), a size (3Gi) or a share of the GPU (25%); "
                       "default: the whole GPU");
       cmd->add_option(
              "--gpucores", flags->options.slice.cores,
              "Compute per GPU in percent; 0 = no compute limit, 100 = the GPU alone. A job alone on "
              "its GPU may use more than this unless --core-policy force")
           ->default_val(0);
       cmd->add_option(
              "--core-policy", flags->options.slice.core_policy,
              "How --gpucores is held (GPU_CORE_UTILIZATION_POLICY for the job): default = the quota "
              "while other processes use the GPU, idle time beyond it while the job is alone; force = "
              "never more than the quota; disable = no compute limit")
           ->default_val("default");
       cmd->add_option("--gpu-type", flags->options.slice.gpu_types,
                       "Only GPUs whose model contains this text (repeatable, e.g. A100)");
       cmd->add_option("--policy", flags->options.slice.policy,
                       "How the GPUs are chosen, by the placement policies' names (docs/placement.md): "
                       "gpu-binpack: fill used GPUs first (default); gpu-spread: prefer empty GPUs; tessera: "
                       "fragmentation-aware; node-binpack / node-spread: as gpu-binpack / gpu-spread on one "
                       "machine. binpack and spread are deprecated spellings of gpu-binpack and gpu-spread")
           ->default_val("gpu-binpack");
       cmd->add_option(
           "--sim", flags->sim,
           "Use the simulated GPU with this spec (e.g. 2xA100-80GB, A100-40GB,L4) even if a driver exists");
       cmd->add_option(
           "--ledger-dir", flags->options.ledger_dir,
           "Where running slices are recorded (default: $TESSERA_RUN_STATE, /run/tessera as root)");
       cmd->add_option("--mig", flags->mig,
                       "Run in a MIG instance of this profile (e.g. 1g.10gb), created for the job and "
                       "removed after it");
       cmd->add_flag("--mps", flags->options.mps,
                     "Run as an MPS client of the GPU, limited by MPS (--gpucores, --gpumem) instead of "
                     "libvgpu");
       flags->gpu_option =
           cmd->add_option("--gpu", flags->gpu, "With --mig: the GPU (NVML index) to create the instance on");
       cmd->add_flag("-q,--quiet", flags->options.quiet, "Print nothing but errors");
       cmd->add_option("command", flags->command, "The command to run, after --")->expected(-1);
       cmd->callback([flags] {
         auto& opt = flags->options;
         if (std::string note = runner::PolicyDeprecation(opt.slice); !note.empty()) {
           std::cerr << "tessera run: warning: " << note << "\n";
         }
         if (!flags->gpumem.empty()) {
           if (auto st = runner::ParseGpuMemory(flags->gpumem, opt.slice); !st.ok()) {
             std::cerr << "tessera run: " << st.error().message << "\n";
             SetExitCode(runner::kExitDoesNotFit);
             return;
           }
         }
         if (!flags->sim.empty()) opt.sim_spec = flags->sim;
         const bool gpu_given = flags->gpu_option->count() > 0;
         if (gpu_given && flags->mig.empty()) {
           std::cerr << "tessera run: --gpu chooses the GPU of a --mig instance; a slice's GPU is chosen by "
                        "--policy and --gpu-type\n";
           SetExitCode(runner::kExitDoesNotFit);
           return;
         }
         if (!flags->mig.empty()) {
           opt.mig = runner::MigRequest{flags->mig, std::nullopt, false};
           if (gpu_given) opt.mig->gpu_index = flags->gpu;
         }
         opt.command = flags->command;
         SetExitCode(runner::RunAndExit(opt));
       });
     }}};

}  // namespace
}  // namespace tessera::cli
