#include "core/log.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "core/error.hpp"

namespace gradsync {
namespace {

LogLevel parse_level(const char* s) {
  if (!s) return LogLevel::None;
  std::string v(s);
  for (auto& c : v) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
  if (v == "WARN") return LogLevel::Warn;
  if (v == "INFO") return LogLevel::Info;
  if (v == "TRACE") return LogLevel::Trace;
  return LogLevel::None;  // VERSION, empty, unknown: quiet
}

std::atomic<int>& level_storage() {
  static std::atomic<int> level{static_cast<int>(parse_level(std::getenv("GRADSYNC_DEBUG")))};
  return level;
}

FILE* log_stream() {
  static FILE* stream = [] {
    const char* pattern = std::getenv("GRADSYNC_DEBUG_FILE");
    if (!pattern || !*pattern) return stderr;
    std::string path;
    for (const char* p = pattern; *p; ++p) {
      if (p[0] == '%' && p[1] == 'h') {
        path += process_host();
        ++p;
      } else if (p[0] == '%' && p[1] == 'p') {
        path += std::to_string(getpid());
        ++p;
      } else {
        path += *p;
      }
    }
    FILE* f = std::fopen(path.c_str(), "a");
    return f ? f : stderr;
  }();
  return stream;
}

const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::Warn: return "WARN";
    case LogLevel::Info: return "INFO";
    case LogLevel::Trace: return "TRACE";
    default: return "";
  }
}

}  // namespace

LogLevel log_level() { return static_cast<LogLevel>(level_storage().load(std::memory_order_relaxed)); }

void set_log_level(LogLevel level) { level_storage().store(static_cast<int>(level)); }

void log_write(LogLevel level, const std::string& msg) {
  static std::mutex mu;
  const long tid = syscall(SYS_gettid);
  std::string line = process_host() + ":" + std::to_string(getpid()) + ":" + std::to_string(tid);
  if (process_rank() >= 0) line += " [" + std::to_string(process_rank()) + "]";
  line += " GRADSYNC ";
  line += level_name(level);
  line += " ";
  line += msg;
  line += "\n";
  std::lock_guard<std::mutex> lock(mu);
  FILE* f = log_stream();
  std::fputs(line.c_str(), f);
  std::fflush(f);
}

}  // namespace gradsync
