package testenv

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisServer is a redis-server of one test's own, in its own directory,
// which the test may kill, stop and start again on the same port and
// data: the shared test server must stay up for the tests beside it.
type RedisServer struct {
	t    testing.TB
	dir  string
	port int
	args []string
	// conf, when set, is a sentinel's configuration file: the server
	// runs as a sentinel (redis-server --sentinel, which Debian's
	// redis-sentinel also runs), which rewrites it as it learns.
	conf string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartRedisServer starts redis-server on a free loopback port with data
// in a fresh temporary directory, extra arguments appended, and stops it
// when the test ends. The test is skipped when redis-server is not
// installed.
func StartRedisServer(t testing.TB, args ...string) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed")
	}
	s := &RedisServer{t: t, dir: t.TempDir(), port: FreePort(t), args: args}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// Addr returns host:port.
func (s *RedisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Start starts the server and waits until it answers PING.
func (s *RedisServer) Start() {
	s.t.Helper()
	var args []string
	if s.conf != "" {
		args = []string{s.conf, "--sentinel"}
	}
	args = append(append(args,
		"--bind", "127.0.0.1", "--port", strconv.Itoa(s.port), "--dir", s.dir,
		"--daemonize", "no", "--save", "", "--logfile", filepath.Join(s.dir, "redis.log")),
		s.args...)
	s.cmd = exec.Command("redis-server", args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(s.cmd, s.done)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.t.Fatalf("redis-server on %s did not answer PING:\n%s", s.Addr(), log)
		}
		time.Sleep(10 * time.Millisecond) // polling a starting process, not waiting for time
	}
}

// Kill sends SIGKILL to the server, as a crash would, and waits until it
// is gone.
func (s *RedisServer) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Pause stops the server's process (SIGSTOP) until Resume: it answers
// nothing, a replica acknowledges nothing, and connections stay open, as
// with a server stalled or cut off without a reset. A test that pauses a
// server resumes it before its other cleanups, which Stop does too.
func (s *RedisServer) Pause() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatalf("pause redis-server: %v", err)
	}
}

// Resume continues a paused server (SIGCONT).
func (s *RedisServer) Resume() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		s.t.Fatalf("resume redis-server: %v", err)
	}
}

// Stop sends SIGTERM (Redis shuts down cleanly, writing its append-only
// file) and waits up to 10 s for it to exit, then kills it.
func (s *RedisServer) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a paused server
	select {
	case <-s.done:
		s.cmd = nil
	case <-time.After(10 * time.Second):
		s.Kill()
	}
}

// Restart stops the server and starts it again on the same port and data.
func (s *RedisServer) Restart() {
	s.t.Helper()
	s.Stop()
	s.Start()
}

// LogBuffer is a bytes.Buffer that loggers may write to while a test
// reads it.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
