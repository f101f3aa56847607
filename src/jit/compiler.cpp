#include "jit/compiler.hpp"

#include <cctype>

#include "jit/embedded_headers.hpp"
#include "jit/nvrtc_api.hpp"
#include "jit/target_arch.hpp"
#include "tilefmha/error.hpp"

namespace tilefmha::jit {
namespace {

std::string joined(const std::vector<std::string>& arguments) {
  std::string text;
  for (const std::string& argument : arguments) text += (text.empty() ? "" : " ") + argument;
  return text;
}

// Owns one nvrtcProgram; every NVRTC call is checked and named in the error.
class Program {
 public:
  Program(const NvrtcApi& api, std::string_view name, std::string_view source)
      : api_(api), name_(name) {
    const auto files = embedded_kernel_files();
    std::vector<const char*> contents, include_names;
    // NVRTC wants NUL-terminated strings; the embedded table holds views.
    header_storage_.reserve(files.size());
    for (const EmbeddedFile& file : files) {
      header_storage_.emplace_back(file.contents);
      path_storage_.emplace_back(file.path);
    }
    for (size_t i = 0; i < files.size(); ++i) {
      contents.push_back(header_storage_[i].c_str());
      include_names.push_back(path_storage_[i].c_str());
    }
    const std::string source_text(source);
    const std::string program_name = name_ + ".cu";
    check(api_.create_program(&program_, source_text.c_str(), program_name.c_str(),
                              static_cast<int>(contents.size()), contents.data(),
                              include_names.data()),
          "nvrtcCreateProgram");
  }
  ~Program() {
    if (program_ != nullptr) api_.destroy_program(&program_);
  }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  NvrtcApi::Result compile(const std::vector<std::string>& arguments) {
    std::vector<const char*> pointers;
    for (const std::string& argument : arguments) pointers.push_back(argument.c_str());
    return api_.compile_program(program_, static_cast<int>(pointers.size()), pointers.data());
  }

  std::string log() {
    size_t size = 0;
    check(api_.get_program_log_size(program_, &size), "nvrtcGetProgramLogSize");
    std::string text(size, '\0');
    if (size > 0) check(api_.get_program_log(program_, text.data()), "nvrtcGetProgramLog");
    while (!text.empty() && (text.back() == '\0' || text.back() == '\n')) text.pop_back();
    return text;
  }

  std::vector<char> cubin() {
    size_t size = 0;
    check(api_.get_cubin_size(program_, &size), "nvrtcGetCUBINSize");
    if (size == 0) {
      throw Error(ErrorKind::runtime, "NVRTC produced no cubin for kernel '" + name_ +
                                          "' (is the arch a real sm_ target?)");
    }
    std::vector<char> bytes(size);
    check(api_.get_cubin(program_, bytes.data()), "nvrtcGetCUBIN");
    return bytes;
  }

  std::string ptx() {
    size_t size = 0;
    check(api_.get_ptx_size(program_, &size), "nvrtcGetPTXSize");
    std::string text(size, '\0');
    if (size > 0) check(api_.get_ptx(program_, text.data()), "nvrtcGetPTX");
    while (!text.empty() && text.back() == '\0') text.pop_back();
    return text;
  }

  std::string describe(NvrtcApi::Result result) const { return api_.get_error_string(result); }

 private:
  void check(NvrtcApi::Result result, const char* call) const {
    if (result != 0) {
      throw Error(ErrorKind::runtime, std::string(call) + " failed for kernel '" + name_ +
                                          "': " + api_.get_error_string(result));
    }
  }

  const NvrtcApi& api_;
  std::string name_;
  std::vector<std::string> header_storage_;
  std::vector<std::string> path_storage_;
  NvrtcApi::Program program_ = nullptr;
};

bool environment_flag(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::string_view(value) == "1";
}
}  // namespace

bool line_info_requested() {
  return environment_flag("TILEFMHA_LINEINFO");
}

bool timeline_requested() {
  return environment_flag("TILEFMHA_TIMELINE");
}

std::vector<std::string> parse_kernel_defines(std::string_view text) {
  auto is_separator = [](char c) {
    return c == ',' || std::isspace(static_cast<unsigned char>(c));
  };
  auto is_name_char = [](char c, bool first) {
    return c == '_' || std::isalpha(static_cast<unsigned char>(c)) ||
           (!first && std::isdigit(static_cast<unsigned char>(c)));
  };
  std::vector<std::string> defines;
  size_t at = 0;
  while (at < text.size()) {
    if (is_separator(text[at])) {
      ++at;
      continue;
    }
    size_t end = at;
    while (end < text.size() && !is_separator(text[end])) ++end;
    const std::string_view entry = text.substr(at, end - at);
    const std::string_view name = entry.substr(0, entry.find('='));
    bool valid = !name.empty();
    for (size_t i = 0; valid && i < name.size(); ++i) valid = is_name_char(name[i], i == 0);
    if (!valid)
      throw Error(ErrorKind::invalid_argument,
                  "TILEFMHA_KERNEL_DEFINES: '" + std::string(entry) +
                      "' is not NAME or NAME=VALUE (a C identifier, then an optional value)");
    defines.emplace_back(entry);
    at = end;
  }
  return defines;
}

std::vector<std::string> kernel_defines_requested() {
  const char* value = std::getenv("TILEFMHA_KERNEL_DEFINES");
  return value == nullptr ? std::vector<std::string>{} : parse_kernel_defines(value);
}

std::vector<std::string> nvrtc_arguments(const CompileOptions& options) {
  std::vector<std::string> arguments = {
      "--gpu-architecture=" + validate_target_arch(options.arch),
      "-std=" + options.language_standard,
      "-default-device",
  };
  if (options.line_info) arguments.push_back("-lineinfo");
  if (options.fast_math) arguments.push_back("--use_fast_math");
  for (const std::string& define : options.defines) arguments.push_back("-D" + define);
  for (const std::string& argument : options.extra_arguments) arguments.push_back(argument);
  return arguments;
}

CompiledKernel compile_kernel(std::string_view name, std::string_view source,
                              const CompileOptions& options) {
  const std::vector<std::string> arguments = nvrtc_arguments(options);
  Program program(nvrtc_api(), name, source);
  const NvrtcApi::Result result = program.compile(arguments);
  CompiledKernel compiled;
  compiled.log = program.log();
  if (result != 0) {
    throw Error(ErrorKind::compile, "NVRTC failed to compile kernel '" + std::string(name) +
                                        "' for " + options.arch + " (" + program.describe(result) +
                                        ")\narguments: " + joined(arguments) + "\ncompiler log:\n" +
                                        compiled.log);
  }
  compiled.cubin = program.cubin();
  if (options.keep_ptx) compiled.ptx = program.ptx();
  return compiled;
}

}  // namespace tilefmha::jit
