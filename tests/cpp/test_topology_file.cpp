// Topology files: every shipped file loads, validates and round-trips; malformed
// files fail with ERR_TOPOLOGY naming the file, the line and the field.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include "common/error.hpp"
#include "test_util.hpp"
#include "topology/json_locator.hpp"
#include "topology/topology.hpp"

using namespace gpustripe;

namespace {

// A small valid file; each line is numbered in the comment of the test that edits it.
const char* kGood = R"({
  "schema": 1,
  "name": "two GPUs",
  "sockets": [
    {"id": 0, "numa_node": 0, "cpu": "test cpu", "memory_gbps": 100}
  ],
  "gpus": [
    {"name": "G", "compute_capability": "8.0", "sm_count": 10, "memory_bytes": 1024,
     "copy_engines": 2, "socket": 0,
     "host": {"link": "pcie", "pcie_gen": 4, "pcie_width": 16, "gbps": 31.5},
     "nvlink": {"links": 4, "gbps_per_link": 25, "nvswitch": false}},
    {"name": "G", "compute_capability": "8.0", "sm_count": 10, "memory_bytes": 1024,
     "copy_engines": 2, "socket": 0,
     "host": {"link": "pcie", "pcie_gen": 4, "pcie_width": 16, "gbps": 31.5},
     "nvlink": {"links": 4,
                "gbps_per_link": 25, "nvswitch": false}}
  ],
  "gpu_links": [
    {"a": 0, "b": 1, "links": 4, "gbps_per_link": 25}
  ],
  "peer_access": "all"
}
)";

std::string replace(std::string s, const std::string& from, const std::string& to, int nth = 0) {
  size_t pos = s.find(from);
  for (int i = 0; i < nth && pos != std::string::npos; ++i) pos = s.find(from, pos + 1);
  EXPECT_NE(pos, std::string::npos) << "test bug: '" << from << "' not in the text";
  if (pos != std::string::npos) s.replace(pos, from.size(), to);
  return s;
}

// Loads `text` expecting ERR_TOPOLOGY; returns the message.
std::string load_error(const std::string& text) {
  try {
    load_topology_text(text, "bad.json");
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), GPUSTRIPE_ERR_TOPOLOGY) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error for:\n" << text;
  return "";
}

}  // namespace

TEST(TopologyFile, GoodTextLoads) {
  Topology t = load_topology_text(kGood, "good.json");
  EXPECT_EQ(t.gpu_count(), 2);
  EXPECT_EQ(t.origin, "good.json");
  EXPECT_EQ(t.gpus[1].index, 1);
  EXPECT_EQ(t.gpus[0].cc_major, 8);
  EXPECT_EQ(t.gpus[0].numa_node, 0);
  EXPECT_TRUE(t.can_access_peer(0, 1));
  EXPECT_DOUBLE_EQ(t.direct_gbps(0, 1), 100);
}

TEST(TopologyFile, EveryShippedFileLoadsValidatesAndRoundTrips) {
  std::vector<std::string> names = shipped_topologies();
  for (const char* want : {"h200x4", "h200x8", "beluga-v100x4", "narval-a100x4", "mist-ac922"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want << " is not shipped";
  for (const std::string& n : names) {
    SCOPED_TRACE(n);
    Topology t = load_topology_file(n);
    EXPECT_NO_THROW(t.validate());
    EXPECT_FALSE(t.sources.empty()) << "a shipped file cites its sources";
    EXPECT_FALSE(t.summary().empty());
    std::string json = t.to_json();
    Topology back = load_topology_text(json, n + " (round trip)");
    EXPECT_EQ(back.to_json(), json);
    EXPECT_EQ(back.fingerprint(), t.fingerprint());
    EXPECT_EQ(back.name, t.name);
    for (int i = 0; i < t.gpu_count(); ++i)
      for (int j = 0; j < t.gpu_count(); ++j)
        if (i != j) EXPECT_DOUBLE_EQ(back.direct_gbps(i, j), t.direct_gbps(i, j));
  }
}

TEST(TopologyFile, BareNameAndPathFindTheSameFile) {
  Topology by_name = load_topology_file("h200x4");
  Topology by_path = load_topology_file(topology_dir() + "/h200x4.json");
  EXPECT_EQ(by_name.to_json(), by_path.to_json());
  EXPECT_NE(by_name.origin.find("h200x4.json"), std::string::npos);
}

TEST(TopologyFile, TopologyDirFollowsTheEnvironment) {
  {
    ScopedEnv env("GPUSTRIPE_TOPOLOGY_DIR", source_path("topologies").c_str());
    EXPECT_EQ(topology_dir(), source_path("topologies"));
  }
  {
    ScopedEnv env("GPUSTRIPE_TOPOLOGY_DIR", "/nonexistent/dir");
    try {
      topology_dir();
      FAIL() << "no error for a missing directory";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), GPUSTRIPE_ERR_IO);
      EXPECT_NE(std::string(e.what()).find("/nonexistent/dir"), std::string::npos);
    }
  }
  {
    // Unset: found next to the library or in the source tree, never empty.
    ScopedEnv env("GPUSTRIPE_TOPOLOGY_DIR", nullptr);
    EXPECT_NO_THROW(load_topology_file("h200x4"));
  }
}

TEST(TopologyFile, MissingFileAndUnknownNameAreIoErrors) {
  try {
    load_topology_file("no-such-node");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), GPUSTRIPE_ERR_IO);
    EXPECT_NE(std::string(e.what()).find("h200x4"), std::string::npos) << "lists the shipped names: " << e.what();
  }
  try {
    load_topology_file("/tmp/does/not/exist.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), GPUSTRIPE_ERR_IO);
  }
}

TEST(TopologyFile, ErrorsFromAFileNameThePath) {
  std::string path = ::testing::TempDir() + "/narval.json";
  {
    std::ofstream out(path);
    out << replace(kGood, "\"links\": 4,\n", "\"links\": \"four\",\n");
  }
  try {
    load_topology_file(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ":15: gpus[1].nvlink.links: expected an integer, got \"four\"");
  }
}

TEST(TopologyFile, SyntaxErrorNamesTheLine) {
  std::string m = load_error(replace(kGood, "\"copy_engines\": 2, \"socket\": 0,", "\"copy_engines\": 2 \"socket\": 0,"));
  EXPECT_NE(m.find("bad.json:9: JSON syntax error"), std::string::npos) << m;
  m = load_error("{\n  \"schema\": 1,\n");
  EXPECT_NE(m.find("bad.json:3: JSON syntax error"), std::string::npos) << m;
}

TEST(TopologyFile, WrongTypeNamesFieldAndLine) {
  EXPECT_EQ(load_error(replace(kGood, "\"sm_count\": 10", "\"sm_count\": \"ten\"", 1)),
            "bad.json:12: gpus[1].sm_count: expected an integer, got \"ten\"");
  EXPECT_EQ(load_error(replace(kGood, "\"gbps\": 31.5", "\"gbps\": true")),
            "bad.json:10: gpus[0].host.gbps: expected a number, got true");
  EXPECT_EQ(load_error(replace(kGood, "\"sm_count\": 10", "\"sm_count\": 10.5")),
            "bad.json:8: gpus[0].sm_count: expected an integer, got 10.5");
  EXPECT_EQ(load_error(replace(kGood, "\"nvswitch\": false", "\"nvswitch\": 0")),
            "bad.json:11: gpus[0].nvlink.nvswitch: expected true or false, got 0");
  EXPECT_EQ(load_error(replace(kGood, "\"compute_capability\": \"8.0\"", "\"compute_capability\": \"eight\"")),
            "bad.json:8: gpus[0].compute_capability: expected \"major.minor\" such as \"9.0\", got \"eight\"");
}

TEST(TopologyFile, UnknownKeyIsRejectedWithASuggestion) {
  std::string m = load_error(replace(kGood, "\"nvlink\": {\"links\": 4, \"gbps", "\"nvlinks\": {\"links\": 4, \"gbps"));
  EXPECT_EQ(m.rfind("bad.json:11: gpus[0].nvlinks: unknown key (did you mean \"nvlink\"?)", 0), 0u) << m;
  m = load_error(replace(kGood, "\"peer_access\"", "\"peer_acess\""));
  EXPECT_EQ(m.rfind("bad.json:21: peer_acess: unknown key (did you mean \"peer_access\"?)", 0), 0u) << m;
}

TEST(TopologyFile, MissingFieldNamesTheEnclosingObject) {
  EXPECT_EQ(load_error(replace(kGood, "\"sm_count\": 10, ", "", 1)),
            "bad.json:12: gpus[1].sm_count: missing required field");
  EXPECT_EQ(load_error(replace(kGood, "  \"name\": \"two GPUs\",\n", "")), "bad.json:1: name: missing required field");
}

TEST(TopologyFile, LinkToMissingGpu) {
  EXPECT_EQ(load_error(replace(kGood, "{\"a\": 0, \"b\": 1,", "{\"a\": 0, \"b\": 5,")),
            "bad.json:19: gpu_links[0].b: GPU 5 does not exist: the node has GPUs 0-1");
}

TEST(TopologyFile, ValuesOutOfRange) {
  EXPECT_EQ(load_error(replace(kGood, "\"socket\": 0,\n     \"host\"", "\"socket\": 3,\n     \"host\"")),
            "bad.json:9: gpus[0].socket: socket 3 does not exist: the node has sockets 0-0");
  EXPECT_EQ(load_error(replace(kGood, "\"pcie_width\": 16", "\"pcie_width\": 12")),
            "bad.json:10: gpus[0].host.pcie_width: must be 1, 2, 4, 8, 16 or 32 (0 = unknown), got 12");
  EXPECT_EQ(load_error(replace(kGood, "\"gbps\": 31.5", "\"gbps\": -1")), "bad.json:10: gpus[0].host.gbps: must be >= 0, got -1");
  EXPECT_EQ(load_error(replace(kGood, "\"schema\": 1", "\"schema\": 2")),
            "bad.json:2: schema: unsupported schema version 2: this build reads version 1");
  EXPECT_EQ(load_error(replace(kGood, "\"links\": 4, \"gbps_per_link\": 25}", "\"links\": 6, \"gbps_per_link\": 25}")),
            "bad.json:19: gpu_links[0].links: GPU 0 has 4 NVLinks (gpus[0].nvlink.links) but its links use 6");
}

TEST(TopologyFile, PeerMatrixMustBeSquareAndSymmetric) {
  EXPECT_EQ(load_error(replace(kGood, "\"peer_access\": \"all\"", "\"peer_access\": [[0, 1],\n    [0, 0]]")),
            "bad.json:21: peer_access[0][1]: the matrix is not symmetric: [0][1] = 1 but [1][0] = 0");
  EXPECT_EQ(load_error(replace(kGood, "\"peer_access\": \"all\"", "\"peer_access\": [[0, 1]]")),
            "bad.json:21: peer_access: must have 2 rows (one per GPU), got 1");
  EXPECT_EQ(load_error(replace(kGood, "\"peer_access\": \"all\"", "\"peer_access\": [[0, 1], [1, 2]]")),
            "bad.json:21: peer_access[1][1]: expected 0 or 1, got 2");
  Topology t = load_topology_text(replace(kGood, "\"peer_access\": \"all\"", "\"peer_access\": [[0, false], [0, 0]]"), "x");
  EXPECT_FALSE(t.can_access_peer(0, 1));
  EXPECT_EQ(t.direct_gbps(0, 1), 0) << "no peer access: no direct path, even over NVLink";
}

TEST(TopologyFile, DuplicateKeyIsAnError) {
  EXPECT_EQ(load_error(replace(kGood, "\"name\": \"two GPUs\",", "\"name\": \"two GPUs\", \"name\": \"x\",")),
            "bad.json:3: name: this key appears twice in its object");
}

TEST(JsonLocator, LinesOfNestedPaths) {
  JsonLocator loc(kGood);
  EXPECT_EQ(loc.line_of(""), 1);
  EXPECT_EQ(loc.line_of("schema"), 2);
  EXPECT_EQ(loc.line_of("sockets[0]"), 5);
  EXPECT_EQ(loc.line_of("sockets[0].memory_gbps"), 5);
  EXPECT_EQ(loc.line_of("gpus"), 7);
  EXPECT_EQ(loc.line_of("gpus[1]"), 12);
  EXPECT_EQ(loc.line_of("gpus[1].copy_engines"), 13);
  EXPECT_EQ(loc.line_of("gpus[1].nvlink.links"), 15);
  EXPECT_EQ(loc.line_of("gpus[1].nvlink.gbps_per_link"), 16);
  EXPECT_EQ(loc.line_of("gpus[1].nvlink.missing"), 15) << "a missing member: the line of its object";
  EXPECT_EQ(loc.line_of("gpus[7].name"), 7) << "a missing element: the line of its array";
  EXPECT_EQ(loc.line_of("peer_access"), 21);
  EXPECT_FALSE(loc.first_duplicate());
}

TEST(JsonLocator, StringsWithBracketsAndEscapesDoNotConfuseIt) {
  JsonLocator loc("{\"a\": \"x]}\\\"{[\",\n \"b\": [1,\n 2, {\"c\": \"\\\\\"}],\n \"d\": null}");
  EXPECT_EQ(loc.line_of("a"), 1);
  EXPECT_EQ(loc.line_of("b"), 2);
  EXPECT_EQ(loc.line_of("b[1]"), 3);
  EXPECT_EQ(loc.line_of("b[2].c"), 3);
  EXPECT_EQ(loc.line_of("d"), 4);
}

TEST(JsonLocator, FindsDuplicateKeys) {
  JsonLocator loc("{\"a\": {\"x\": 1,\n \"x\": 2}}");
  ASSERT_TRUE(loc.first_duplicate());
  EXPECT_EQ(*loc.first_duplicate(), "a.x");
  EXPECT_FALSE(JsonLocator("{\"a\": {\"x\": 1}, \"b\": {\"x\": 2}}").first_duplicate());
}
