// SQLite keeps process-wide mutexes (its allocator's, the unix VFS's list of open files). A
// fork() while a recorder thread holds one leaves it locked forever in the child, whose first
// trace then hangs in sqlite3_open. So every recorder call into SQLite runs inside a
// SqliteSection, and fork's prepare handler takes the section: the child inherits SQLite with
// no recorder thread inside it.
#pragma once

namespace lockstep::rec {

class SqliteSection {
 public:
  SqliteSection() noexcept;
  ~SqliteSection() noexcept;
  SqliteSection(const SqliteSection&) = delete;
  SqliteSection& operator=(const SqliteSection&) = delete;
  // Between two SQLite calls of a long section (a writer's round of 200,000 rows): if a fork is
  // waiting, step out, let it happen, step back in. The transaction stays open meanwhile.
  static void let_fork_in() noexcept;
};

// pthread_atfork handlers (lifecycle.cpp). prepare waits at most kForkWaitMs for the section: a
// writer stuck in a slow COMMIT must not stall the program's fork indefinitely.
constexpr int kForkWaitMs = 1000;
void sqlite_section_before_fork() noexcept;
void sqlite_section_after_fork_parent() noexcept;
// Returns false when the fork happened while a recorder thread was inside SQLite (the wait
// timed out): SQLite is unusable in this child, which must run untraced.
bool sqlite_section_after_fork_child() noexcept;

}  // namespace lockstep::rec
