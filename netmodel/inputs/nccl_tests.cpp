// gradsync/netmodel/inputs/nccl_tests.cpp — nccl-tests text/JSON and gradsync-bench table
// readers (see nccl_tests.hpp for the formats and the inference rules).
#include "netmodel/inputs/nccl_tests.hpp"

#include <boost/property_tree/json_parser.hpp>
#include <boost/property_tree/ptree.hpp>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "netmodel/train_file.hpp"

namespace gradsync::netmodel {

namespace {

[[noreturn]] void fail(const std::string& origin, int line, const std::string& why) {
  throw UsageError(origin + (line > 0 ? ":" + std::to_string(line) : "") + ": " + why);
}

std::vector<std::string> tokens(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  for (std::string t; is >> t;) out.push_back(t);
  return out;
}

bool parse_int(const std::string& t, long long& v) {
  const char* b = t.data();
  const char* e = b + t.size();
  auto r = std::from_chars(b, e, v);
  return r.ec == std::errc() && r.ptr == e;
}

bool parse_num(const std::string& t, double& v) {
  char* end = nullptr;
  v = std::strtod(t.c_str(), &end);
  return end && *end == '\0' && !t.empty() && std::isfinite(v);
}

// Drops a launcher prefix: Open MPI --tag-output `[1,0]<stdout>:`, srun -l `0: `,
// then leading blanks (a log pasted indented in a README).
std::string strip_prefix(const std::string& raw) {
  std::string s = raw;
  if (!s.empty() && s.back() == '\r') s.pop_back();
  if (s.size() > 2 && s[0] == '[') {
    const auto close = s.find("]<");
    const auto colon = s.find(">:");
    if (close != std::string::npos && colon != std::string::npos && colon > close) s = s.substr(colon + 2);
  }
  std::size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  if (i > 0 && i + 1 < s.size() && s[i] == ':' && s[i + 1] == ' ') {
    // `0: ` (srun -l) but not a data row: a data row never has a colon after its first token.
    s = s.substr(i + 2);
  }
  const auto first = s.find_first_not_of(" \t");
  return first == std::string::npos ? "" : s.substr(first);
}

// The op a program name implies (all_reduce_perf, all_reduce_perf_mpi, gradsync-bench ops).
bool op_from_program(const std::string& prog, Op& op) {
  static const std::vector<std::pair<const char*, Op>> table = {
      {"all_reduce", Op::Allreduce},   {"allreduce", Op::Allreduce},     {"all_gather", Op::Allgather},
      {"allgather", Op::Allgather},    {"reduce_scatter", Op::ReduceScatter}, {"reducescatter", Op::ReduceScatter},
      {"alltoall", Op::Alltoall},      {"broadcast", Op::Broadcast},     {"sendrecv", Op::Pingpong},
      {"pingpong", Op::Pingpong}};
  for (const auto& [key, o] : table)
    if (prog.find(key) != std::string::npos) {
      op = o;
      return true;
    }
  return false;
}

// Columns of one header block.
struct Layout {
  std::size_t ncols = 0;
  int size = -1, count = -1, type = -1, redop = -1, root = -1, time_oop = -1, time_ip = -1, algo = -1;
  bool timestamp = false;  // nccl-tests -T: a trailing "YYYY-MM-DD HH:MM:SS" (two tokens, one label)
  bool pingpong = false;  // gradsync-bench's `size time bw #wrong`
};

bool parse_header(const std::vector<std::string>& t, Layout& L) {
  if (t.empty() || t[0] != "size") return false;
  Layout l;
  l.ncols = t.size();
  for (std::size_t i = 0; i < t.size(); ++i) {
    const std::string& c = t[i];
    const int ii = static_cast<int>(i);
    if (c == "size") l.size = ii;
    else if (c == "count") l.count = ii;
    else if (c == "type") l.type = ii;
    else if (c == "redop") l.redop = ii;
    else if (c == "root") l.root = ii;
    else if (c == "time" || c == "cputime") (l.time_oop < 0 ? l.time_oop : l.time_ip) = ii;
    else if (c == "algo") l.algo = ii;
    else if (c == "timestamp") l.timestamp = true;
  }
  if (l.time_oop < 0) return false;
  l.pingpong = l.count < 0;
  L = l;
  return true;
}

// Shape and program lines common to nccl-tests and gradsync-bench headers.
struct Scan {
  std::map<int, std::string> rank_host;  // rank -> host
  std::string program;
  std::string other_program;             // a second, different program in the same log
  std::string bench_op, bench_algo;      // from `# gradsync-bench: OP, algo A, ...`
  int busy_threads = 0;                  // `# busy threads: N per rank ...` (gradsync-bench),
                                         // `... busy-threads: N` (the torch bench)
  int nics = 0;
  std::string nics_line;
  bool footer = false;
};

void scan_comment(const std::string& body, Scan& s) {
  const auto t = tokens(body);
  if (t.size() >= 6 && t[0] == "Rank") {
    long long r = 0;
    if (!parse_int(t[1], r)) return;
    for (std::size_t i = 2; i + 1 < t.size(); ++i)
      if (t[i] == "on") {
        s.rank_host[static_cast<int>(r)] = t[i + 1];
        return;
      }
    return;
  }
  if (body.rfind("Collective test starting:", 0) == 0 && t.size() >= 4) {
    if (!s.program.empty() && s.program != t[3]) s.other_program = t[3];
    else s.program = t[3];
  }
  if (body.rfind("gradsync-bench:", 0) == 0 && t.size() >= 4) {
    s.program = "gradsync-bench";
    s.bench_op = t[1];
    if (!s.bench_op.empty() && s.bench_op.back() == ',') s.bench_op.pop_back();
    if (t[2] == "algo") {
      s.bench_algo = t[3];
      if (!s.bench_algo.empty() && s.bench_algo.back() == ',') s.bench_algo.pop_back();
    }
  }
  if (body.rfind("Avg bus bandwidth", 0) == 0 || body.rfind("Out of bounds values", 0) == 0) s.footer = true;
  for (std::size_t i = 0; i + 1 < t.size(); ++i) {
    long long n = 0;
    if ((t[i] == "busy-threads:" || (t[i] == "threads:" && i > 0 && t[i - 1] == "busy")) && parse_int(t[i + 1], n) && n > 0)
      s.busy_threads = static_cast<int>(n);
  }
}

// NICs from NCCL INFO lines (only the first statement counts).
void scan_info(const std::string& line, Scan& s) {
  if (s.nics > 0) return;
  const auto ib = line.find("NET/IB : Using");
  if (ib != std::string::npos) {
    int n = 0;
    for (std::size_t p = line.find('[', ib); p != std::string::npos; p = line.find('[', p + 1)) ++n;
    if (n > 0) {
      s.nics = n;
      s.nics_line = "NCCL INFO NET/IB : Using (" + std::to_string(n) + " devices)";
    }
    return;
  }
  const auto ofi = line.find("(found ");
  if (ofi != std::string::npos && line.find("nics)", ofi) != std::string::npos) {
    long long n = 0;
    const auto t = tokens(line.substr(ofi + 7));
    if (!t.empty() && parse_int(t[0], n) && n > 0) {
      s.nics = static_cast<int>(n);
      s.nics_line = "aws-ofi-nccl (found " + t[0] + " nics)";
    }
  }
}

// Rows with the same size (repeated header blocks, duplicate lines) become one: the
// median of their times.
void merge_duplicates(OutsideLog& log) {
  std::map<double, std::vector<OutsideRow>> by;
  for (const auto& r : log.rows) by[r.bytes].push_back(r);
  int dups = 0;
  std::vector<OutsideRow> out;
  for (auto& [b, v] : by) {
    if (v.size() > 1) ++dups;
    OutsideRow m = v.front();
    std::vector<double> o, ip;
    for (const auto& r : v) {
      o.push_back(r.oop_us);
      if (r.ip_us > 0) ip.push_back(r.ip_us);
    }
    m.oop_us = median(o);
    m.ip_us = ip.empty() ? 0 : median(ip);
    out.push_back(m);
  }
  if (dups > 0)
    log.notes.push_back(std::to_string(dups) + " size(s) measured more than once (repeated header blocks or duplicate rows): "
                        "the median of their times is used");
  log.rows = std::move(out);
}

double type_size(const std::string& t) {
  if (t == "int8" || t == "uint8" || t == "char" || t == "byte" || t == "fp8_e4m3" || t == "fp8_e5m2") return 1;
  if (t == "half" || t == "bfloat16" || t == "fp16" || t == "bf16" || t == "f16") return 2;
  if (t == "float" || t == "int32" || t == "uint32" || t == "int" || t == "fp32" || t == "f32") return 4;
  if (t == "double" || t == "int64" || t == "uint64" || t == "fp64" || t == "f64") return 8;
  return 0;
}

// The op from the columns of the first non-zero row (see the header comment).
bool op_from_columns(const std::string& redop, long long root, double bytes, double count, double tsize, int ranks,
                     Op& op, std::string& why) {
  const bool reduces = !redop.empty() && redop != "none";
  if (root >= 0 && !reduces) {
    op = Op::Broadcast;
    why = "columns: root " + std::to_string(root) + ", redop none";
    return true;
  }
  if (tsize <= 0 || count <= 0) return false;
  const double ratio = bytes / (count * tsize);
  if (reduces && std::abs(ratio - 1) < 1e-9 && root < 0) {
    op = Op::Allreduce;
    why = "columns: redop " + redop + ", count x type size = size";
    return true;
  }
  if (ranks > 1 && std::abs(ratio - ranks) < 1e-9) {
    op = reduces ? Op::ReduceScatter : Op::Allgather;
    why = std::string("columns: redop ") + (reduces ? redop : "none") + ", count x type size = size / ranks";
    return true;
  }
  return false;
}

void finish(OutsideLog& log, const OutsideOverrides& ov, int nics, const std::string& nics_line) {
  if (!ov.op.empty()) {
    log.op = parse_op(ov.op);
    log.op_from = "--op";
  }
  if (ov.nodes > 0 || ov.ranks_per_node > 0) {
    if (ov.nodes > 0 && ov.ranks_per_node > 0) {
      log.nodes = ov.nodes;
      log.ranks_per_node = ov.ranks_per_node;
    } else if (log.ranks > 0) {
      const int given = ov.nodes > 0 ? ov.nodes : ov.ranks_per_node;
      GS_USAGE_CHECK(log.ranks % given == 0, log.path, ": ", log.ranks, " ranks in the log cannot be split by --",
                     ov.nodes > 0 ? "nodes " : "ranks-per-node ", given);
      log.nodes = ov.nodes > 0 ? ov.nodes : log.ranks / given;
      log.ranks_per_node = ov.ranks_per_node > 0 ? ov.ranks_per_node : log.ranks / given;
    } else {
      GS_USAGE_CHECK(false, log.path, ": the log has no devices block; give both --nodes and --ranks-per-node");
    }
    if (log.ranks > 0 && log.nodes * log.ranks_per_node != log.ranks)
      log.notes.push_back("--nodes x --ranks-per-node (" + std::to_string(log.nodes * log.ranks_per_node) +
                          ") differs from the " + std::to_string(log.ranks) + " ranks the log lists; the options win");
    log.shape_from = "--nodes/--ranks-per-node";
  }
  if (ov.nics_per_node > 0) {
    log.nics_per_node = ov.nics_per_node;
    log.nics_from = "--nics-per-node";
  } else if (nics > 0) {
    log.nics_per_node = nics;
    log.nics_from = nics_line;
  }
  std::size_t zero = 0;
  std::vector<OutsideRow> kept;
  for (const auto& r : log.rows) (r.bytes > 0 ? (void)kept.push_back(r) : (void)++zero);
  if (zero > 0) log.notes.push_back(std::to_string(zero) + " row(s) of 0 bytes dropped (nothing to fit)");
  log.rows = std::move(kept);
  merge_duplicates(log);
}

void shape_from_hosts(OutsideLog& log, const Scan& s, const std::string& block) {
  if (s.rank_host.empty()) return;
  std::map<std::string, int> per_host;
  for (const auto& [r, h] : s.rank_host) ++per_host[h];
  log.ranks = static_cast<int>(s.rank_host.size());
  log.nodes = static_cast<int>(per_host.size());
  std::set<int> counts;
  for (const auto& [h, c] : per_host) counts.insert(c);
  if (counts.size() == 1) {
    log.ranks_per_node = *counts.begin();
    log.shape_from = block;
  } else {
    log.ranks_per_node = 0;  // uneven: outside_points refuses unless overridden
    log.shape_from = block + " (uneven: hosts hold different rank counts)";
  }
}

}  // namespace

bool is_outside_log(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char sig[8] = {};
  in.read(sig, 8);
  static const char h5sig[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  return !(in.gcount() == 8 && std::memcmp(sig, h5sig, 8) == 0);
}

OutsideLog parse_nccl_tests_text(const std::string& text, const std::string& origin, const OutsideOverrides& ov) {
  OutsideLog log;
  log.path = origin;
  log.format = "nccl-tests text";
  Scan scan;
  Layout L;
  bool have_layout = false;
  int nheaders = 0;
  std::string first_redop;
  long long first_root = -1;
  double first_bytes = 0, first_count = 0, first_tsize = 0;
  std::istringstream in(text);
  std::string raw;
  int lineno = 0;
  while (std::getline(in, raw)) {
    ++lineno;
    const std::string s = strip_prefix(raw);
    if (s.empty()) continue;
    if (s[0] == '#') {
      const std::string body = strip_prefix(s.substr(1));
      auto t = tokens(body);
      Layout nl;
      if (parse_header(t, nl)) {
        L = nl;
        have_layout = true;
        ++nheaders;
        continue;
      }
      scan_comment(body, scan);
      continue;
    }
    scan_info(s, scan);
    const auto t = tokens(s);
    long long size = 0;
    if (t.size() < 3 || !parse_int(t[0], size)) continue;
    double second_num = 0;
    if (!parse_num(t[1], second_num)) continue;  // an INFO line that starts with a number
    if (!have_layout)
      fail(origin, lineno, "a data row before any column header ('#  size  count  type ...'): not an nccl-tests table");
    if (t.size() != L.ncols) {
      // Tolerated: a missing trailing algo column; the timestamp's date and time (two tokens).
      if (!(L.algo >= 0 && t.size() + 1 == L.ncols) && !(L.timestamp && t.size() == L.ncols + 1))
        fail(origin, lineno,
             "row has " + std::to_string(t.size()) + " columns, the header has " + std::to_string(L.ncols) +
                 " (truncated line or a different table mixed in)");
    }
    OutsideRow r;
    r.bytes = static_cast<double>(size);
    r.line = lineno;
    if (!parse_num(t[static_cast<std::size_t>(L.time_oop)], r.oop_us) || r.oop_us < 0)
      fail(origin, lineno, "time column '" + t[static_cast<std::size_t>(L.time_oop)] + "' is not a number");
    if (L.time_ip >= 0 && static_cast<std::size_t>(L.time_ip) < t.size()) {
      double ip = 0;
      if (parse_num(t[static_cast<std::size_t>(L.time_ip)], ip) && ip > 0) r.ip_us = ip;
    }
    if (size < 0) fail(origin, lineno, "negative size " + t[0]);
    if (first_bytes == 0 && size > 0 && !L.pingpong) {
      first_bytes = r.bytes;
      first_count = second_num;
      first_tsize = L.type >= 0 ? type_size(t[static_cast<std::size_t>(L.type)]) : 0;
      if (L.type >= 0) log.type = t[static_cast<std::size_t>(L.type)];
      first_redop = L.redop >= 0 ? t[static_cast<std::size_t>(L.redop)] : "";
      long long root = -1;
      if (L.root >= 0) parse_int(t[static_cast<std::size_t>(L.root)], root);
      first_root = root;
    }
    if (L.algo >= 0 && static_cast<std::size_t>(L.algo) < t.size()) r.algo = t[static_cast<std::size_t>(L.algo)];
    log.rows.push_back(r);
  }
  if (!have_layout) fail(origin, 0, "no nccl-tests table header ('#  size  count  type  redop ...  time  algbw  busbw') found");
  if (log.rows.empty()) fail(origin, 0, "the table has a header but no data rows");
  if (!scan.other_program.empty())
    fail(origin, 0, "two different collectives in one log (" + scan.program + ", " + scan.other_program +
                        "): split it into one file per program");
  if (nheaders > 1) log.notes.push_back(std::to_string(nheaders) + " header blocks (several runs in one log): read as one sweep");
  if (!scan.footer) log.notes.push_back("no '# Avg bus bandwidth' footer (the log may be cut short): the rows found are used");

  // Program, op, shape.
  log.program = scan.program;
  log.busy_threads = scan.busy_threads;
  bool op_known = false;
  if (scan.program == "gradsync-bench") {
    log.format = "gradsync-bench table";
    log.algo = scan.bench_algo.empty() ? "ring" : scan.bench_algo;
    if (!scan.bench_op.empty()) {
      log.op = parse_op(scan.bench_op);
      log.op_from = "gradsync-bench header";
      op_known = true;
    }
  } else if (!scan.program.empty() && op_from_program(scan.program, log.op)) {
    log.op_from = "program name (" + scan.program + ")";
    op_known = true;
  }
  if (!op_known && L.pingpong) {
    log.op = Op::Pingpong;
    log.op_from = "columns (size, time, bw: a pingpong table)";
    op_known = true;
  }
  if (!op_known) {
    const std::string base = std::filesystem::path(origin).filename().string();
    if (op_from_program(base, log.op)) {
      log.op_from = "file name (" + base + ")";
      op_known = true;
    }
  }
  shape_from_hosts(log, scan, scan.program == "gradsync-bench" ? "ranks block" : "devices block");
  if (!op_known && ov.op.empty()) {
    std::string why;
    if (op_from_columns(first_redop, first_root, first_bytes, first_count, first_tsize, log.ranks, log.op, why)) {
      log.op_from = why;
      op_known = true;
    }
  }
  if (!op_known && ov.op.empty())
    fail(origin, 0,
         "cannot tell which collective this is (no known program name in the log or the file name, and the columns do "
         "not decide it: alltoall and sendrecv look alike; reduce, gather, scatter are not modelled): give --op "
         "(allreduce, allgather, reducescatter, alltoall, broadcast, pingpong)");
  finish(log, ov, scan.nics, scan.nics_line);
  if (log.rows.empty()) fail(origin, 0, "no rows with a size > 0");
  return log;
}

OutsideLog parse_nccl_tests_json(const std::string& text, const std::string& origin, const OutsideOverrides& ov) {
  namespace pt = boost::property_tree;
  pt::ptree root;
  try {
    std::istringstream is(text);
    pt::read_json(is, root);
  } catch (const pt::json_parser_error& e) {
    fail(origin, static_cast<int>(e.line()), "not valid JSON (" + e.message() + ")");
  }
  const auto results = root.get_child_optional("results");
  if (!results) fail(origin, 0, "JSON without a 'results' list (not nccl-tests -J output)");
  OutsideLog log;
  log.path = origin;
  log.format = "nccl-tests json";
  Scan scan;
  if (const auto args = root.get_child_optional("args"))
    if (!args->empty()) {
      const std::string a0 = args->begin()->second.get_value<std::string>();
      log.program = std::filesystem::path(a0).filename().string();
    }
  if (root.get<std::string>("program", "") == "gradsync-bench") log.program = "gradsync-bench";
  if (const auto devs = root.get_child_optional("config.devices"))
    for (const auto& [k, d] : *devs) {
      (void)k;
      scan.rank_host[d.get<int>("rank", static_cast<int>(scan.rank_host.size()))] = d.get<std::string>("hostname", "?");
    }
  bool op_known = false;
  if (!log.program.empty() && op_from_program(log.program, log.op)) {
    log.op_from = "program name (" + log.program + ")";
    op_known = true;
  }
  if (const auto gop = root.get_optional<std::string>("gradsync.op")) {
    log.op = parse_op(*gop);
    log.op_from = "gradsync-bench JSON";
    log.program = "gradsync-bench";
    log.algo = root.get<std::string>("gradsync.algo", "ring");
    log.busy_threads = root.get<int>("gradsync.busy_threads", 0);
    op_known = true;
  }
  shape_from_hosts(log, scan, "devices list");
  int idx = 0;
  std::string first_redop;
  long long first_root = -1;
  double first_bytes = 0, first_count = 0, first_tsize = 0;
  for (const auto& [k, r] : *results) {
    (void)k;
    ++idx;
    OutsideRow row;
    row.line = idx;
    row.bytes = r.get<double>("size", -1);
    if (row.bytes < 0) fail(origin, 0, "results[" + std::to_string(idx - 1) + "] has no 'size'");
    const auto oop = r.get_child_optional("out_of_place");
    const auto ip = r.get_child_optional("in_place");
    auto time_of = [](const pt::ptree& p) {
      const double t = p.get<double>("time", -1);
      return t >= 0 ? t : p.get<double>("cpu_time", -1);
    };
    double t = oop && !oop->empty() ? time_of(*oop) : -1;
    const double ti = ip && !ip->empty() ? time_of(*ip) : -1;
    if (t < 0) t = ti;  // trace replay writes only in-place
    if (t < 0) fail(origin, 0, "results[" + std::to_string(idx - 1) + "] has no out_of_place/in_place time");
    row.oop_us = t;
    row.ip_us = ti > 0 ? ti : 0;
    row.algo = r.get<std::string>("algo_used", "");  // gradsync-bench's own key
    if (first_bytes == 0 && row.bytes > 0) {
      first_bytes = row.bytes;
      first_count = r.get<double>("count", 0);
      log.type = r.get<std::string>("type", "");
      first_tsize = type_size(log.type);
      first_redop = r.get<std::string>("redop", "");
      long long rt = -1;
      const auto rs = tokens(r.get<std::string>("root", "-1"));
      if (!rs.empty()) parse_int(rs[0], rt);
      first_root = rt;
    }
    log.rows.push_back(row);
  }
  if (log.rows.empty()) fail(origin, 0, "'results' is empty");
  if (!op_known && ov.op.empty()) {
    std::string why;
    if (op_from_columns(first_redop, first_root, first_bytes, first_count, first_tsize, log.ranks, log.op, why)) {
      log.op_from = why;
      op_known = true;
    }
  }
  if (!op_known && ov.op.empty()) fail(origin, 0, "cannot tell which collective this is from args[0] or the columns: give --op");
  finish(log, ov, 0, "");
  if (log.rows.empty()) fail(origin, 0, "no results with a size > 0");
  return log;
}

OutsideLog read_outside_log(const std::string& path, const OutsideOverrides& ov) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') return parse_nccl_tests_json(text, path, ov);
  return parse_nccl_tests_text(text, path, ov);
}

std::vector<BenchPoint> outside_points(const OutsideLog& log) {
  if (log.nodes <= 0 || log.ranks_per_node <= 0) {
    if (log.nodes > 0 && log.ranks_per_node == 0)
      fail(log.path, 0, "hosts in the devices block hold different numbers of ranks: give --nodes and --ranks-per-node");
    fail(log.path, 0, "the cluster shape is unknown (no '# Using devices' block): give --nodes and --ranks-per-node");
  }
  std::vector<BenchPoint> out;
  for (const auto& r : log.rows) {
    BenchPoint p;
    p.file = log.path;
    p.op = log.op;
    p.topo = Topology{log.nodes, log.ranks_per_node};
    p.bytes = r.bytes;
    // 16-bit sums fit their own rate (calibrate.hpp); other types are read as fp32's.
    p.opt.reduce_dtype = log.type == "half" ? DType::F16 : log.type == "bfloat16" ? DType::BF16 : DType::F32;
    // "nccl": NCCL chose; gradsync-bench: the algorithm it ran at this size (as the HDF5 reader).
    p.algo = log.algo == "nccl" ? log.algo : resolve_algo(r.algo.empty() ? log.algo : r.algo, log.op, r.bytes, p.topo);
    // The faster of out-of-place and in-place: the same collective on the same sizes; when
    // they differ much, the slower is a one-off (nccl-tests' first size carries set-up
    // work, a descheduled iteration), not the link.
    p.time_s = (r.ip_us > 0 ? std::min(r.oop_us, r.ip_us) : r.oop_us) * 1e-6;
    p.nics_per_node = log.nics_per_node > 0 ? log.nics_per_node : 1;
    // A log has no per-iteration record of what went through a shaper: no burst detection.
    p.link_bytes_before = kInf;
    p.busy_threads = log.busy_threads;
    if (p.time_s > 0) out.push_back(p);
  }
  if (out.empty()) fail(log.path, 0, "no row with a positive time");
  return out;
}

std::vector<BenchPoint> read_any_points(const std::string& path, const OutsideOverrides& ov,
                                        std::vector<std::string>& skipped, std::vector<std::string>& inferred) {
  {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) throw UsageError(path + ": is a directory, not a result file or log");
    std::ifstream probe(path, std::ios::binary);
    if (!probe) throw UsageError(path + ": cannot open: " + std::strerror(errno));
  }
  if (!is_outside_log(path)) return read_collective_points(path, skipped);
  const OutsideLog log = read_outside_log(path, ov);
  inferred.push_back(describe(log));
  return outside_points(log);
}

std::string describe(const OutsideLog& log) {
  std::ostringstream os;
  os << log.path << ": " << log.format << (log.program.empty() ? "" : ", program " + log.program) << "; op "
     << op_name(log.op) << " (" << (log.op_from.empty() ? "?" : log.op_from) << ")";
  if (log.nodes > 0 && log.ranks_per_node > 0)
    os << "; " << log.nodes << " node(s) x " << log.ranks_per_node << " rank(s) (" << log.shape_from << ")";
  else
    os << "; shape unknown";
  if (log.nics_per_node > 0) os << "; " << log.nics_per_node << " NIC(s) per node (" << log.nics_from << ")";
  if (log.busy_threads > 0)
    os << "; measured with " << log.busy_threads << " busy thread(s) per rank (fits the contention)";
  os << "; " << log.rows.size() << " sizes";
  for (const auto& n : log.notes) os << "; " << n;
  return os.str();
}

}  // namespace gradsync::netmodel
