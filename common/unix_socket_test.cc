#include "common/unix_socket.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

namespace cordon {
namespace {

using std::chrono::milliseconds;

std::string temp_socket_path() {
  char dir[] = "/tmp/cordon-unix-XXXXXX";
  EXPECT_NE(mkdtemp(dir), nullptr);
  return std::string(dir) + "/s.sock";
}

TEST(UnixSocket, ListensWithMode0600AndReplacesAStaleFile) {
  std::string path = temp_socket_path();
  {
    auto first = listen_unix(path);
    ASSERT_TRUE(first) << first.error().message;
  }  // closed: the file stays behind, as after a crash
  auto fd = listen_unix(path);
  ASSERT_TRUE(fd) << fd.error().message;
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  auto second = listen_unix(path);  // the first still serves
  ASSERT_FALSE(second);
  EXPECT_NE(second.error().message.find("another process is serving " + path), std::string::npos);
  unlink(path.c_str());
  ASSERT_EQ(mkdir(path.c_str(), 0700), 0);
  auto not_socket = listen_unix(path);
  ASSERT_FALSE(not_socket);
  EXPECT_NE(not_socket.error().message.find("is not a socket"), std::string::npos);
  rmdir(path.c_str());
  rmdir(path.substr(0, path.rfind('/')).c_str());
}

TEST(UnixSocket, ErrorsNameThePath) {
  auto too_long = listen_unix("/tmp/" + std::string(200, 'x'));
  ASSERT_FALSE(too_long);
  EXPECT_NE(too_long.error().message.find("longer than"), std::string::npos);
  auto absent = connect_unix("/nonexistent/cordon.sock", milliseconds(100));
  ASSERT_FALSE(absent);
  EXPECT_NE(absent.error().message.find("/nonexistent/cordon.sock"), std::string::npos);
}

TEST(UnixSocket, OneLineRequestAndAnswer) {
  std::string path = temp_socket_path();
  auto srv = listen_unix(path);
  ASSERT_TRUE(srv) << srv.error().message;
  std::thread client([&] {
    auto c = connect_unix(path, milliseconds(2000));
    ASSERT_TRUE(c) << c.error().message;
    ASSERT_TRUE(write_all(c->get(), "{\"op\":\"ping\"}\nrest"));
    auto reply = read_line(c->get(), 100, milliseconds(2000));
    ASSERT_TRUE(reply) << reply.error().message;
    EXPECT_EQ(*reply, "pong");
  });
  UniqueFd conn(accept(srv->get(), nullptr, nullptr));
  ASSERT_TRUE(conn.valid());
  EXPECT_TRUE(peer_is_root_or_self(conn.get()));
  auto line = read_line(conn.get(), 100, milliseconds(2000));
  ASSERT_TRUE(line) << line.error().message;
  EXPECT_EQ(*line, "{\"op\":\"ping\"}");
  EXPECT_TRUE(write_all(conn.get(), "pong\n"));
  client.join();
  unlink(path.c_str());
  rmdir(path.substr(0, path.rfind('/')).c_str());
}

TEST(UnixSocket, ReadLineBoundsSizeTimeAndEof) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  ASSERT_TRUE(write_all(b.get(), std::string(64, 'x')));
  auto big = read_line(a.get(), 16, milliseconds(500));
  ASSERT_FALSE(big);
  EXPECT_NE(big.error().message.find("longer than 16"), std::string::npos);

  auto slow = read_line(a.get(), 1000, milliseconds(50));  // nothing more arrives
  ASSERT_FALSE(slow);
  EXPECT_NE(slow.error().message.find("within 50 ms"), std::string::npos);

  ASSERT_TRUE(write_all(b.get(), "partial"));
  b.reset();
  EXPECT_FALSE(read_line(a.get(), 1000, milliseconds(500)));
}

TEST(UnixSocket, EofMayEndTheLine) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  ASSERT_TRUE(write_all(b.get(), "no newline"));
  b.reset();
  auto line = read_line(a.get(), 100, milliseconds(500), /*eof_ends_line=*/true);
  ASSERT_TRUE(line) << line.error().message;
  EXPECT_EQ(*line, "no newline");
}

}  // namespace
}  // namespace cordon
