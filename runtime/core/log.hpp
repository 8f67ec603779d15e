// gradsync/core/log.hpp — logs in NCCL's line format, levels from GRADSYNC_DEBUG.
//
//   node07:12345:12345 GRADSYNC INFO ring: 4 ranks, chunk 4194304 bytes, 2 channels
//
// GRADSYNC_DEBUG=WARN|INFO|TRACE (default: quiet, i.e. only errors the program prints itself).
// GRADSYNC_DEBUG_FILE=pattern writes to a file instead of stderr; %h is replaced by the host
// name and %p by the pid (one file per process, as NCCL_DEBUG_FILE).
#pragma once

#include <sstream>
#include <string>

namespace gradsync {

enum class LogLevel { None = 0, Warn = 1, Info = 2, Trace = 3 };

LogLevel log_level();                       // parsed once from GRADSYNC_DEBUG
void set_log_level(LogLevel level);         // tests and --verbose flags
void log_write(LogLevel level, const std::string& msg);

// One log line; the text is emitted when the object dies.
class LogLine {
 public:
  explicit LogLine(LogLevel level) : level_(level) {}
  ~LogLine() { log_write(level_, os_.str()); }
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;
  template <typename T>
  LogLine& operator<<(const T& v) {
    os_ << v;
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream os_;
};

}  // namespace gradsync

// GS_LOG(INFO) << "message " << value;   — costs one comparison when the level is off.
#define GS_LOG(LEVEL)                                                              \
  if (::gradsync::log_level() < ::gradsync::LogLevel::GS_LOGLEVEL_##LEVEL) {       \
  } else                                                                           \
    ::gradsync::LogLine(::gradsync::LogLevel::GS_LOGLEVEL_##LEVEL)
#define GS_LOGLEVEL_WARN Warn
#define GS_LOGLEVEL_INFO Info
#define GS_LOGLEVEL_TRACE Trace
