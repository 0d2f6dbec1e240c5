#include "baseline.h"

#include <algorithm>
#include <map>
#include <sstream>

namespace lockstep {
namespace {

// Data-dependent per-peer splits (MoE routing, variable sequence lengths) change from run to
// run: the baseline keeps that an all-to-all happened, not how much went where.
std::string baseline_signature(const Signature& s) {
  if (s.cls == OpClass::kAllToAll && !s.parts.empty()) return std::string(vocab::name(s.op)) + " " + vocab::stored_name(s.dtype) + " uneven";
  return describe_signature(s);
}

// Run-length encoding of lines and of repeated blocks (a training step's pattern of
// collectives repeats every step):
//   all_reduce float32 count=8 sum x4         (one line, 4 times)
//   repeat x4:                                (a block of lines, 4 times)
//     all_gather float32 count=128
//     all_reduce float32 count=32 sum
void run_length(std::ostream& os, const std::vector<std::string>& v, size_t begin, size_t end, const std::string& indent) {
  const size_t kMaxBlock = 32;
  for (size_t i = begin; i < end;) {
    // The block length that covers the most lines from i by repetition (shortest on ties).
    size_t best_len = 1, best_reps = 1;
    for (size_t len = 1; len <= kMaxBlock && i + 2 * len <= end; ++len) {
      size_t reps = 1;
      while (i + (reps + 1) * len <= end &&
             std::equal(v.begin() + static_cast<long>(i), v.begin() + static_cast<long>(i + len),
                        v.begin() + static_cast<long>(i + reps * len)))
        ++reps;
      if (reps > 1 && reps * len > best_reps * best_len) best_len = len, best_reps = reps;
    }
    if (best_len == 1) {
      os << indent << v[i];
      if (best_reps > 1) os << " x" << best_reps;
      os << "\n";
    } else {
      os << indent << "repeat x" << best_reps << ":\n";
      run_length(os, v, i, i + best_len, indent + "  ");
    }
    i += best_len * best_reps;
  }
}

void run_length(std::ostream& os, const std::vector<std::string>& v, const std::string& indent) {
  run_length(os, v, 0, v.size(), indent);
}

// "init0.split1(color=3)" -> "init0.split1": in the order sections, the tensor-parallel groups
// of different ranks are one role, so 256 ranks with the same step pattern share one section.
std::string role_family(std::string role) {
  for (size_t a; (a = role.find("(color=")) != std::string::npos;) role.erase(a, role.find(')', a) - a + 1);
  return role;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    while (!l.empty() && (l.back() == ' ' || l.back() == '\r' || l.back() == '\t')) l.pop_back();
    if (l.empty() || l[0] == '#') continue;
    out.push_back(l);
  }
  return out;
}

}  // namespace

std::string canonical_schedule(const Analysis& a) {
  const Schedule& s = *a.schedule;
  std::ostringstream os;
  os << kBaselineHeader << "\n"
     << "# Per communicator role: its collectives in order (xN = N times). Then per group of ranks: the\n"
     << "# order in which they issued the roles' collectives (split colors omitted).\n"
     << "# Regenerate: lockstep check DIR --write-baseline FILE\n";
  // Each role's schedule, from its lowest-ranked member (ranks that disagree fail `check` anyway).
  std::map<std::string, std::vector<std::pair<int, std::vector<std::string>>>> roles;
  for (auto& g : a.index.comms) {
    if (g.members.empty()) continue;
    const CommMember& m = g.members.front();
    std::vector<std::string> ops;
    for (uint32_t i : a.index.of(m).colls) ops.push_back(baseline_signature(s.sigs[s.procs[m.proc].ops[i].sig]));
    auto& variants = roles[g.role];
    bool same = false;
    for (auto& v : variants) same |= v.second == ops && v.first == g.nranks;
    if (!same) variants.push_back({g.nranks, std::move(ops)});
  }
  for (auto& [role, variants] : roles)
    for (size_t v = 0; v < variants.size(); ++v) {
      os << "comm " << role;
      if (variants.size() > 1) os << " variant " << v + 1;
      os << " nranks=" << variants[v].first << " collectives=" << variants[v].second.size() << "\n";
      run_length(os, variants[v].second, "  ");
    }
  // Interleaving between roles, per process; identical ones grouped.
  std::map<std::vector<std::string>, std::vector<int>> orders;
  std::vector<std::vector<std::string>> first_seen;
  for (size_t p = 0; p < s.procs.size(); ++p) {
    std::vector<std::string> seq;
    for (auto& o : s.procs[p].ops) {
      const ProcComm& pc = a.index.per_proc[p][o.comm];
      if (pc.gcomm < 0 || s.sigs[o.sig].cls == OpClass::kP2P) continue;
      seq.push_back(role_family(a.index.comms[pc.gcomm].role));
    }
    // Ranks with one communicator have no interleaving to keep.
    std::vector<std::string> distinct(seq);
    std::sort(distinct.begin(), distinct.end());
    if (std::unique(distinct.begin(), distinct.end()) - distinct.begin() < 2) continue;
    auto [it, fresh] = orders.emplace(seq, std::vector<int>{});
    if (fresh) first_seen.push_back(seq);
    it->second.push_back(display_rank(s, static_cast<int>(p)));
  }
  for (auto& seq : first_seen) {
    os << "order ranks " << rank_ranges(orders[seq]) << "\n";
    run_length(os, seq, "  ");
  }
  return os.str();
}

BaselineDiff compare_baseline(const std::string& baseline, const std::string& actual) {
  BaselineDiff d;
  auto want = lines_of(baseline);
  auto got = lines_of(actual);
  if (want == got) return d;
  d.equal = false;
  // Common prefix and suffix first, then a line LCS over what is left (bounded: a huge
  // rewrite is shown as one block instead).
  size_t pre = 0;
  while (pre < want.size() && pre < got.size() && want[pre] == got[pre]) ++pre;
  size_t suf = 0;
  while (suf < want.size() - pre && suf < got.size() - pre && want[want.size() - 1 - suf] == got[got.size() - 1 - suf]) ++suf;
  std::vector<std::string> a(want.begin() + pre, want.end() - suf), b(got.begin() + pre, got.end() - suf);
  struct Line {
    char tag;  // ' ', '-', '+'
    std::string text;
    size_t want_index;
  };
  std::vector<Line> script;
  if (a.size() * b.size() <= 4'000'000) {
    std::vector<std::vector<uint32_t>> lcs(a.size() + 1, std::vector<uint32_t>(b.size() + 1, 0));
    for (size_t i = a.size(); i-- > 0;)
      for (size_t j = b.size(); j-- > 0;)
        lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
    size_t i = 0, j = 0;
    while (i < a.size() || j < b.size()) {
      if (i < a.size() && j < b.size() && a[i] == b[j]) {
        script.push_back({' ', a[i], pre + i}), ++i, ++j;
      } else if (i < a.size() && (j == b.size() || lcs[i + 1][j] >= lcs[i][j + 1])) {
        script.push_back({'-', a[i], pre + i}), ++i;  // removals before additions, as diff -u
      } else {
        script.push_back({'+', b[j], pre + i}), ++j;
      }
    }
  } else {
    for (size_t i = 0; i < a.size(); ++i) script.push_back({'-', a[i], pre + i});
    for (size_t j = 0; j < b.size(); ++j) script.push_back({'+', b[j], pre + a.size()});
  }
  std::ostringstream os;
  auto section_of = [&](size_t wi) -> std::string {
    for (size_t i = std::min(wi, want.size()); i-- > 0;)
      if (want[i].rfind("comm ", 0) == 0 || want[i].rfind("order ", 0) == 0) return want[i];
    return "";
  };
  const size_t kMaxLines = 40;
  size_t shown = 0;
  std::string last_section = "\x01";
  for (size_t k = 0; k < script.size() && shown < kMaxLines; ++k) {
    if (script[k].tag == ' ') continue;
    std::string sec = section_of(script[k].want_index + (script[k].tag == '-' ? 1 : 0));
    if (sec != last_section) {
      os << "in section: " << (sec.empty() ? "(start)" : sec) << "\n";
      last_section = sec;
      // One line of context before the change.
      if (k > 0 && script[k - 1].tag == ' ') os << "  " << script[k - 1].text << "\n";
      else if (k == 0 && pre > 0) os << "  " << want[pre - 1] << "\n";
    }
    os << script[k].tag << " " << script[k].text << "\n";
    ++shown;
  }
  size_t changed = 0;
  for (auto& l : script) changed += l.tag != ' ';
  if (changed > shown) os << "... " << changed - shown << " more changed lines\n";
  d.text = os.str();
  return d;
}

}  // namespace lockstep
