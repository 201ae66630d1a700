package limiter_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a throwaway redis-server that a test starts in its own
// directory, stops by PID and may start again on the same port and data.
type redisServer struct {
	t    testing.TB
	dir  string
	port int
	args []string
	cmd  *exec.Cmd
}

// startRedisServer starts redis-server on a free loopback port with data
// in a fresh temporary directory, extra arguments appended. The test is
// skipped when redis-server is not installed; the server is stopped when
// the test ends.
func startRedisServer(t testing.TB, args ...string) *redisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &redisServer{t: t, dir: t.TempDir(), port: port, args: args}
	s.start()
	t.Cleanup(s.stop)
	return s
}

// Addr returns host:port.
func (s *redisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *redisServer) start() {
	s.t.Helper()
	args := append([]string{
		"--bind", "127.0.0.1", "--port", strconv.Itoa(s.port), "--dir", s.dir,
		"--daemonize", "no", "--save", "", "--logfile", filepath.Join(s.dir, "redis.log"),
	}, s.args...)
	s.cmd = exec.Command("redis-server", args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.t.Fatalf("redis-server on %s did not answer PING:\n%s", s.Addr(), log)
		}
		time.Sleep(20 * time.Millisecond) // polling a starting process, not waiting for time
	}
}

// stop sends SIGTERM to the server's PID (Redis then shuts down cleanly,
// writing its append-only file) and waits for it to exit.
func (s *redisServer) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	s.cmd = nil
}

// restart stops the server and starts it again on the same port and data.
func (s *redisServer) restart() {
	s.t.Helper()
	s.stop()
	s.start()
}
