package enforce

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ownRedis is a redis-server of one test's own, which the test kills and
// starts again on the same port: the shared test server must stay up for
// the tests running beside it.
type ownRedis struct {
	t    testing.TB
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

// startOwnRedis starts redis-server on a free loopback port with its data
// in a temporary directory, and stops it when the test ends. The test is
// skipped when redis-server is not installed.
func startOwnRedis(t testing.TB) *ownRedis {
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
	r := &ownRedis{t: t, dir: t.TempDir(), port: port}
	r.start()
	t.Cleanup(r.kill)
	return r
}

// Addr returns host:port.
func (r *ownRedis) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// start starts the server and waits until it answers PING.
func (r *ownRedis) start() {
	r.t.Helper()
	r.cmd = exec.Command("redis-server", "--bind", "127.0.0.1", "--port", strconv.Itoa(r.port), "--dir", r.dir,
		"--daemonize", "no", "--save", "", "--appendonly", "no", "--logfile", filepath.Join(r.dir, "redis.log"))
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("start redis-server: %v", err)
	}
	r.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(r.cmd, r.done)
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1, DialerRetries: 1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
			r.t.Fatalf("redis-server on %s did not answer PING:\n%s", r.Addr(), log)
		}
		time.Sleep(10 * time.Millisecond) // polling a starting process
	}
}

// kill sends SIGKILL to the server and waits until it is gone.
func (r *ownRedis) kill() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	<-r.done
	r.cmd = nil
}
