// Tests of core/netif.hpp: interface byte counters, their deltas, the per-rank merge and
// /net in a result file. The sysfs reader runs on a fake tree (a temp folder laid out like
// /sys/class/net) and on the real one.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "core/error.hpp"
#include "core/h5io.hpp"
#include "core/netif.hpp"

namespace gs = gradsync;
namespace fs = std::filesystem;

namespace {

void fake_if(const fs::path& root, const std::string& name, std::uint64_t tx, std::uint64_t rx, int mtu = 0) {
  fs::create_directories(root / name / "statistics");
  if (mtu > 0) std::ofstream(root / name / "mtu") << mtu << "\n";
  std::ofstream(root / name / "statistics" / "tx_bytes") << tx << "\n";
  std::ofstream(root / name / "statistics" / "rx_bytes") << rx << "\n";
}

fs::path temp_dir(const std::string& tag) {
  const fs::path d = fs::temp_directory_path() / ("gs-netif-" + tag + "-" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TEST(NetIf, ReadsASysfsTreeSortedAndSkipsUnreadable) {
  const fs::path d = temp_dir("read");
  fake_if(d, "eth1", 10, 20, 9000);
  fake_if(d, "eth0", 1, 2);
  fs::create_directories(d / "broken");  // no statistics: left out
  const gs::IfSnapshot s = gs::read_interface_bytes(d.string());
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].name, "eth0");
  EXPECT_EQ(s[1].name, "eth1");
  EXPECT_EQ(s[1].tx, 10u);
  EXPECT_EQ(s[1].rx, 20u);
  EXPECT_EQ(s[1].mtu, 9000);
  EXPECT_EQ(s[0].mtu, -1);  // no mtu file
  EXPECT_TRUE(gs::read_interface_bytes((d / "none").string()).empty());
  fs::remove_all(d);
}

TEST(NetIf, RealSysfsHasLoopback) {
  if (!fs::exists("/sys/class/net/lo")) GTEST_SKIP() << "no /sys/class/net/lo here";
  bool lo = false;
  for (const auto& b : gs::read_interface_bytes()) lo = lo || b.name == "lo";
  EXPECT_TRUE(lo);
}

TEST(NetIf, DeltaKeepsZeroTrafficAndCountsNewOrResetFromZero) {
  const gs::IfSnapshot start = {{"eth0", 100, 200}, {"eth1", 5, 5}, {"gone", 1, 1}};
  const gs::IfSnapshot now = {{"docker0", 7, 0}, {"eth0", 150, 260}, {"eth1", 3, 5}};
  const gs::IfSnapshot d = gs::bytes_since(start, now);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].name, "docker0");  // new: from 0
  EXPECT_EQ(d[0].tx, 7u);
  EXPECT_EQ(d[1].tx, 50u);
  EXPECT_EQ(d[1].rx, 60u);
  EXPECT_EQ(d[2].tx, 3u);  // went backwards (re-created): from 0
  EXPECT_EQ(d[2].rx, 0u);  // zero traffic stays in
}

TEST(NetIf, PackRoundTripsAndRejectsJunk) {
  const gs::IfSnapshot s = {{"eth0", 1ull << 40, 3, 1500}, {"lo", 0, 0}};
  const gs::IfSnapshot back = gs::unpack_if_snapshot(gs::pack(s));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].tx, 1ull << 40);
  EXPECT_EQ(back[0].mtu, 1500);
  EXPECT_EQ(back[1].mtu, -1);
  EXPECT_EQ(gs::unpack_if_snapshot("eth0 1 2\n")[0].mtu, -1);  // no mtu field
  EXPECT_THROW(gs::unpack_if_snapshot("eth0 1 2 15x\n"), gs::Error);
  EXPECT_EQ(back[1].name, "lo");
  EXPECT_TRUE(gs::unpack_if_snapshot("").empty());
  EXPECT_THROW(gs::unpack_if_snapshot("eth0 x 3\n"), gs::Error);
}

TEST(NetIf, MergeOverTheUnionWithMinusOneForAbsent) {
  const gs::NetTraffic t = gs::merge_net_traffic({{{"eth0", 10, 11}, {"lo", 0, 0}}, {{"eth1", 20, 21}, {"lo", 1, 1}}},
                                                 "w");
  ASSERT_EQ(t.interfaces, (std::vector<std::string>{"eth0", "eth1", "lo"}));
  EXPECT_EQ(t.nranks, 2);
  EXPECT_EQ(t.tx_at(0, 0), 10);
  EXPECT_EQ(t.tx_at(0, 1), -1);
  EXPECT_EQ(t.rx_at(1, 1), 21);
  EXPECT_EQ(t.tx_at(1, 0), -1);
  const auto lines = gs::net_traffic_lines(t, {"h0", "h1"});
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "rank 0 (h0): eth0 tx 0.0 MB rx 0.0 MB");  // lo (zero) not printed
  EXPECT_NE(lines[1].find("eth1"), std::string::npos);
  EXPECT_EQ(gs::net_traffic_lines(gs::merge_net_traffic({{{"lo", 0, 0}}}, "w"), {})[0], "rank 0: no traffic");
}

TEST(NetIf, WritesNetGroupThatReadsBack) {
  const fs::path d = temp_dir("h5");
  const std::string path = (d / "n.h5").string();
  const gs::NetTraffic t =
      gs::merge_net_traffic({{{"eth0", 10, 11, 1500}, {"eth1", 0, 0}}, {{"eth0", 12, 13, 1500}, {"eth1", 4, 5, 9000}}},
                            "the sweep", {"cubic", "bbr"});
  {
    gs::h5::Writer w(path);
    gs::write_net_traffic(w, t);
    w.commit();
  }
  gs::h5::Reader r(path);
  EXPECT_EQ(r.read_strings("/net/interface"), t.interfaces);
  EXPECT_EQ(r.dims("/net/tx_bytes"), (std::vector<std::uint64_t>{2, 2}));
  EXPECT_EQ(r.read_int("/net/tx_bytes"), t.tx);
  EXPECT_EQ(r.read_int("/net/rx_bytes"), t.rx);
  EXPECT_EQ(r.read_int("/net/mtu"), (std::vector<std::int64_t>{1500, -1, 1500, 9000}));
  EXPECT_EQ(r.attr_string("/net", "window"), "the sweep");
  EXPECT_EQ(r.read_strings("/net/tcp_congestion_control"), (std::vector<std::string>{"cubic", "bbr"}));
  fs::remove_all(d);
}

TEST(NetIf, TcpCongestionControlIsReadSaidAndUnknownIsEmpty) {
  const fs::path d = temp_dir("cc");
  std::ofstream(d / "cc") << "bbr\n";
  EXPECT_EQ(gs::read_tcp_congestion_control((d / "cc").string()), "bbr");
  EXPECT_EQ(gs::read_tcp_congestion_control((d / "absent").string()), "");
  // This host's: a name on Linux (the test machines run Linux).
  EXPECT_FALSE(gs::read_tcp_congestion_control().empty());
  const gs::NetTraffic t = gs::merge_net_traffic({{{"eth0", 10, 11}}, {{"eth0", 12, 13}}}, "w", {"cubic", ""});
  const auto lines = gs::net_traffic_lines(t, {"h0", "h1"});
  EXPECT_EQ(lines[0], "rank 0 (h0): eth0 tx 0.0 MB rx 0.0 MB; TCP congestion control cubic");
  EXPECT_EQ(lines[1], "rank 1 (h1): eth0 tx 0.0 MB rx 0.0 MB");  // unknown: not said
  EXPECT_EQ(gs::merge_net_traffic({{{"lo", 0, 0}}}, "w").tcp_congestion_control, (std::vector<std::string>{""}));
  EXPECT_THROW(gs::merge_net_traffic({{{"lo", 0, 0}}}, "w", {"a", "b"}), gs::Error);
  // A file without the field's value ("" everywhere) still writes /net/tcp_congestion_control.
  const std::string path = (d / "n.h5").string();
  {
    gs::h5::Writer w(path);
    gs::write_net_traffic(w, gs::merge_net_traffic({{{"lo", 0, 0}}}, "w"));
    w.commit();
  }
  EXPECT_EQ(gs::h5::Reader(path).read_strings("/net/tcp_congestion_control"), (std::vector<std::string>{""}));
  fs::remove_all(d);
}

}  // namespace
