#include "baseline.h"

#include <algorithm>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "checkpoints.h"
#include "op_digest.h"
#include "trace_loader.h"

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

CanonicalSchedule::CanonicalSchedule(const Schedule& headers, const CommIndex& index)
    : headers_(headers), index_(index), comms_(index.comms.size()), member_at_(headers.procs.size()) {
  for (size_t g = 0; g < index.comms.size(); ++g) {
    const GlobalComm& gc = index.comms[g];
    comm_of_hash_.emplace(gc.hash, static_cast<int>(g));
    for (size_t k = 0; k < gc.members.size(); ++k) {
      const CommMember& m = gc.members[k];
      auto& at = member_at_[static_cast<size_t>(m.proc)];
      if (at.size() <= static_cast<size_t>(m.local)) at.resize(static_cast<size_t>(m.local) + 1, {-1, 0});
      at[static_cast<size_t>(m.local)] = {static_cast<int>(g), k};
    }
  }
}

uint32_t CanonicalSchedule::intern(std::string s) {
  auto [it, added] = string_ids_.try_emplace(std::move(s), static_cast<uint32_t>(strings_.size()));
  if (added) strings_.push_back(it->first);
  return it->second;
}

int32_t CanonicalSchedule::family_id(const std::string& name) {
  auto [it, fresh] = family_ids_.try_emplace(name, static_cast<int32_t>(family_names_.size()));
  if (fresh) family_names_.push_back(it->first);
  return it->second;
}

// Ranks' interleaving between roles (families), identical ones grouped; ranks with one
// communicator have none to keep.
void CanonicalSchedule::add_order(const std::vector<int>& header_procs, const std::vector<int32_t>& seq) {
  if (std::all_of(seq.begin(), seq.end(), [&](int32_t f) { return f == seq.front(); })) return;
  auto [it, fresh] = orders_.try_emplace(seq);
  if (fresh) first_seen_.push_back(&it->first);
  for (int p : header_procs) it->second.push_back(display_rank(headers_, p));
}

void CanonicalSchedule::add(const Schedule& batch, const CommIndex& bidx, const std::vector<int>& header_of) {
  // Each communicator's schedule, from its member holding the longest history (the lowest-ranked
  // among equals; ranks that disagree fail `check` anyway): the least (base, place in rank
  // order) over the batches. A capped trace holds collectives #first..#last of it (text()).
  std::vector<int64_t> line_of_sig(batch.sigs.size(), -1);
  // The batch's communicators as the headers' (by hash) and as families (by number while
  // grouping: a string an op was 8 M strings at 16,384 ranks x 500 ops; by name in the text).
  std::vector<int32_t> family(bidx.comms.size());
  for (size_t g = 0; g < bidx.comms.size(); ++g) {
    auto h = comm_of_hash_.find(bidx.comms[g].hash);  // the names the headers' index gives, whatever the batch
    family[g] = family_id(h != comm_of_hash_.end() ? index_.comms[static_cast<size_t>(h->second)].family : bidx.comms[g].family);
  }
  std::vector<int32_t> seq;
  for (size_t p = 0; p < batch.procs.size(); ++p) {
    const int hp = p < header_of.size() ? header_of[p] : -1;
    if (hp < 0) continue;
    const SchedProcess& sp = batch.procs[p];
    const auto& at = member_at_[static_cast<size_t>(hp)];
    for (size_t local = 0; local < bidx.per_proc[p].size() && local < at.size(); ++local) {
      const ProcComm& pc = bidx.per_proc[p][local];
      const auto [g, place] = at[local];
      if (pc.gcomm < 0 || g < 0) continue;
      Comm& c = comms_[static_cast<size_t>(g)];
      if (pc.base > c.base || (pc.base == c.base && place >= c.member)) continue;
      c.base = pc.base, c.member = place;
      c.ops.clear();
      for (uint32_t i : pc.colls) {
        int64_t& line = line_of_sig[sp.ops[i].sig];
        if (line < 0) line = intern(baseline_signature(batch.sigs[sp.ops[i].sig]));
        c.ops.push_back(static_cast<uint32_t>(line));
      }
    }
    // Interleaving between roles, per process; identical ones grouped. The family: the
    // tensor-parallel groups of different ranks are one role, so 256 ranks with the same step
    // pattern share one section.
    const int rank = display_rank(headers_, hp);
    if (sp.info.retired_ops > 0) {
      windowed_.push_back(rank);
      continue;
    }
    seq.clear();
    for (auto& o : sp.ops) {
      const ProcComm& pc = bidx.per_proc[p][o.comm];
      if (pc.gcomm < 0 || batch.sigs[o.sig].cls == OpClass::kP2P) continue;
      seq.push_back(family[static_cast<size_t>(pc.gcomm)]);
    }
    add_order({hp}, seq);
  }
}

bool CanonicalSchedule::add_proven() try {
  const Schedule& s = headers_;
  // A process's newest cut in call order: its order digest there (the most collectives).
  struct Newest {
    int64_t count = 0;  // 0: nothing cut, every row read
    uint64_t digest = 0;
    int64_t unread = 0;  // collectives before the cuts, of every communicator
  };
  auto cut_checkpoint = [&](size_t p, size_t local) -> const lockstep::Comm::Checkpoint* {
    const auto& u = s.procs[p].unread;
    if (local >= u.size() || u[local].collectives <= 0) return nullptr;
    // prove_unread does not ask one of a communicator of one member: no order digest there
    // (a chain the writer ended) leaves this rank's order to the full read.
    const lockstep::Comm::Checkpoint* cp = checkpoint_at(s.procs[p].info.comms[local], u[local].collectives);
    if (!cp || cp->order_count <= 0) throw NotProven{};
    return cp;
  };
  auto family_of = [&](size_t p, size_t local) -> int32_t {  // -1: a communicator matched with no other file
    const int g = local < index_.per_proc[p].size() ? index_.per_proc[p][local].gcomm : -1;
    return g < 0 ? -1 : family_id(index_.comms[static_cast<size_t>(g)].family);
  };
  std::vector<Newest> newest(s.procs.size());
  // Ranks whose collectives before their newest cut are the same sequence of communicator ids
  // (the order digest) with the same communicators' roles behind the ids: one class, one file read.
  std::map<std::tuple<int64_t, uint64_t, std::vector<std::pair<int64_t, int32_t>>>, int> class_rep;
  std::vector<int> rep_of(s.procs.size(), -1);
  std::vector<int> reps;
  for (size_t p = 0; p < s.procs.size(); ++p) {
    Newest& n = newest[p];
    for (size_t l = 0; l < s.procs[p].info.comms.size(); ++l)
      if (const lockstep::Comm::Checkpoint* cp = cut_checkpoint(p, l)) {
        n.unread += cp->ordinal;
        if (cp->order_count > n.count) n.count = cp->order_count, n.digest = cp->order_digest;
      }
    if (n.count == 0) continue;
    std::vector<std::pair<int64_t, int32_t>> roles;
    for (size_t l = 0; l < s.procs[p].info.comms.size(); ++l) roles.emplace_back(s.procs[p].info.comms[l].local_id, family_of(p, l));
    auto [it, fresh] = class_rep.try_emplace({n.count, n.digest, std::move(roles)}, static_cast<int>(p));
    if (fresh) reps.push_back(static_cast<int>(p));
    rep_of[p] = it->second;
  }
  // Each cut communicator's collectives before its cut: from a file whose communicator has the
  // same checkpoint digest there (a representative's, else one of its members') and the same
  // all-to-all signature (the digest holds an all-to-all's op and dtype, its line its count too).
  using PrefixKey = std::tuple<int64_t, uint64_t, uint8_t, uint64_t>;  // ordinal, digest, all-to-all, its key
  std::map<PrefixKey, std::pair<int, size_t>> prefix_at;                // -> (proc, local)
  auto offer = [&](int p) {
    const auto& u = s.procs[p].unread;  // all-to-alls known of a file read from a cut only
    for (size_t l = 0; l < s.procs[p].info.comms.size() && l < u.size(); ++l)
      for (const lockstep::Comm::Checkpoint& k : s.procs[p].info.comms[l].checkpoints)
        prefix_at.try_emplace({k.ordinal, k.digest, u[l].all_to_all, u[l].all_to_all_key}, p, l);
  };
  auto key_of = [&](const CommMember& m) {
    const auto& u = s.procs[m.proc].unread[m.local];
    return PrefixKey{u.collectives, u.digest, u.all_to_all, u.all_to_all_key};
  };
  for (int p : reps) offer(p);
  for (const GlobalComm& g : index_.comms)
    for (const CommMember& m : g.members)
      if (const auto& u = s.procs[m.proc].unread; static_cast<size_t>(m.local) < u.size() && u[m.local].collectives > 0 &&
                                                  !prefix_at.count(key_of(m))) {
        reps.push_back(m.proc);
        offer(m.proc);
      }
  std::sort(reps.begin(), reps.end());
  reps.erase(std::unique(reps.begin(), reps.end()), reps.end());
  // The representatives read whole: per file, its collectives in call order ((local comm, line)).
  std::map<int, std::vector<std::pair<uint16_t, uint32_t>>> whole;
  {
    const Schedule f = load_schedule_of(s, reps);
    std::unordered_map<std::string, int> proc_of_path;
    for (int p : reps) proc_of_path.emplace(s.procs[p].info.path, p);
    std::vector<int64_t> line_of_sig(f.sigs.size(), -1);
    for (const SchedProcess& sp : f.procs) {
      auto it = proc_of_path.find(sp.info.path);
      if (it == proc_of_path.end()) continue;
      auto& out = whole[it->second];
      for (const SchedOp& o : sp.ops) {
        if (!digest::in_collective_sequence(f.sigs[o.sig].op)) continue;
        int64_t& line = line_of_sig[o.sig];
        if (line < 0) line = intern(baseline_signature(f.sigs[o.sig]));
        out.emplace_back(o.comm, static_cast<uint32_t>(line));
      }
    }
    for (int p : reps)
      if (!whole.count(p)) throw LoadError("a file read for the canonical schedule could not be read again: " + s.procs[p].info.path);
  }
  std::vector<int64_t> line_of_sig(s.sigs.size(), -1);
  auto line = [&](uint32_t sig) {
    int64_t& l = line_of_sig[sig];
    if (l < 0) l = intern(baseline_signature(s.sigs[sig]));
    return static_cast<uint32_t>(l);
  };
  // Communicators: the member kept as add() keeps one (the least base, then the lowest place),
  // its collectives before the cut from the file proven to hold the same, then its own.
  for (size_t g = 0; g < index_.comms.size(); ++g)
    for (size_t k = 0; k < index_.comms[g].members.size(); ++k) {
      const CommMember& m = index_.comms[g].members[k];
      const ProcComm& pc = index_.of(m);
      Comm& c = comms_[g];
      if (pc.base > c.base || (pc.base == c.base && k >= c.member)) continue;
      c.base = pc.base, c.member = k;
      c.ops.clear();
      const auto& u = s.procs[m.proc].unread;
      if (static_cast<size_t>(m.local) < u.size() && u[m.local].collectives > 0) {
        const auto [p, l] = prefix_at.at(key_of(m));
        for (const auto& [comm, id] : whole.at(p))
          if (comm == l && static_cast<int64_t>(c.ops.size()) < u[m.local].collectives) c.ops.push_back(id);
        c.base = 0;  // the whole history, as a full read has it
      }
      for (uint32_t i : pc.colls) c.ops.push_back(line(s.procs[m.proc].ops[i].sig));
    }
  // Ranks: the representative's first collectives up to the newest cut, then the rank's own
  // collectives read after it (its first read ones lie before that cut: skipped). Ranks of one
  // representative with the same collectives after the cut share one sequence, built once (the
  // 16,384 ranks of one program: one sequence of 10,000, not 16,384 of them).
  std::map<std::pair<int, std::vector<int32_t>>, std::vector<int>> groups;  // (rep, tail) -> ranks' procs
  std::vector<const std::pair<const std::pair<int, std::vector<int32_t>>, std::vector<int>>*> in_order;
  std::vector<int32_t> tail;
  std::vector<int32_t> families(UINT16_MAX + size_t(1));  // per local communicator (SchedOp::comm)
  for (size_t p = 0; p < s.procs.size(); ++p) {
    const SchedProcess& sp = s.procs[p];
    if (sp.info.retired_ops > 0) {
      windowed_.push_back(display_rank(s, static_cast<int>(p)));
      continue;
    }
    tail.clear();
    int64_t skip = rep_of[p] >= 0 ? newest[p].count - newest[p].unread : 0;
    for (size_t l = 0; l < sp.info.comms.size(); ++l) families[l] = family_of(p, l);
    for (const SchedOp& o : sp.ops) {
      if (!digest::in_collective_sequence(s.sigs[o.sig].op)) continue;
      if (skip > 0) {
        --skip;
        continue;
      }
      if (const int32_t f = families[o.comm]; f >= 0) tail.push_back(f);
    }
    auto [it, fresh] = groups.try_emplace({rep_of[p], tail});
    if (fresh) in_order.push_back(&*it);
    it->second.push_back(static_cast<int>(p));
  }
  std::vector<int32_t> seq;
  for (const auto* g : in_order) {
    const int rep = g->first.first;
    const int first = g->second.front();
    seq.clear();
    if (rep >= 0) {
      const size_t r = static_cast<size_t>(rep);
      const auto& w = whole.at(rep);
      if (static_cast<int64_t>(w.size()) < newest[first].count)
        throw LoadError("a file read for the canonical schedule holds fewer collectives than its order digest says");
      for (size_t l = 0; l < s.procs[r].info.comms.size(); ++l) families[l] = family_of(r, l);
      for (int64_t i = 0; i < newest[first].count; ++i)
        if (const int32_t f = families[w[static_cast<size_t>(i)].first]; f >= 0) seq.push_back(f);
    }
    seq.insert(seq.end(), g->first.second.begin(), g->first.second.end());
    add_order(g->second, seq);
  }
  return true;
} catch (const NotProven&) {
  return false;
}

CanonicalText CanonicalSchedule::text() const {
  std::ostringstream os;
  os << kBaselineHeader << "\n"
     << "# Per communicator role: its collectives in order (xN = N times). Then per group of ranks: the\n"
     << "# order in which they issued the roles' collectives (split colors omitted).\n"
     << "# Regenerate: lockstep check DIR --write-baseline FILE\n";
  struct Variant {
    int nranks;
    int64_t first;  // 1-based ordinal of ops[0]; 0: nothing retired
    const std::vector<uint32_t>* ops;
    bool operator==(const Variant& o) const { return nranks == o.nranks && first == o.first && *ops == *o.ops; }
  };
  std::map<std::string, std::vector<Variant>> roles;
  for (size_t g = 0; g < index_.comms.size(); ++g) {
    const Comm& c = comms_[g];
    if (c.base == INT64_MAX) continue;  // no member read
    Variant v{index_.comms[g].nranks, c.base > 0 ? c.base + 1 : 0, &c.ops};
    auto& variants = roles[index_.comms[g].role];
    if (std::find(variants.begin(), variants.end(), v) == variants.end()) variants.push_back(v);
  }
  std::vector<std::string> lines;
  for (auto& [role, variants] : roles)
    for (size_t v = 0; v < variants.size(); ++v) {
      const Variant& x = variants[v];
      os << "comm " << role;
      if (variants.size() > 1) os << " variant " << v + 1;
      os << " nranks=" << x.nranks << " collectives=";
      if (x.first > 0) os << "#" << x.first << "..#" << x.first + static_cast<int64_t>(x.ops->size()) - 1 << "\n";
      else os << x.ops->size() << "\n";
      lines.clear();
      for (uint32_t id : *x.ops) lines.push_back(strings_[id]);
      run_length(os, lines, "  ");
    }
  std::vector<std::string> names;
  for (const std::vector<int32_t>* ids : first_seen_) {
    os << "order ranks " << rank_ranges(orders_.at(*ids)) << "\n";
    names.clear();
    for (int32_t f : *ids) names.push_back(family_names_[static_cast<size_t>(f)]);
    run_length(os, names, "  ");
  }
  if (!windowed_.empty())
    os << "# order of ranks " << rank_ranges(windowed_) << " not kept: the size cap retired their oldest ops\n";
  return {os.str(), first_seen_.size(), !windowed_.empty()};
}

CanonicalText canonical_schedule(const Analysis& a) {
  CanonicalSchedule c(*a.schedule, a.index);
  std::vector<int> same(a.schedule->procs.size());
  for (size_t p = 0; p < same.size(); ++p) same[p] = static_cast<int>(p);
  c.add(*a.schedule, a.index, same);
  return c.text();
}

std::optional<CanonicalText> canonical_schedule_proven(const Schedule& s, const CommIndex& index) {
  CanonicalSchedule c(s, index);
  if (!c.add_proven()) return std::nullopt;
  return c.text();
}

CanonicalText canonical_schedule_of_files(const Schedule& headers, const CommIndex& index, uint64_t batch_bytes) {
  CanonicalSchedule c(headers, index);
  std::unordered_map<std::string, int> header_of_path;
  for (size_t p = 0; p < headers.procs.size(); ++p) header_of_path.emplace(headers.procs[p].info.path, static_cast<int>(p));
  for (size_t next = 0; next < headers.procs.size();) {
    std::vector<int> procs;
    for (uint64_t bytes = 0; next < headers.procs.size() && (procs.empty() || bytes < batch_bytes); ++next) {
      std::error_code ec;
      const uintmax_t size = std::filesystem::file_size(headers.procs[next].info.path, ec);
      bytes += ec ? 0 : size;
      procs.push_back(static_cast<int>(next));
    }
    const Schedule s = load_schedule_of(headers, procs);
    std::vector<int> header_of(s.procs.size(), -1);
    for (size_t p = 0; p < s.procs.size(); ++p)
      if (auto it = header_of_path.find(s.procs[p].info.path); it != header_of_path.end()) header_of[p] = it->second;
    c.add(s, build_comm_index(s), header_of);
  }
  return c.text();
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

// Lines a baseline may expand to, in all its sections (a hostile file's repeat counts).
constexpr size_t kMaxOps = 50'000'000;

size_t indent_of(const std::string& l) { return l.find_first_not_of(' '); }

// Expands lines [i, end) at `indent` into `out` (bounded: a hostile file cannot make it huge).
bool expand(const std::vector<std::string>& v, size_t& i, size_t indent, std::vector<std::string>& out,
            size_t& budget) {
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
    if (block && !expand(v, i, ind + 1, body, budget)) return false;
    if (!block) body.push_back(l);
    if (reps > kMaxOps || body.size() > kMaxOps || reps * body.size() > budget) return false;
    budget -= reps * body.size();
    for (uint64_t r = 0; r < reps; ++r) out.insert(out.end(), body.begin(), body.end());
  }
  return true;
}

// The comm sections of a baseline; false when one does not parse, or does not hold the
// collectives its header says ("collectives=N": N lines; "collectives=#a..#b": b - a + 1).
bool comm_sections(const std::vector<std::string>& v, std::vector<CommSection>& out) {
  size_t budget = kMaxOps;
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
    int64_t declared_last = 0;
    char* end = nullptr;
    if (!n.empty() && n[0] == '#') {
      c.first = std::strtoll(n.c_str() + 1, &end, 10);
      if (std::strncmp(end, "..#", 3) != 0) return false;
      declared_last = std::strtoll(end + 3, &end, 10);
    } else {
      declared_last = std::strtoll(n.c_str(), &end, 10);
    }
    if (!end || *end != '\0' || c.first < 1) return false;
    ++i;
    if (!expand(v, i, 1, c.ops, budget)) return false;
    if (c.last() != declared_last) return false;
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
    // The size cap retires a communicator's oldest collectives only: a window's last ordinal is
    // how many it issued. Two counts are two schedules, whatever the windows share.
    if (x.last() != y->last()) {
      d.equal = false;
      diff << "in section: " << x.header << ": the baseline's run issued " << x.last() << " collectives, this run "
           << y->last() << "\n";
      continue;
    }
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
