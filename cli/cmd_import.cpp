// lockstep import DUMPDIR -o TRACEDIR: PyTorch Flight Recorder dumps -> lockstep trace files.
#include <iostream>

#include "analyze_common.h"
#include "commands.h"
#include "exit_codes.h"
#include "flightrec.h"
#include "text_escape.h"

namespace lockstep::cli {
namespace {

struct ImportArgs {
  std::string src;
  std::string out;
};

int import_dumps(const ImportArgs& a) {
  if (!check_dir("import", a.src)) return kExitUsage;
  std::vector<SkippedFile> skipped;
  std::vector<std::string> files;
  try {
    files = flightrec::import_dir(a.src, a.out, skipped);
  } catch (const std::exception& e) {
    std::cerr << "lockstep import: " << printable(e.what()) << "\n";
    return kExitUsage;
  }
  // A dump's file name and the reader's message can hold control characters: printed escaped.
  print_skipped(skipped);
  if (files.empty()) {
    std::cerr << "lockstep import: no readable Flight Recorder dump in " << printable(a.src) << "; nothing written\n";
    return kExitUsage;
  }
  for (auto& f : files) std::cout << "wrote " << printable(f) << "\n";
  return kExitOk;
}

}  // namespace

void add_import_command(Command& app, int* exit_code) {
  auto args = std::make_shared<ImportArgs>();
  auto* sub = app.add_subcommand("import", "Convert PyTorch Flight Recorder dumps (pickle or JSON) into lockstep trace files");
  sub->add_option("dir", args->src, "Directory of Flight Recorder dumps (one file per rank, <prefix><rank>)")->required();
  sub->add_option("-o,--output,--out", args->out, "Trace directory to write (created if missing)")->required();
  sub->footer("Exit code: 0 written, 2 input error. docs/flight-recorder.md says what FR dumps can and cannot tell.");
  sub->callback([args, exit_code] { *exit_code = import_dumps(*args); });
}

}  // namespace lockstep::cli
