// gradsync/core/netif.cpp — see netif.hpp.
#include "core/netif.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "core/error.hpp"
#include "core/h5io.hpp"

namespace gradsync {

namespace {

bool read_counter(const std::filesystem::path& file, std::uint64_t& value) {
  std::ifstream in(file);
  return static_cast<bool>(in >> value);
}

std::string mb(std::int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return buf;
}

}  // namespace

IfSnapshot read_interface_bytes(const std::string& sysfs) {
  IfSnapshot out;
  std::error_code ec;
  std::filesystem::directory_iterator it(sysfs, ec), end;
  if (ec) return out;
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    IfBytes b;
    b.name = it->path().filename().string();
    const auto stats = it->path() / "statistics";
    std::uint64_t mtu = 0;
    if (read_counter(it->path() / "mtu", mtu)) b.mtu = static_cast<std::int64_t>(mtu);
    if (read_counter(stats / "tx_bytes", b.tx) && read_counter(stats / "rx_bytes", b.rx)) out.push_back(b);
  }
  std::sort(out.begin(), out.end(), [](const IfBytes& a, const IfBytes& b) { return a.name < b.name; });
  return out;
}

IfSnapshot bytes_since(const IfSnapshot& start, const IfSnapshot& now) {
  IfSnapshot out;
  for (const IfBytes& n : now) {
    IfBytes d{n.name, n.tx, n.rx, n.mtu};
    const auto s = std::find_if(start.begin(), start.end(), [&](const IfBytes& x) { return x.name == n.name; });
    if (s != start.end()) {
      d.tx = n.tx >= s->tx ? n.tx - s->tx : n.tx;
      d.rx = n.rx >= s->rx ? n.rx - s->rx : n.rx;
    }
    out.push_back(d);
  }
  return out;
}

std::string pack(const IfSnapshot& s) {
  std::string out;
  for (const IfBytes& b : s)
    out += b.name + " " + std::to_string(b.tx) + " " + std::to_string(b.rx) + " " + std::to_string(b.mtu) + "\n";
  return out;
}

IfSnapshot unpack_if_snapshot(const std::string& text) {
  IfSnapshot out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    IfBytes b;
    GS_CHECK(static_cast<bool>(fields >> b.name >> b.tx >> b.rx), "interface counters: cannot parse line '", line, "'");
    std::string rest;
    if (fields >> rest) {
      std::size_t used = 0;
      try {
        b.mtu = std::stoll(rest, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      GS_CHECK(used == rest.size() && used > 0, "interface counters: cannot parse line '", line, "'");
    }
    out.push_back(b);
  }
  return out;
}

std::string read_tcp_congestion_control(const std::string& file) {
  std::ifstream in(file);
  std::string name;
  if (!(in >> name)) return "";
  return name;
}

NetTraffic merge_net_traffic(const std::vector<IfSnapshot>& per_rank, std::string window,
                             std::vector<std::string> tcp_cc) {
  NetTraffic t;
  t.nranks = static_cast<int>(per_rank.size());
  t.window = std::move(window);
  GS_CHECK(tcp_cc.empty() || tcp_cc.size() == per_rank.size(), "interface counters: ", tcp_cc.size(),
           " congestion-control names for ", per_rank.size(), " ranks");
  t.tcp_congestion_control = tcp_cc.empty() ? std::vector<std::string>(per_rank.size()) : std::move(tcp_cc);
  std::map<std::string, std::size_t> index;
  for (const IfSnapshot& s : per_rank)
    for (const IfBytes& b : s) index.emplace(b.name, 0);
  for (auto& [name, i] : index) {
    i = t.interfaces.size();
    t.interfaces.push_back(name);
  }
  t.tx.assign(per_rank.size() * t.interfaces.size(), -1);
  t.rx.assign(t.tx.size(), -1);
  t.mtu.assign(t.tx.size(), -1);
  for (std::size_t r = 0; r < per_rank.size(); ++r)
    for (const IfBytes& b : per_rank[r]) {
      const std::size_t k = r * t.interfaces.size() + index.at(b.name);
      t.tx[k] = static_cast<std::int64_t>(b.tx);
      t.rx[k] = static_cast<std::int64_t>(b.rx);
      t.mtu[k] = b.mtu;
    }
  return t;
}

void write_net_traffic(h5::Writer& w, const NetTraffic& t) {
  const std::vector<std::uint64_t> dims = {static_cast<std::uint64_t>(t.nranks), t.interfaces.size()};
  w.group("/net");
  w.attr("/net", "description",
         std::string("bytes each rank's host sent (tx_bytes) and received (rx_bytes) per network interface "
                     "(/sys/class/net/<if>/statistics) during the window; [rank, interface]; -1: the rank has "
                     "no such interface; ranks on one host count the same host-wide counters"));
  w.attr("/net", "window", t.window);
  w.write("/net/interface", t.interfaces);
  w.write("/net/tx_bytes", t.tx, dims);
  w.write("/net/rx_bytes", t.rx, dims);
  w.write("/net/mtu", t.mtu.size() == t.tx.size() ? t.mtu : std::vector<std::int64_t>(t.tx.size(), -1), dims);
  const auto nr = static_cast<std::size_t>(t.nranks);
  w.write("/net/tcp_congestion_control",
          t.tcp_congestion_control.size() == nr ? t.tcp_congestion_control : std::vector<std::string>(nr));
}

std::vector<std::string> net_traffic_lines(const NetTraffic& t, const std::vector<std::string>& hostnames) {
  std::vector<std::string> lines;
  for (int r = 0; r < t.nranks; ++r) {
    std::string items;
    for (std::size_t i = 0; i < t.interfaces.size(); ++i) {
      const std::int64_t tx = t.tx_at(r, i), rx = t.rx_at(r, i);
      if (tx <= 0 && rx <= 0) continue;  // zero traffic: only in the file
      if (!items.empty()) items += ", ";
      items += t.interfaces[i] + " tx " + mb(tx) + " rx " + mb(rx);
    }
    const std::string host = static_cast<std::size_t>(r) < hostnames.size() ? " (" + hostnames[r] + ")" : "";
    const std::size_t ri = static_cast<std::size_t>(r);
    const std::string cc = ri < t.tcp_congestion_control.size() && !t.tcp_congestion_control[ri].empty()
                               ? "; TCP congestion control " + t.tcp_congestion_control[ri]
                               : "";
    lines.push_back("rank " + std::to_string(r) + host + ": " + (items.empty() ? "no traffic" : items) + cc);
  }
  return lines;
}

}  // namespace gradsync
