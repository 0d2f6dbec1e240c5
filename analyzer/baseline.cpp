#include "baseline.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <sstream>
#include <unordered_map>

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
  // Each role's schedule, from its member holding the longest history (the lowest-ranked among
  // equals; ranks that disagree fail `check` anyway). A capped trace holds collectives
  // #first..#last of it: the header says so ("collectives=#first..#last"), and a comparison
  // aligns by that absolute ordinal.
  struct Variant {
    int nranks;
    int64_t first;  // 1-based ordinal of ops[0]; 0: nothing retired
    std::vector<std::string> ops;
    bool operator==(const Variant& o) const { return nranks == o.nranks && first == o.first && ops == o.ops; }
  };
  std::map<std::string, std::vector<Variant>> roles;
  for (auto& g : a.index.comms) {
    if (g.members.empty()) continue;
    const CommMember* m = &g.members.front();
    for (const CommMember& x : g.members)
      if (a.index.of(x).base < a.index.of(*m).base) m = &x;
    const ProcComm& pc = a.index.of(*m);
    Variant v{g.nranks, pc.base > 0 ? pc.base + 1 : 0, {}};
    for (uint32_t i : pc.colls) v.ops.push_back(baseline_signature(s.sigs[s.procs[m->proc].ops[i].sig]));
    auto& variants = roles[g.role];
    if (std::find(variants.begin(), variants.end(), v) == variants.end()) variants.push_back(std::move(v));
  }
  for (auto& [role, variants] : roles)
    for (size_t v = 0; v < variants.size(); ++v) {
      const Variant& x = variants[v];
      os << "comm " << role;
      if (variants.size() > 1) os << " variant " << v + 1;
      os << " nranks=" << x.nranks << " collectives=";
      if (x.first > 0) os << "#" << x.first << "..#" << x.first + static_cast<int64_t>(x.ops.size()) - 1 << "\n";
      else os << x.ops.size() << "\n";
      run_length(os, x.ops, "  ");
    }
  // Interleaving between roles, per process; identical ones grouped. The family: the
  // tensor-parallel groups of different ranks are one role, so 256 ranks with the same step
  // pattern share one section. Families by number while grouping (a string an op was 8 M
  // strings at 16,384 ranks x 500 ops), by name in the text.
  std::vector<std::string> family_names;
  std::vector<int32_t> family_of(a.index.comms.size());
  {
    std::unordered_map<std::string, int32_t> ids;
    for (size_t g = 0; g < a.index.comms.size(); ++g) {
      auto [it, added] = ids.try_emplace(a.index.comms[g].family, static_cast<int32_t>(family_names.size()));
      if (added) family_names.push_back(it->first);
      family_of[g] = it->second;
    }
  }
  std::map<std::vector<int32_t>, std::vector<int>> orders;
  std::vector<const std::vector<int32_t>*> first_seen;  // keys of `orders`, in order of first use
  std::vector<int> windowed;  // ranks whose trace retired history: their interleaving is partial
  std::vector<int32_t> seq;
  for (size_t p = 0; p < s.procs.size(); ++p) {
    if (s.procs[p].info.retired_ops > 0) {
      windowed.push_back(display_rank(s, static_cast<int>(p)));
      continue;
    }
    seq.clear();
    for (auto& o : s.procs[p].ops) {
      const ProcComm& pc = a.index.per_proc[p][o.comm];
      if (pc.gcomm < 0 || s.sigs[o.sig].cls == OpClass::kP2P) continue;
      seq.push_back(family_of[pc.gcomm]);
    }
    // Ranks with one communicator have no interleaving to keep.
    if (std::all_of(seq.begin(), seq.end(), [&](int32_t f) { return f == seq.front(); })) continue;
    auto [it, fresh] = orders.try_emplace(seq);
    if (fresh) first_seen.push_back(&it->first);
    it->second.push_back(display_rank(s, static_cast<int>(p)));
  }
  std::vector<std::string> names;
  for (const std::vector<int32_t>* ids : first_seen) {
    os << "order ranks " << rank_ranges(orders[*ids]) << "\n";
    names.clear();
    for (int32_t f : *ids) names.push_back(family_names[static_cast<size_t>(f)]);
    run_length(os, names, "  ");
  }
  if (!windowed.empty())
    os << "# order of ranks " << rank_ranges(windowed) << " not kept: the size cap retired their oldest ops\n";
  return os.str();
}

namespace {

// Line diff of two baselines (or of two sections' lines).
BaselineDiff text_diff(const std::vector<std::string>& want, const std::vector<std::string>& got) {
  BaselineDiff d;
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

// One "comm ..." section of a baseline: its header, the first ordinal of its lines (1 when
// nothing was retired) and its lines with the run-length encoding undone.
struct CommSection {
  std::string key;     // "comm ROLE[ variant N] nranks=N"
  std::string header;
  int64_t first = 1;
  std::vector<std::string> ops;
  int64_t last() const { return first + static_cast<int64_t>(ops.size()) - 1; }
};

size_t indent_of(const std::string& l) { return l.find_first_not_of(' '); }

// Expands lines [i, end) at `indent` into `out` (bounded: a hostile file cannot make it huge).
bool expand(const std::vector<std::string>& v, size_t& i, size_t indent, std::vector<std::string>& out) {
  constexpr size_t kMaxOps = 50'000'000;
  while (i < v.size() && v[i].rfind("comm ", 0) != 0 && v[i].rfind("order ", 0) != 0) {
    const size_t ind = indent_of(v[i]);
    if (ind == std::string::npos || ind < indent) return true;
    std::string l = v[i].substr(ind);
    ++i;
    uint64_t reps = 1;
    bool block = false;
    if (l.rfind("repeat x", 0) == 0 && l.back() == ':') {
      block = true;
      reps = std::strtoull(l.c_str() + 8, nullptr, 10);
    } else if (size_t x = l.rfind(" x"); x != std::string::npos && x + 2 < l.size() &&
                                         l.find_first_not_of("0123456789", x + 2) == std::string::npos) {
      reps = std::strtoull(l.c_str() + x + 2, nullptr, 10);
      l.resize(x);
    }
    std::vector<std::string> body;
    if (block && !expand(v, i, ind + 1, body)) return false;
    if (!block) body.push_back(l);
    if (reps > kMaxOps || out.size() + reps * body.size() > kMaxOps) return false;
    for (uint64_t r = 0; r < reps; ++r) out.insert(out.end(), body.begin(), body.end());
  }
  return true;
}

// The comm sections of a baseline; false when one does not parse.
bool comm_sections(const std::vector<std::string>& v, std::vector<CommSection>& out) {
  for (size_t i = 0; i < v.size();) {
    if (v[i].rfind("comm ", 0) != 0) {
      ++i;
      continue;
    }
    CommSection c;
    c.header = v[i];
    const size_t at = c.header.rfind(" collectives=");
    if (at == std::string::npos) return false;
    c.key = c.header.substr(0, at);
    const std::string n = c.header.substr(at + 13);
    if (!n.empty() && n[0] == '#') c.first = std::strtoll(n.c_str() + 1, nullptr, 10);
    ++i;
    if (!expand(v, i, 1, c.ops)) return false;
    out.push_back(std::move(c));
  }
  return true;
}

std::string range(int64_t a, int64_t b) {
  return a > b ? "none" : "#" + std::to_string(a) + ".." + "#" + std::to_string(b);
}

}  // namespace

// Schedules of capped runs hold a window of each communicator's collectives ("collectives=
// #first..#last"): sections are compared on the ordinals both hold, and the result says which.
BaselineDiff compare_baseline(const std::string& baseline, const std::string& actual) {
  const auto want = lines_of(baseline), got = lines_of(actual);
  auto windowed = [](const std::vector<std::string>& v) {
    return std::any_of(v.begin(), v.end(), [](const std::string& l) {
      return l.rfind("comm ", 0) == 0 && l.find(" collectives=#") != std::string::npos;
    });
  };
  std::vector<CommSection> a, b;
  if ((!windowed(want) && !windowed(got)) || !comm_sections(want, a) || !comm_sections(got, b))
    return text_diff(want, got);
  BaselineDiff d;
  std::ostringstream diff, compared;
  for (const CommSection& x : a) {
    auto y = std::find_if(b.begin(), b.end(), [&](const CommSection& c) { return c.key == x.key; });
    if (y == b.end()) {
      d.equal = false;
      diff << "- " << x.header << "\n";
      continue;
    }
    const int64_t lo = std::max(x.first, y->first), hi = std::min(x.last(), y->last());
    compared << x.key << ": baseline " << range(x.first, x.last()) << ", this run " << range(y->first, y->last())
             << ": compared " << range(lo, hi) << "\n";
    if (lo > hi) {
      d.partial = true;
      continue;
    }
    const auto cut = [lo, hi](const CommSection& c) {
      return std::vector<std::string>(c.ops.begin() + (lo - c.first), c.ops.begin() + (hi - c.first + 1));
    };
    BaselineDiff part = text_diff(cut(x), cut(*y));
    if (!part.equal) {
      d.equal = false;
      diff << "in section: " << x.header << " (collectives " << range(lo, hi) << ")\n" << part.text;
    }
  }
  for (const CommSection& y : b)
    if (std::none_of(a.begin(), a.end(), [&](const CommSection& c) { return c.key == y.key; })) {
      d.equal = false;
      diff << "+ " << y.header << "\n";
    }
  // The order sections: those of ranks that retired nothing, as text.
  auto orders = [](const std::vector<std::string>& v) {
    std::vector<std::string> o;
    bool in = false;
    for (const std::string& l : v) {
      if (l.rfind("comm ", 0) == 0) in = false;
      if (l.rfind("order ", 0) == 0) in = true;
      if (in) o.push_back(l);
    }
    return o;
  };
  BaselineDiff order = text_diff(orders(want), orders(got));
  if (!order.equal) {
    d.equal = false;
    diff << order.text;
  }
  d.text = diff.str();
  d.compared = compared.str();
  return d;
}

}  // namespace lockstep
