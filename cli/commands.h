// The lockstep CLI: one file per subcommand (cmd_<name>.cpp), each registering itself here.
// A command's callback stores the process exit code in *exit_code (see README "Exit codes").
// Commands register through command_line.h (launcher/), never CLI11 itself: see why there.
#pragma once

#include "command_line.h"

#include <string>
#include <vector>

namespace lockstep::cli {

void add_run_command(Command& app, int* exit_code);      // cmd_run.cpp
void add_analyze_command(Command& app, int* exit_code);  // cmd_analyze.cpp
void add_check_command(Command& app, int* exit_code);    // cmd_check.cpp
void add_stacks_command(Command& app, int* exit_code);   // cmd_stacks.cpp
void add_ops_command(Command& app, int* exit_code);      // cmd_ops.cpp
void add_replay_command(Command& app, int* exit_code);   // cmd_replay.cpp
void add_timeline_command(Command& app, int* exit_code); // cmd_timeline.cpp
void add_report_command(Command& app, int* exit_code);   // cmd_report.cpp
void add_doctor_command(Command& app, int* exit_code);   // cmd_doctor.cpp
void add_shrink_command(Command& app, int* exit_code);   // cmd_shrink.cpp
void add_import_command(Command& app, int* exit_code);   // cmd_import.cpp
void add_attach_command(Command& app, int* exit_code);   // cmd_attach.cpp
void add_summarize_command(Command& app, int* exit_code); // cmd_summarize.cpp

// The trace files of dir by the loader's rule (*.lockstep.sqlite), sorted; empty when dir is no
// directory.
std::vector<std::string> trace_files_in(const std::string& dir);

// true when dir is an existing directory; else prints "lockstep CMD: no such directory: DIR" (or
// "not a directory") and returns false. Every command words a missing directory this way.
bool check_dir(const std::string& cmd, const std::string& dir);

// For a directory that holds neither a trace file nor a Flight Recorder dump: prints why there
// may be none and what to run (after the loader's "no trace files" error).
void explain_no_trace_file(const std::string& dir);

// `lockstep report` on a directory of `lockstep attach` snapshots (*.attach.json): the snapshot
// page (cmd_attach.cpp).
bool is_snapshot_dir(const std::string& dir);
int report_snapshot_dir(const std::string& dir, const std::string& output);

// Path of liblockstep.so for LD_PRELOAD: $LOCKSTEP_PRELOAD if set, else next to the executable
// (../lib/liblockstep.so in a build or install tree).
std::string preload_library_path();

}  // namespace lockstep::cli
