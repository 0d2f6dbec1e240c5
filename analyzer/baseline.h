// The canonical schedule of a run, as a reviewable text file (the CI baseline): per communicator
// role, the sequence of collective signatures, run-length encoded; then, per group of ranks
// with the same interleaving, the order in which they issued the roles' collectives.
// Roles, not comm hashes, name communicators: hashes change every run (comm_index.h).
#pragma once

#include <climits>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "analysis.h"

namespace lockstep {

inline constexpr const char* kBaselineHeader = "# lockstep baseline 1";

// The canonical schedule's text and what its order sections hold, as data: `check --baseline`
// decides from these, never from the text.
struct CanonicalText {
  std::string text;
  size_t order_groups = 0;      // order sections: groups of ranks with one interleaving of roles
  bool order_windowed = false;  // some rank's order is not kept (the size cap retired its oldest ops)
};

// The canonical schedule of the analysed schedule (every row of every file read).
CanonicalText canonical_schedule(const Analysis& a);

// The canonical schedule from a batch of files at a time, each read with every row: `check
// --baseline` at 16,384 ranks x 10,000 ops holds one batch's rows instead of every file's. The
// same text as canonical_schedule of every file read at once.
class CanonicalSchedule {
 public:
  // Every file of the run (their headers; rows are not needed) and its communicator index:
  // the roles, families and members (in rank order) the text names.
  CanonicalSchedule(const Schedule& headers, const CommIndex& index);
  // A batch of those files read with every row, its own index; header_of[p]: the index in
  // `headers` of batch process p (-1: not there). Batches in the headers' order.
  void add(const Schedule& batch, const CommIndex& batch_index, const std::vector<int>& header_of);
  // The headers are a summary-first read whose unread order and all-to-alls are proven
  // (summary_read.h prove_unread): each rank's and each communicator's collectives before the
  // cuts are read from a few files that the digests prove to hold the same (canonical_schedule_proven).
  // False, and nothing added, when a rank's order before a cut is not proven after all (a
  // communicator of one member, which prove_unread does not ask, without an order digest).
  bool add_proven();
  CanonicalText text() const;

 private:
  struct NotProven {};
  uint32_t intern(std::string s);
  int32_t family_id(const std::string& name);
  void add_order(const std::vector<int>& header_procs, const std::vector<int32_t>& families);
  struct Comm {           // a communicator of the headers' index
    int64_t base = INT64_MAX;  // of the member whose collectives are kept (none yet: INT64_MAX)
    size_t member = SIZE_MAX;  // its place in the members' rank order
    std::vector<uint32_t> ops; // its collectives' lines (strings_)
  };
  const Schedule& headers_;
  const CommIndex& index_;
  std::vector<Comm> comms_;
  std::vector<std::vector<std::pair<int, size_t>>> member_at_;  // [header proc][local comm]: (comm, place)
  std::unordered_map<std::string, int> comm_of_hash_;
  std::vector<std::string> strings_;
  std::unordered_map<std::string, uint32_t> string_ids_;
  std::vector<std::string> family_names_;
  std::unordered_map<std::string, int32_t> family_ids_;
  std::map<std::vector<int32_t>, std::vector<int>> orders_;  // families in issue order -> ranks
  std::vector<const std::vector<int32_t>*> first_seen_;      // keys of orders_, in order of first use
  std::vector<int> windowed_;  // ranks whose trace retired history: their interleaving is partial
};

// The canonical schedule of every file of `headers`, read with every row a batch of files at a
// time (load_schedule_of): files in the headers' order until they add up to `batch_bytes` on
// disk (a loaded op takes about what it takes on disk: 16,384 files of 10,000 ops, 4.3 GB,
// peaked at 4.1 GiB read at once).
inline constexpr uint64_t kBaselineBatchBytes = uint64_t(256) << 20;
CanonicalText canonical_schedule_of_files(const Schedule& headers, const CommIndex& index,
                                          uint64_t batch_bytes = kBaselineBatchBytes);

struct BaselineDiff {
  bool equal = true;
  std::string text;  // readable diff: the section and the lines that differ
  // Capped runs (sections "collectives=#first..#last"): per communicator, the ordinals each
  // side holds and those compared; partial when a communicator had none in common.
  std::string compared;
  bool partial = false;
};

// The canonical schedule of a summary-first read (`s`, its index) whose order across
// communicators and all-to-alls before the cuts are proven (prove_unread): the same text as
// canonical_schedule_of_files, reading every row of a few files only. A rank's collectives are
// those of a rank whose order digest agrees with its own at its newest cut, then its own read
// after it; a communicator's before its cut, those of a communicator whose checkpoint digest
// there is the same. 16,384 ranks x 10,000 ops of one program: one file read whole.
// None when add_proven finds a rank's order not proven: read every row instead.
std::optional<CanonicalText> canonical_schedule_proven(const Schedule& s, const CommIndex& index);

// Compares a baseline file's text with the run's canonical schedule; comment lines ('#') and
// trailing blanks are ignored so reviewers can annotate the file. When either side holds a
// window of a communicator's history (a capped run), collectives are aligned by ordinal.
BaselineDiff compare_baseline(const std::string& baseline, const std::string& actual);

}  // namespace lockstep
