// The replay driver: feeds files through a fuzz target's LLVMFuzzerTestOneInput
// without libFuzzer, so the normal (gcc) build and `make test` run every kept
// corpus input and every crash regression (ctest label fuzz-replay).
//
//   <target>_replay <file-or-directory>...
//
// Directories are read one level deep, files in name order so a failure is
// reproducible; names starting with '.' are skipped. A missing path is an error (a renamed corpus must not
// pass silently); an empty directory is not (a target may have no regressions yet). A crashing input crashes
// this program like it would the fuzzer; the name of the file being run is printed first so the failure names
// it.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) __attribute__((weak));

namespace {

bool ReadFile(const std::filesystem::path& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <file-or-directory>...\n", argv[0]);
    return 2;
  }
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    std::filesystem::path path(argv[i]);
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
        // Dot files (.gitkeep holds an empty regressions folder in git) are not inputs.
        if (entry.is_regular_file() && entry.path().filename().string()[0] != '.')
          files.push_back(entry.path());
      }
      if (ec) {
        std::fprintf(stderr, "replay: cannot list %s: %s\n", argv[i], ec.message().c_str());
        return 2;
      }
    } else if (std::filesystem::is_regular_file(path, ec)) {
      files.push_back(path);
    } else {
      std::fprintf(stderr, "replay: %s is neither a file nor a directory\n", argv[i]);
      return 2;
    }
  }
  std::sort(files.begin(), files.end());
  std::string data;
  for (const auto& file : files) {
    if (!ReadFile(file, data)) {
      std::fprintf(stderr, "replay: cannot read %s\n", file.c_str());
      return 2;
    }
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", file.c_str(), data.size());
    // A copy in its own allocation, as libFuzzer passes it: ASan builds then
    // catch a read one past the end.
    std::vector<uint8_t> input(data.begin(), data.end());
    LLVMFuzzerTestOneInput(input.data(), input.size());
  }
  std::printf("replay: %zu inputs ran\n", files.size());
  return 0;
}
