#include <algorithm>

#include "trace_details.h"
#include "text_escape.h"

namespace lockstep {
namespace {

bool contains(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

std::string basename(const std::string& p) {
  auto k = p.rfind('/');
  return k == std::string::npos ? p : p.substr(k + 1);
}

// Libraries between the user's code and the NCCL call: they say nothing about *why*.
bool glue_native(const Frame& f) {
  std::string m = basename(f.module);
  for (const char* lib : {"libnccl", "liblockstep", "libc.so", "libc-", "libpthread", "ld-linux", "libpython",
                          "libstdc++", "libtorch", "libc10", "libcudart", "libcuda.so", "libgcc_s", "python3"})
    if (m.rfind(lib, 0) == 0) return true;
  const std::string& fn = f.function;
  for (const char* prefix : {"_Py", "Py", "c10::", "at::", "torch::", "pybind11::", "_start", "__libc_start"})
    if (fn.rfind(prefix, 0) == 0) return true;
  return fn == "main" && f.module.empty();
}

bool glue_python(const Frame& f) {
  if (f.file.rfind("<frozen", 0) == 0) return true;
  // Between every collective and the code that asked for it: c10d's API and logging wrappers,
  // op dispatch, decorators, nn.Module's call wrappers, dynamo's frame entry. What is left
  // (FSDP's post_backward, the model, the training loop) says why the collective was issued.
  for (const char* glue : {"torch/distributed/c10d_logger.py", "torch/distributed/distributed_c10d.py",
                           "torch/_ops.py", "torch/utils/_contextlib.py", "torch/nn/modules/module.py",
                           "torch/_dynamo/eval_frame.py", "torch/autograd/graph.py", "torch/autograd/function.py"})
    if (contains(f.file, glue)) return true;
  return false;
}

}  // namespace

std::vector<Frame> trim_stack(const std::vector<Frame>& frames, size_t max_frames) {
  std::vector<Frame> out;
  for (auto& f : frames)
    if (f.kind == vocab::FrameKind::Python && !glue_python(f) && out.size() < max_frames) out.push_back(f);
  for (auto& f : frames)
    if (f.kind != vocab::FrameKind::Python && !glue_native(f) && out.size() < max_frames) out.push_back(f);
  return out;
}

// "(anonymous namespace)::fsdp_post_backward(Model&, int) [clone .constprop.0]" ->
// "fsdp_post_backward": the name is what a reader needs; the full one stays in --json.
std::string short_function(std::string fn) {
  const std::string anon = "(anonymous namespace)::";
  for (size_t a; (a = fn.find(anon)) != std::string::npos;) fn.erase(a, anon.size());
  if (auto c = fn.find(" [clone "); c != std::string::npos) fn.erase(c);
  size_t from = 0;
  if (auto op = fn.find("operator()"); op != std::string::npos) from = op + 10;
  if (auto paren = fn.find('(', from); paren != std::string::npos && paren > 0 && fn.back() == ')') fn.erase(paren);
  return fn;
}

std::string format_frame(const Frame& f) {
  std::string s = f.function.empty() ? "??" : short_function(f.function);
  if (!f.file.empty()) {
    s += " (" + basename(f.file);
    if (f.line > 0) s += ":" + std::to_string(f.line);
    s += ")";
  } else if (!f.module.empty()) {
    char off[32];
    std::snprintf(off, sizeof off, "+0x%llx", static_cast<unsigned long long>(f.offset));
    s += " (" + basename(f.module) + off + ")";
  }
  return s;
}

std::string frame_origin(const std::vector<Frame>& trimmed) {
  return trimmed.empty() ? std::string() : format_frame(trimmed.front());
}

std::string stack_note(TraceDetails& details, int proc, int64_t stack_id, const std::vector<Frame>& shown) {
  if (stack_id < 0) return "(no stack recorded: run with --stacks native or python)";
  if (std::string why = details.stack_error(proc, stack_id); !why.empty())
    return "(stack " + std::to_string(stack_id) + " unreadable in its file: " + printable(why) + ")";
  if (!shown.empty()) return "";
  if (const size_t raw = details.stack(proc, stack_id).size(); raw > 0)
    return "(" + std::to_string(raw) + " frames, all in NCCL, lockstep, libc or the interpreter: lockstep stacks --all-frames shows them)";
  return "(stack " + std::to_string(stack_id) + " has no frames in its file)";
}

}  // namespace lockstep
